// Special tokens of both vocabulary kinds: parse_special matches control and
// user-defined texts (longest first) and only then; decode prints control
// tokens only with `special`; eot() and is_end_of_generation() find the
// tokens that end a turn by id and by text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/text/bpe_vocabulary_testing.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_bpe.h"

namespace tensorpc {
namespace {

using Ids = std::vector<int32_t>;

// Ids 0..255 the bytes' characters, then the specials of a ChatML vocabulary.
constexpr int32_t kEndOfText = 256, kImStart = 257, kImEnd = 258, kImPrefix = 259, kTool = 260;

Vocabulary chatml_vocabulary() {
  Vocabulary v = test::byte_level_vocabulary("qwen2");
  v.tokens.insert(v.tokens.end(), {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im", "<tool>"});
  v.types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::normal));
  for (int32_t id : {kEndOfText, kImStart, kImEnd, kImPrefix}) v.types[id] = static_cast<int32_t>(TokenType::control);
  v.types[kTool] = static_cast<int32_t>(TokenType::user_defined);
  v.bos = v.eos = kEndOfText;
  v.unk = -1;
  v.add_bos = false;
  return v;
}

Ids bytes_of(std::string_view s) { return Ids(s.begin(), s.end()); }

TEST(TokenizerSpecial, ParseSpecialMatchesControlTextLongestFirst) {
  Tokenizer tok = test::make_tokenizer(chatml_vocabulary());
  EXPECT_EQ(tok.encode("<|im_start|>ab<|im_end|>", true, true), (Ids{kImStart, 'a', 'b', kImEnd}));
  EXPECT_EQ(tok.encode("<|im<tool>", true, true), (Ids{kImPrefix, kTool}));
}

TEST(TokenizerSpecial, WithoutParseSpecialControlTextIsText) {
  Tokenizer tok = test::make_tokenizer(chatml_vocabulary());
  const Ids ids = tok.encode("<|im_start|>", true, false);
  EXPECT_EQ(ids, bytes_of("<|im_start|>"));
  EXPECT_EQ(tok.decode(ids), "<|im_start|>");
}

TEST(TokenizerSpecial, ControlTokensDecodeToNothingUnlessSpecial) {
  Tokenizer tok = test::make_tokenizer(chatml_vocabulary());
  const Ids ids{kImStart, 'h', 'i', kImEnd};
  EXPECT_EQ(tok.decode(ids), "hi");
  EXPECT_EQ(tok.decode(ids, /*special=*/true), "<|im_start|>hi<|im_end|>");
  EXPECT_EQ(tok.token_to_piece(kImEnd), "");
  EXPECT_EQ(tok.token_to_piece(kImEnd, true), "<|im_end|>");
  EXPECT_EQ(tok.token_to_piece(kTool), "<tool>");  // user-defined tokens are text
  DetokenizeStream stream(tok, false, /*special=*/true);
  EXPECT_EQ(stream.push(kImEnd), "<|im_end|>");
}

TEST(TokenizerSpecial, EndOfTurnIsFoundByText) {
  Tokenizer tok = test::make_tokenizer(chatml_vocabulary());
  EXPECT_EQ(tok.eot(), kImEnd);
  EXPECT_TRUE(tok.is_end_of_generation(kEndOfText));  // EOS
  EXPECT_TRUE(tok.is_end_of_generation(kImEnd));
  EXPECT_FALSE(tok.is_end_of_generation(kImStart));
  EXPECT_FALSE(tok.is_end_of_generation('a'));
  EXPECT_FALSE(tok.is_end_of_generation(-1));
}

TEST(TokenizerSpecial, EndOfTurnIdsFromTheFileComeFirst) {
  Vocabulary v = chatml_vocabulary();
  v.eot = kImPrefix;
  v.eom = kImStart;
  Tokenizer tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.eot(), kImPrefix);
  EXPECT_TRUE(tok.is_end_of_generation(kImPrefix));
  EXPECT_TRUE(tok.is_end_of_generation(kImStart));
  EXPECT_TRUE(tok.is_end_of_generation(kImEnd));  // still, by its text
}

TEST(TokenizerSpecial, NormalTokensSpelledLikeEndsDoNotEnd) {
  Vocabulary v = chatml_vocabulary();
  v.types[kImEnd] = static_cast<int32_t>(TokenType::normal);
  Tokenizer tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.eot(), kEndOfText);
  EXPECT_FALSE(tok.is_end_of_generation(kImEnd));
}

TEST(TokenizerSpecial, SentencePieceControlTokensFollowTheSameRules) {
  Vocabulary v;
  v.tokens = {"<unk>", "<s>", "</s>", "<|end|>", "\xE2\x96\x81hi", "hi"};  // ▁ h i -> ▁ hi -> ▁hi
  v.types = {2, 3, 3, 3, 1, 1};
  Tokenizer tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.encode("hi<|end|>", true, true), (Ids{1, 4, 3}));
  EXPECT_EQ(tok.decode(Ids{1, 4, 3}), "hi");
  EXPECT_EQ(tok.decode(Ids{1, 4, 3}, true), "hi<|end|>");
  EXPECT_EQ(tok.eot(), 3);
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_TRUE(tok.is_end_of_generation(3));
  EXPECT_FALSE(tok.is_end_of_generation(1));
}

}  // namespace
}  // namespace tensorpc
