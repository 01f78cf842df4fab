// Tokenizer and DetokenizeStream: exact ids over a small hand-made
// SentencePiece vocabulary, validation of bad vocabularies, and the round trip
// decode(encode(x)) == x over random byte strings.
#include "model/text/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace tensorpc {
namespace {

// Ids of the test vocabulary: 0 <unk>, 1 <s>, 2 </s>, 3 + b for byte b, then
// the pieces below, with scores that decide the merge order.
constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;
constexpr int32_t byte_id(uint8_t b) { return 3 + b; }
constexpr int32_t kSpace = 259;  // "▁"
constexpr int32_t kA = 260, kB = 261, kC = 262, kAB = 263, kBC = 264, kABC = 265, kSpaceA = 266, kAA = 267,
                  kEAcute = 268, kUserTool = 269;

Vocabulary test_vocabulary() {
  Vocabulary v;
  const auto add = [&](std::string text, float score, TokenType type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(static_cast<int32_t>(type));
  };
  add("<unk>", 0, TokenType::unknown);
  add("<s>", 0, TokenType::control);
  add("</s>", 0, TokenType::control);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, TokenType::byte);
  }
  add("\xE2\x96\x81", -10, TokenType::normal);  // ▁
  add("a", -1, TokenType::normal);
  add("b", -1, TokenType::normal);
  add("c", -1, TokenType::normal);
  add("ab", 1, TokenType::normal);
  add("bc", 2, TokenType::normal);  // beats "ab"
  add("abc", 0.5f, TokenType::normal);
  add(std::string("\xE2\x96\x81") + "a", 0, TokenType::normal);  // ▁a
  add("aa", 1, TokenType::normal);
  add("\xC3\xA9", -1, TokenType::normal);  // é
  add("<tool>", 0, TokenType::user_defined);
  return v;
}

Tokenizer make(Vocabulary v) { return Tokenizer::create(std::move(v)).value(); }

using Ids = std::vector<int32_t>;

TEST(TokenizerEncode, MergesTheHighestScoringPairFirst) {
  Tokenizer tok = make(test_vocabulary());
  // ▁ a b c: "bc" (2) beats "ab" (1) and "▁a" (0); then "abc" (0.5) beats the stale "▁a".
  EXPECT_EQ(tok.encode("abc"), (Ids{kBos, kSpace, kABC}));
  EXPECT_EQ(tok.encode("bca", false), (Ids{kSpace, kBC, kA}));
  Vocabulary v = test_vocabulary();
  v.scores[kAB] = 3;  // now "ab" first, and "abc" follows from "ab" + "c"
  EXPECT_EQ(make(v).encode("abc"), (Ids{kBos, kSpace, kABC}));
  v.scores[kABC] = -100;
  v.tokens[kABC] = "xyz";  // without "abc", "ab" + "c" stays
  EXPECT_EQ(make(v).encode("abc"), (Ids{kBos, kSpace, kAB, kC}));
}

TEST(TokenizerEncode, EqualScoresMergeLeftmostFirst) {
  Tokenizer tok = make(test_vocabulary());
  // ▁ a a a: both "aa" score 1; the left one wins, so "▁a" can no longer form.
  EXPECT_EQ(tok.encode("aaa", false), (Ids{kSpace, kAA, kA}));
}

TEST(TokenizerEncode, SpacesBecomeTheEscapeAndTheTextGetsAPrefix) {
  Tokenizer tok = make(test_vocabulary());
  EXPECT_EQ(tok.encode("a b", false), (Ids{kSpaceA, kSpace, kB}));
  EXPECT_EQ(tok.encode(" a", false), (Ids{kSpace, kSpaceA}));
  Vocabulary v = test_vocabulary();
  v.add_space_prefix = false;
  EXPECT_EQ(make(v).encode("ab", false), (Ids{kAB}));
}

TEST(TokenizerEncode, EmptyTextAndOnlySpaces) {
  Tokenizer tok = make(test_vocabulary());
  EXPECT_EQ(tok.encode(""), (Ids{kBos}));
  EXPECT_EQ(tok.encode("", false), Ids{});
  EXPECT_EQ(tok.encode("   ", false), (Ids{kSpace, kSpace, kSpace, kSpace}));
}

TEST(TokenizerEncode, SpecialTokensFollowTheVocabularyFlags) {
  Vocabulary v = test_vocabulary();
  v.add_eos = true;
  EXPECT_EQ(make(v).encode("a"), (Ids{kBos, kSpaceA, kEos}));
  EXPECT_EQ(make(v).encode("a", false), (Ids{kSpaceA}));
  v.add_bos = false;
  EXPECT_EQ(make(v).encode("a"), (Ids{kSpaceA, kEos}));
}

TEST(TokenizerEncode, CharactersOutsideTheVocabularyFallBackToBytes) {
  Tokenizer tok = make(test_vocabulary());
  EXPECT_EQ(tok.encode("\xF0\x9F\x98\x80", false),  // 😀
            (Ids{kSpace, byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80)}));
  EXPECT_EQ(tok.encode("\xC3\xBC", false), (Ids{kSpace, byte_id(0xC3), byte_id(0xBC)}));  // ü is absent
  EXPECT_EQ(tok.encode("\xC3\xA9", false), (Ids{kSpace, kEAcute}));                       // é is a piece
}

TEST(TokenizerEncode, InvalidUtf8BytesAreSymbolsOfTheirOwn) {
  Tokenizer tok = make(test_vocabulary());
  EXPECT_EQ(tok.encode(std::string("a\xFF") + "b", false), (Ids{kSpaceA, byte_id(0xFF), kB}));
  EXPECT_EQ(tok.encode(std::string("\xC3") + "a", false),
            (Ids{kSpace, byte_id(0xC3), kA}));                           // lead byte without continuation
  EXPECT_EQ(tok.encode("a\xC3", false), (Ids{kSpaceA, byte_id(0xC3)}));  // cut off by the end
  EXPECT_EQ(tok.encode("\xC0\xAF", false), (Ids{kSpace, byte_id(0xC0), byte_id(0xAF)}));  // overlong "/"
}

TEST(TokenizerEncode, ControlTokenTextIsOrdinaryTextUnlessParseSpecial) {
  Tokenizer tok = make(test_vocabulary());
  EXPECT_EQ(tok.encode("<s>", false), (Ids{kSpace, byte_id('<'), byte_id('s'), byte_id('>')}));
  // Each run of text gets the prefix, also after a special token, as the
  // common GGUF runtimes encode "<|user|>\nHi".
  EXPECT_EQ(tok.encode("a<s>b", false, true), (Ids{kSpaceA, kBos, kSpace, kB}));
  EXPECT_EQ(tok.encode("<s>a</s>", false, true), (Ids{kBos, kSpaceA, kEos}));
  EXPECT_EQ(tok.encode("b<tool>", false, true), (Ids{kSpace, kB, kUserTool}));
}

TEST(TokenizerEncode, WithoutByteTokensUnknownCharactersBecomeOneUnkEach) {
  Vocabulary v = test_vocabulary();
  for (int b = 0; b < 256; ++b) v.types[byte_id(b)] = static_cast<int32_t>(TokenType::unused);
  Tokenizer tok = make(v);
  EXPECT_FALSE(tok.has_byte_tokens());
  EXPECT_EQ(tok.encode("a\xF0\x9F\x98\x80\xC3\xBC", false), (Ids{kSpaceA, kUnk, kUnk}));
}

TEST(TokenizerEncode, MissingByteTokensAreListedAndEncodeAsUnk) {
  Vocabulary v = test_vocabulary();
  v.types[byte_id(0x80)] = static_cast<int32_t>(TokenType::unused);
  Tokenizer tok = make(v);
  EXPECT_EQ(tok.missing_bytes(), std::vector<uint8_t>{0x80});
  EXPECT_EQ(tok.encode("\xF0\x9F\x98\x80", false), (Ids{kSpace, byte_id(0xF0), byte_id(0x9F), byte_id(0x98), kUnk}));
}

TEST(TokenizerEncode, LongTextsEncodeInOnePass) {
  Tokenizer tok = make(test_vocabulary());
  std::string text;
  for (int i = 0; i < 50000; ++i) text += "abc ";
  const Ids ids = tok.encode(text, false);
  // "▁abc" then, per later word, "▁" + "abc"; the trailing space is a last "▁".
  ASSERT_EQ(ids.size(), 100001u);
  EXPECT_EQ(ids[1], kABC);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TokenizerCreate, RejectsMalformedVocabularies) {
  EXPECT_EQ(Tokenizer::create(Vocabulary{}).status().code(), StatusCode::invalid_argument);
  Vocabulary v = test_vocabulary();
  v.scores.pop_back();
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = test_vocabulary();
  v.types.push_back(1);
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = test_vocabulary();
  v.bos = static_cast<int32_t>(v.tokens.size());
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = test_vocabulary();
  v.eos = -1;
  v.add_eos = true;
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = test_vocabulary();
  v.tokens[byte_id(7)] = "<0xZZ>";
  Status s = Tokenizer::create(v).status();
  EXPECT_NE(s.message().find("<0xZZ>"), std::string::npos) << s.to_string();
  v = test_vocabulary();
  v.types[5] = 9;
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = test_vocabulary();
  v.scores[kAB] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(Tokenizer::create(v).ok());
}

TEST(TokenizerCreate, WithoutTypesInfersBytesAndSpecials) {
  Vocabulary v = test_vocabulary();
  v.types.clear();
  v.scores.clear();
  Tokenizer tok = make(v);
  EXPECT_TRUE(tok.is_control(kBos));
  EXPECT_EQ(tok.type(kUnk), TokenType::unknown);
  EXPECT_EQ(tok.byte_token(0x41), byte_id(0x41));
  EXPECT_TRUE(tok.missing_bytes().empty());
}

TEST(TokenizerDecode, UndoesTheEscapeThePrefixAndTheBytes) {
  Tokenizer tok = make(test_vocabulary());
  EXPECT_EQ(tok.decode(Ids{kBos, kSpace, kABC}), "abc");
  EXPECT_EQ(tok.decode(Ids{kSpaceA, kSpace, kB}), "a b");  // no BOS: the start still loses the prefix
  EXPECT_EQ(tok.decode(Ids{kBos, kSpaceA, kEos}), "a");
  EXPECT_EQ(tok.decode(Ids{byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80)}), "\xF0\x9F\x98\x80");
  EXPECT_EQ(tok.decode(Ids{kBos, -1, 100000, kSpaceA}), "a");  // bad ids contribute nothing
  EXPECT_EQ(tok.decode(Ids{}), "");
  Vocabulary v = test_vocabulary();
  v.add_space_prefix = false;
  EXPECT_EQ(make(v).decode(Ids{kBos, kSpaceA}), " a");
}

TEST(TokenizerDecode, TokenToPieceHasNoSequenceContext) {
  Tokenizer tok = make(test_vocabulary());
  EXPECT_EQ(tok.token_to_piece(kSpaceA), " a");
  EXPECT_EQ(tok.token_to_piece(kBos), "");
  EXPECT_EQ(tok.token_to_piece(byte_id(0x0A)), "\n");
  EXPECT_EQ(tok.token_to_piece(-3), "");
  EXPECT_EQ(tok.token_to_piece(tok.n_tokens()), "");
}

TEST(TokenizerRoundTrip, DecodeOfEncodeIsTheInputForRandomBytes) {
  // Over any bytes but the sequence of "▁" itself (which decodes as a space),
  // valid UTF-8 or not, with or without BOS.
  Tokenizer tok = make(test_vocabulary());
  const std::vector<std::string> atoms = {"a", "b", "c", " ", "  ", "\xC3\xA9", "\xC3\xBC", "\xF0\x9F\x98\x80", "\n"};
  std::mt19937 rng(1234);
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string x;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0) {
        x += static_cast<char>(rng() % 256);
      } else {
        x += atoms[rng() % atoms.size()];
      }
    }
    if (x.find("\xE2\x96\x81") != std::string::npos) continue;
    EXPECT_EQ(tok.decode(tok.encode(x)), x);
    EXPECT_EQ(tok.decode(tok.encode(x, false)), x);
  }
}

TEST(TokenizerRoundTrip, LiteralEscapeCharacterDecodesAsSpace) {
  Tokenizer tok = make(test_vocabulary());
  EXPECT_EQ(tok.decode(tok.encode(std::string("a\xE2\x96\x81") + "b")), "a b");
}

TEST(DetokenizeStream, ReassemblesACharacterSplitOverByteTokens) {
  Tokenizer tok = make(test_vocabulary());
  DetokenizeStream stream(tok);
  EXPECT_EQ(stream.push(kSpaceA), " a");  // not a sequence start: the space stays
  EXPECT_EQ(stream.push(byte_id(0xF0)), "");
  EXPECT_EQ(stream.push(byte_id(0x9F)), "");
  EXPECT_EQ(stream.push(byte_id(0x98)), "");
  EXPECT_EQ(stream.push(byte_id(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.push(kB), "b");
  EXPECT_EQ(stream.flush(), "");
}

TEST(DetokenizeStream, EmitsBytesThatCanNeverCompleteAndFlushesTheRest) {
  Tokenizer tok = make(test_vocabulary());
  DetokenizeStream stream(tok);
  EXPECT_EQ(stream.push(byte_id(0xFF)), "\xFF");
  EXPECT_EQ(stream.push(byte_id(0xC3)), "");
  EXPECT_EQ(stream.push(kA), std::string("\xC3") + "a");  // "a" shows 0xC3 will not complete
  EXPECT_EQ(stream.push(byte_id(0xE2)), "");
  EXPECT_EQ(stream.flush(), "\xE2");
}

TEST(DetokenizeStream, AtASequenceStartMatchesDecode) {
  Tokenizer tok = make(test_vocabulary());
  const std::string text = " ab \xC3\xBC\xF0\x9F\x98\x80 c";
  const Ids ids = tok.encode(text);
  DetokenizeStream stream(tok, /*sequence_start=*/true);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  out += stream.flush();
  EXPECT_EQ(out, text);
  EXPECT_EQ(out, tok.decode(ids));
}

}  // namespace
}  // namespace tensorpc
