// Grammar: GBNF parsed, text matched byte by byte, and hostile grammars
// refused or bounded by the limits the engine reports.
#include "model/runtime/grammar.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "model/runtime/grammar_testing.h"

namespace tensorpc {
namespace {

struct Match {
  bool valid;     // a valid prefix
  bool complete;  // a whole sentence
};

Match match(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  GrammarState state(grammar);
  state.advance(text);
  return {state.valid(), state.complete()};
}

std::string parse_error(std::string_view gbnf, const GrammarLimits& limits = {}) {
  auto grammar = Grammar::parse(gbnf, limits);
  if (grammar.ok()) return "(parsed)";
  EXPECT_EQ(grammar.status().code(), StatusCode::invalid_argument);
  return grammar.status().message();
}

TEST(GrammarMatch, LiteralsClassesGroupsAndRepetitions) {
  const auto g = test::parse_or_fail(R"(
    root ::= "a" [0-9]+ ( "x" | "yz" )? tail{2,3}   # a comment
    tail ::= [^"\\] "."
  )");
  ASSERT_TRUE(g);
  EXPECT_TRUE(match(g, "a1").valid);
  EXPECT_FALSE(match(g, "a1").complete);
  EXPECT_TRUE(match(g, "a12yzq.r.").complete);
  EXPECT_TRUE(match(g, "a12q.r.s.").complete);
  EXPECT_FALSE(match(g, "a12q.r.s.t.").valid) << "at most 3 tails";
  EXPECT_FALSE(match(g, "a12\".r.").valid) << "the class excludes the quote";
  EXPECT_FALSE(match(g, "b").valid);
  EXPECT_FALSE(match(g, "a").complete);
}

TEST(GrammarMatch, EscapesInLiteralsAndClasses) {
  const auto g = test::parse_or_fail(R"(root ::= "\n\t\"\\\x41\u00e9" [\x30-\x32\]])");
  ASSERT_TRUE(g);
  EXPECT_TRUE(match(g, "\n\t\"\\A\xC3\xA9]").complete);
  EXPECT_TRUE(match(g,
                    "\n\t\"\\A\xC3\xA9"
                    "1")
                  .complete);
  EXPECT_FALSE(match(g,
                     "\n\t\"\\A\xC3\xA9"
                     "3")
                   .valid);
}

TEST(GrammarMatch, CountedRepetitions) {
  const auto g = test::parse_or_fail(R"(root ::= "a"{3} "b"{ 2, } "c"{0 , 2})");
  ASSERT_TRUE(g);
  EXPECT_FALSE(match(g, "aab").valid);
  EXPECT_FALSE(match(g, "aaab").complete);
  EXPECT_TRUE(match(g, "aaabb").complete);
  EXPECT_TRUE(match(g, "aaabbbbbcc").complete);
  EXPECT_FALSE(match(g, "aaabbccc").valid);
}

TEST(GrammarMatch, CodePointClassesAcrossByteBoundaries) {
  // Greek letters are two bytes each; the emoji four.
  const auto g = test::parse_or_fail(R"(root ::= [α-ω]+ [\U0001F600-\U0001F64F] )");
  ASSERT_TRUE(g);
  GrammarState state(g);
  const std::string text = "\xCE\xB1\xCF\x89\xF0\x9F\x98\x80";  // αω😀
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_TRUE(state.advance_byte(static_cast<uint8_t>(text[i]))) << "byte " << i;
    EXPECT_EQ(state.complete(), i == text.size() - 1) << "byte " << i;
  }
  // A cut-off character is a valid prefix only if what it may become is in the class.
  EXPECT_FALSE(match(g, "\xD0").valid) << "U+0400..U+043F holds no Greek small letter";
  EXPECT_TRUE(match(g, "\xCE").valid);
  EXPECT_FALSE(match(g, "\xFF").valid) << "not UTF-8";
  // Overlong forms and surrogates are not UTF-8 either, even cut off.
  const auto any = test::parse_or_fail(R"(root ::= .+)");
  EXPECT_FALSE(match(any, "\xF0\x80").valid);
  EXPECT_FALSE(match(any, "\xE0\x81\xA5").valid);
  EXPECT_FALSE(match(any, "\xED\xA0").valid);
  EXPECT_FALSE(match(any, "\xF4\x90").valid);
  EXPECT_TRUE(match(any, "\xF4\x8F\xBF\xBF").complete);
}

TEST(GrammarMatch, CopiesAreIndependent) {
  const auto g = test::parse_or_fail(R"(root ::= "ab" | "ac")");
  ASSERT_TRUE(g);
  GrammarState a(g);
  ASSERT_TRUE(a.advance("a"));
  GrammarState b = a;
  EXPECT_TRUE(b.advance("b"));
  EXPECT_TRUE(b.complete());
  EXPECT_FALSE(a.complete());
  EXPECT_TRUE(a.advance("c"));
  EXPECT_TRUE(a.complete());
}

TEST(GrammarErrors, NameTheLineAndColumn) {
  EXPECT_EQ(parse_error("root ::= \"a\"\nitem ::= \"b"), "grammar: line 2, column 10: unterminated literal");
  EXPECT_EQ(parse_error("root ::= [a-z"), "grammar: line 1, column 10: unterminated character class");
  EXPECT_EQ(parse_error("root ::= x\n"), "grammar: line 1, column 10: rule 'x' is not defined");
  EXPECT_EQ(parse_error("root ::= (\"a\""), "grammar: line 1, column 10: '(' without ')'");
  EXPECT_EQ(parse_error("root ::= \"a\" )"), "grammar: line 1, column 14: ')' without '('");
  EXPECT_EQ(parse_error("root ::= \"\\q\""), "grammar: line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(parse_error("root ::= \"a\"{3,1}"), "grammar: line 1, column 13: in {m,n}, n is below m");
  EXPECT_EQ(parse_error("root ::= \"a\" ; "), "grammar: line 1, column 14: unexpected ';'");
  EXPECT_EQ(parse_error("root = \"a\""), "grammar: line 1, column 6: expected '::=' after rule name 'root'");
  EXPECT_EQ(parse_error("a ::= \"a\"\na ::= \"b\""), "grammar: line 2, column 1: rule 'a' is defined twice");
  EXPECT_EQ(parse_error("item ::= \"a\""), "the grammar has no rule 'root'");
}

TEST(GrammarLimits, LeftRecursionIsRefusedNamingTheRule) {
  EXPECT_EQ(parse_error("root ::= root \"a\" | \"a\""),
            "rule 'root' is left-recursive (root -> root, matching no character on the way)");
  EXPECT_EQ(parse_error("root ::= expr\nexpr ::= term \"+\" | \"1\"\nterm ::= expr \"*\""),
            "rule 'expr' is left-recursive (expr -> term -> expr, matching no character on the way)");
  // Through a rule that may match nothing.
  EXPECT_EQ(parse_error("root ::= opt root \"a\" | \"b\"\nopt ::= \"x\"?"),
            "rule 'root' is left-recursive (root -> root, matching no character on the way)");
  // Right recursion is fine.
  EXPECT_EQ(parse_error("root ::= \"a\" root | \"b\""), "(parsed)");
}

TEST(GrammarLimits, HugeRepetitionCountsAreRefused) {
  EXPECT_EQ(parse_error("root ::= \"x\"{100000}"),
            "grammar: line 1, column 13: repetition count 100000 is above the limit of 1000");
  EXPECT_EQ(parse_error("root ::= \"x\"{1,99999999999999999999}"),
            "grammar: line 1, column 13: repetition count 1099511627776 is above the limit of 1000");
  // Each count is allowed, their sum written out is not: the size limit refuses it.
  EXPECT_EQ(parse_error("root ::= \"" + std::string(600, 'x') + "\"{1000}"),
            "the grammar is larger than 500000 symbols (repetitions written out)");
  // A group is a rule, so repeating a repeated group writes out references only.
  const auto nested = test::parse_or_fail("root ::= ((\"ab\"{1000}){1000}){1000}");
  ASSERT_TRUE(nested);
  EXPECT_LT(nested->n_symbols(), 10000);
  GrammarState state(nested);
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(state.advance("ab")) << i;
  EXPECT_LE(state.n_stacks(), 4u);
}

TEST(GrammarLimits, DeepNestingIsRefused) {
  const std::string deep = "root ::= " + std::string(10000, '(') + "\"a\"" + std::string(10000, ')');
  EXPECT_EQ(parse_error(deep), "grammar: line 1, column 110: groups nested deeper than 100");
  GrammarLimits small;
  small.max_text_bytes = 100;
  EXPECT_EQ(parse_error(std::string(200, ' '), small), "grammar: the text is larger than 100 bytes");
}

TEST(GrammarLimits, RuleCountIsLimited) {
  std::string many = "root ::= r0\n";
  for (int i = 0; i < 50; ++i) {
    std::ostringstream rule;
    rule << "r" << i << " ::= \"a\" r" << i + 1 << "\n";
    many += rule.str();
  }
  many += "r50 ::= \"b\"\n";
  GrammarLimits limits;
  limits.max_rules = 20;
  EXPECT_EQ(parse_error(many, limits), "grammar: line 20, column 13: more than 20 rules");
}

// a30 stands for 2^30 characters, but the matcher holds positions, not expansions.
TEST(GrammarLimits, ExponentiallyExpandingRulesMatchWithFewStacks) {
  std::string gbnf = "root ::= a30\na0 ::= \"x\"\n";
  for (int k = 1; k <= 30; ++k) {
    std::ostringstream rule;
    rule << "a" << k << " ::= a" << k - 1 << " a" << k - 1 << "\n";
    gbnf += rule.str();
  }
  const auto g = test::parse_or_fail(gbnf);
  ASSERT_TRUE(g);
  GrammarState state(g);
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(state.advance("x")) << i;
    ASSERT_EQ(state.n_stacks(), 1u);
  }
  EXPECT_FALSE(state.complete());
}

// Each "a" doubles the ways to go on: the matcher fails with an error once
// the stacks pass the limit, and never holds more.
TEST(GrammarLimits, AmbiguityThatMultipliesStacksFailsCleanly) {
  GrammarLimits limits;
  limits.max_stacks = 256;
  auto parsed = Grammar::parse(R"(root ::= r
    r ::= "a" r "b" | "a" r "c" | "")",
                               limits);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  GrammarState state(parsed.value());
  int fed = 0;
  for (; fed < 100 && state.advance("a"); ++fed) EXPECT_LE(state.n_stacks(), 256u);
  EXPECT_LT(fed, 100);
  EXPECT_FALSE(state.valid());
  EXPECT_EQ(state.error().code(), StatusCode::out_of_memory);
  EXPECT_NE(state.error().message().find("more than 256 parse stacks"), std::string::npos) << state.error().message();
  EXPECT_FALSE(state.advance("b")) << "a failed state stays failed";
}

TEST(GrammarLimits, NestingInTheTextIsBoundedByStackDepth) {
  GrammarLimits limits;
  limits.max_stack_depth = 64;
  auto parsed = Grammar::parse(R"g(root ::= "(" root ")" | "x")g", limits);
  ASSERT_TRUE(parsed.ok());
  GrammarState state(parsed.value());
  int depth = 0;
  while (depth < 1000 && state.advance("(")) ++depth;
  EXPECT_GE(depth, 32);
  EXPECT_LT(depth, 64);
  EXPECT_TRUE(state.error().ok()) << "too deep is not a valid prefix, not an error";
}

}  // namespace
}  // namespace tensorpc
