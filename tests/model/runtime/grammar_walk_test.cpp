// GrammarVocabulary: random walks over the bundled model's vocabulary under
// the GBNF files of tests/data/grammars; every text that ends parses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "model/runtime/grammar_testing.h"
#include "model/runtime/json_schema.h"
#include "model/text/vocabulary_files_testing.h"

namespace tensorpc {
namespace {

// Integer arithmetic as arithmetic.gbnf writes it, parsed whole: true when
// `text` is an expression (division by zero still parses).
class Arithmetic {
 public:
  explicit Arithmetic(std::string_view text) : s_(text) {}
  bool parses() { return expr() && pos_ == s_.size(); }

 private:
  void space() { pos_ += pos_ < s_.size() && s_[pos_] == ' '; }
  bool expr() { return operands("+-", &Arithmetic::term); }
  bool term() { return operands("*/", &Arithmetic::factor); }
  // operand (op operand)*, with optional spaces around each op.
  bool operands(std::string_view ops, bool (Arithmetic::*operand)()) {
    if (!(this->*operand)()) return false;
    for (size_t save = pos_;; save = pos_) {
      space();
      if (pos_ >= s_.size() || ops.find(s_[pos_]) == std::string_view::npos) {
        pos_ = save;
        return true;
      }
      ++pos_;
      space();
      if (!(this->*operand)()) return false;
    }
  }
  bool factor() {
    if (pos_ >= s_.size()) return false;
    if (s_[pos_] == '-') return ++pos_, factor();
    if (s_[pos_] == '(') {
      ++pos_;
      space();
      if (!expr()) return false;
      space();
      return pos_ < s_.size() && s_[pos_++] == ')';
    }
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > start && pos_ - start <= 6;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

class GrammarWalk : public ::testing::Test {
 protected:
  void SetUp() override {
    test::open_tokenizer(test::vocabulary_path("kjv-bpe"), tokenizer_);
    if (tokenizer_) vocab_ = std::make_unique<GrammarVocabulary>(*tokenizer_);
  }
  // The ended walks of `seeds` walks under `gbnf`; at least a quarter of them must end.
  std::vector<std::string> walks(const std::string& gbnf, int seeds, int max_tokens) {
    const auto grammar = test::parse_or_fail(gbnf);
    std::vector<std::string> ended;
    if (!grammar) return ended;
    for (int seed = 0; seed < seeds; ++seed) {
      if (auto text = test::random_walk(*vocab_, grammar, static_cast<uint64_t>(seed), max_tokens)) {
        ended.push_back(*text);
      }
    }
    EXPECT_GE(ended.size() * 4, static_cast<size_t>(seeds)) << "too few walks ended";
    return ended;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<GrammarVocabulary> vocab_;
};

TEST_F(GrammarWalk, JsonFileGivesJsonThatParses) {
  if (!vocab_) return;
  const std::string gbnf = test::read_test_file("tests/data/grammars/json.gbnf");
  for (const std::string& text : walks(gbnf, 40, 300)) EXPECT_TRUE(nlohmann::json::accept(text)) << text;
  // Most walks from `value` end as scalars; from an array they nest.
  const size_t root = gbnf.find("root   ::= value");
  ASSERT_NE(root, std::string::npos);
  std::string arrays = gbnf;
  arrays.replace(root, 16, "root ::= array");
  for (const std::string& text : walks(arrays, 40, 300)) {
    const auto value = nlohmann::json::parse(text, nullptr, false);
    EXPECT_TRUE(value.is_array()) << text;
  }
}

TEST_F(GrammarWalk, BuiltInJsonObjectGivesObjects) {
  if (!vocab_) return;
  for (const std::string& text : walks(json_gbnf(/*object_root=*/true), 40, 300)) {
    const auto value = nlohmann::json::parse(text, nullptr, false);
    EXPECT_TRUE(value.is_object()) << text;
  }
}

TEST_F(GrammarWalk, ArithmeticFileGivesExpressions) {
  if (!vocab_) return;
  const auto texts = walks(test::read_test_file("tests/data/grammars/arithmetic.gbnf"), 40, 200);
  for (const std::string& text : texts) EXPECT_TRUE(Arithmetic(text).parses()) << text;
  // The evaluator can fail: it is not the grammar's mirror by accident.
  EXPECT_FALSE(Arithmetic("1 +").parses());
  EXPECT_FALSE(Arithmetic("(2").parses());
}

TEST_F(GrammarWalk, ChoicesFileGivesOneOfTheChoices) {
  if (!vocab_) return;
  const std::set<std::string> choices{"yes", "no", "maybe", "it depends", "the LORD", "Jerusalem"};
  const auto texts = walks(test::read_test_file("tests/data/grammars/choices.gbnf"), 40, 20);
  EXPECT_EQ(texts.size(), 40u) << "every walk ends: each choice is a few tokens";
  std::set<std::string> seen;
  for (const std::string& text : texts) {
    EXPECT_TRUE(choices.contains(text)) << text;
    seen.insert(text);
  }
  EXPECT_GE(seen.size(), 3u) << "the walks are random";
}

// The mask's shortcuts (shared prefixes, subtrees allowed whole) give what
// checking each token on its own gives, at places of every kind.
class GrammarMaskAgrees : public ::testing::TestWithParam<std::string> {};

TEST_P(GrammarMaskAgrees, WithAcceptsForEveryToken) {
  std::unique_ptr<Tokenizer> tokenizer;
  test::open_tokenizer(test::vocabulary_path(GetParam()), tokenizer);
  if (!tokenizer) return;
  const GrammarVocabulary vocab(*tokenizer);
  const auto grammar = test::parse_or_fail(json_gbnf());
  ASSERT_TRUE(grammar);
  GrammarScratch scratch;
  std::vector<uint8_t> mask;
  for (const char* text : {"", "{\"name\": \"In the", "{\"a\": [1, 2", "[\"\\u00", "{\"k\": \"\xE6\x97", "[true, 0.5e",
                           "{\"a\": \"b\"  "}) {
    GrammarState state(grammar);
    ASSERT_TRUE(state.advance(text)) << text;
    const int32_t n_allowed = vocab.mask(state, mask, scratch);
    int32_t agreed = 0;
    for (int32_t t = 0; t < vocab.n_tokens(); ++t) {
      const bool accepted = vocab.accepts(state, t, scratch);
      EXPECT_EQ(accepted, mask[t] != 0) << "token " << t << " '" << vocab.piece(t) << "' after '" << text << "'";
      agreed += accepted;
    }
    EXPECT_EQ(agreed, n_allowed) << text;
    EXPECT_GT(n_allowed, 0) << text;
  }
}

INSTANTIATE_TEST_SUITE_P(GrammarVocabularies, GrammarMaskAgrees, ::testing::Values("kjv-bpe", "qwen2", "phi-3"),
                         test::vocabulary_test_name);

TEST_F(GrammarWalk, EndTokensOnlyWhenCompleteAndControlTokensNever) {
  if (!vocab_) return;
  const auto grammar = test::parse_or_fail(R"(root ::= "in the beginning" "!"?)");
  ASSERT_TRUE(grammar);
  GrammarState state(grammar);
  GrammarScratch scratch;
  std::vector<uint8_t> mask;
  const int32_t eos = tokenizer_->eos();
  ASSERT_GE(eos, 0);
  vocab_->mask(state, mask, scratch);
  EXPECT_FALSE(mask[eos]);
  EXPECT_FALSE(vocab_->accepts(state, eos, scratch));
  for (int32_t t = 0; t < vocab_->n_tokens(); ++t) {
    if (tokenizer_->is_control(t)) {
      EXPECT_FALSE(mask[t]) << t;
    }
  }
  ASSERT_TRUE(state.advance("in the beginning"));
  EXPECT_EQ(vocab_->mask(state, mask, scratch) > 0, true);
  EXPECT_TRUE(mask[eos]);
  EXPECT_TRUE(vocab_->accepts(state, eos, scratch));
  EXPECT_FALSE(vocab_->accepts(state, -1, scratch));
  EXPECT_FALSE(vocab_->accepts(state, vocab_->n_tokens(), scratch));
}

TEST_F(GrammarWalk, TokensSplittingACharacterAreMatchedAcrossTheBoundary) {
  if (!vocab_) return;
  // Byte tokens spell "é" (C3 A9) in two tokens; the first is allowed only
  // where some allowed character starts with it.
  const int32_t c3 = tokenizer_->byte_token(0xC3), a9 = tokenizer_->byte_token(0xA9);
  if (c3 < 0 || a9 < 0) GTEST_SKIP() << "the vocabulary has no byte tokens for é";
  GrammarScratch scratch;
  GrammarState state(test::parse_or_fail(R"(root ::= [é])"));
  EXPECT_TRUE(vocab_->accepts(state, c3, scratch));
  EXPECT_FALSE(vocab_->accepts(state, a9, scratch));
  ASSERT_TRUE(vocab_->advance(state, c3));
  EXPECT_FALSE(state.complete());
  EXPECT_TRUE(vocab_->accepts(state, a9, scratch));
  ASSERT_TRUE(vocab_->advance(state, a9));
  EXPECT_TRUE(state.complete());
  GrammarState ascii(test::parse_or_fail(R"(root ::= [a-z])"));
  EXPECT_FALSE(vocab_->accepts(ascii, c3, scratch));
}

}  // namespace
}  // namespace tensorpc
