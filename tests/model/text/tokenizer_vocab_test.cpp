// Tokenizers of real vocabularies (../shared/vocab: GPT-2, Qwen 2, Phi-3; see
// its README): known ids per pre value, special tokens, ends of generation
// and round trips. The expected ids were computed by tools/vocab_reference.py,
// written from the definitions independently of this code. The tests skip,
// saying why, when the folder is absent.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/text/vocabulary_files_testing.h"

namespace tensorpc {
namespace {

using Ids = std::vector<int32_t>;

struct Known {
  std::string text;
  bool parse_special;
  Ids ids;
};

// A skip or a failure in load() ends only load(): the test body returns too.
#define LOAD_OR_RETURN(name)                          \
  do {                                                \
    load(name);                                       \
    if (IsSkipped() || HasFatalFailure()) return;     \
  } while (0)

class TokenizerVocab : public ::testing::Test {
 protected:
  // Loads ../shared/vocab/ggml-vocab-<name>.gguf, or skips (LOAD_OR_RETURN).
  void load(const std::string& name) { test::open_tokenizer(test::vocabulary_path(name), tok_); }

  void expect_known(const std::vector<Known>& cases) {
    for (const Known& k : cases) {
      EXPECT_EQ(tok_->encode(k.text, /*add_special=*/true, k.parse_special), k.ids)
          << "\"" << k.text << "\" parse_special=" << k.parse_special;
      if (!k.parse_special) {
        EXPECT_EQ(tok_->decode(k.ids), k.text);
      }
    }
  }

  void expect_round_trips() {
    const std::string texts[] = {
        "",
        "In the beginning God created the heaven and the earth.",
        "  whitespace\t\truns \n\n\n and   spaces   ",
        "digits 0 12 345 6789 3.14159 1,000,000",
        "punctuation!?.,;:'\"()[]{}<>-_=+*/\\|@#$%^&~`",
        "CJK \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81"
        "\xAF \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
        "emoji \xF0\x9F\xA6\x99\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xE2\x9C\x93",
        "invalid \xFF\xFE\x80 utf-8 \xC3 \xE4\xBD",
        "I'm, you're, they'LL, WE'D",
    };
    for (const std::string& t : texts) EXPECT_EQ(tok_->decode(tok_->encode(t, true, false)), t) << t;
  }

  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TokenizerVocab, Gpt2KnownIds) {
  LOAD_OR_RETURN("gpt-2");
  EXPECT_EQ(tok_->kind(), VocabularyKind::bpe);
  EXPECT_EQ(tok_->pre(), "gpt-2");
  expect_known({
      {"Hello world", false, {15496, 995}},
      {" Hello", false, {18435}},
      {"hello  world\n\n", false, {31373, 220, 995, 628}},
      {"3333333", false, {24840, 20370}},
      {"I'm", false, {40, 1101}},
      {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", false, {19526, 254, 25001, 121, 10310, 244, 45911, 234}},
      {"\xf0\x9f\xa6\x99", false, {8582, 99, 247}},
      {"<|endoftext|>user", false, {27, 91, 437, 1659, 5239, 91, 29, 7220}},
      {"<|endoftext|>user", true, {50256, 7220}},
      {"  leading\tand trailing  ", false, {220, 3756, 197, 392, 25462, 220, 220}},
      {"don't STOP'LL 12,345.67!", false, {9099, 470, 44934, 6, 3069, 1105, 11, 27712, 13, 3134, 0}},
  });
}

TEST_F(TokenizerVocab, Qwen2KnownIds) {
  LOAD_OR_RETURN("qwen2");
  EXPECT_EQ(tok_->pre(), "qwen2");
  expect_known({
      {"Hello world", false, {9707, 1879}},
      {" Hello", false, {21927}},
      {"hello  world\n\n", false, {14990, 220, 1879, 271}},
      {"3333333", false, {18, 18, 18, 18, 18, 18, 18}},
      {"I'm", false, {40, 2776}},
      {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", false, {108386, 99489}},
      {"\xf0\x9f\xa6\x99", false, {149955}},
      {"<|im_start|>user", false, {27, 91, 318, 4906, 91, 29, 872}},
      {"<|im_start|>user\nHi<|im_end|>", true, {151644, 872, 198, 13048, 151645}},
      {"  leading\tand trailing  ", false, {220, 6388, 52477, 27748, 256}},
      {"don't STOP'LL 12,345.67!", false, {15007, 944, 45537, 6, 4086, 220, 16, 17, 11, 18, 19, 20, 13, 21, 22, 0}},
  });
}

TEST_F(TokenizerVocab, Phi3KnownIdsAndSpecialTokens) {
  LOAD_OR_RETURN("phi-3");
  EXPECT_EQ(tok_->kind(), VocabularyKind::spm);
  expect_known({
      {"Hello world", false, {1, 15043, 3186}},
      {"hello  world\n\n", false, {1, 22172, 29871, 3186, 13, 13}},
      {"3333333", false, {1, 29871, 29941, 29941, 29941, 29941, 29941, 29941, 29941}},
      {"I'm", false, {1, 306, 29915, 29885}},
      {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", false, {1, 29871, 30919, 31076, 30793, 30967}},
      {"\xf0\x9f\xa6\x99", false, {1, 29871, 243, 162, 169, 156}},
      {"<|user|>", true, {1, 32010}},
      {"Hi<|end|>", true, {1, 6324, 32007}},
      {"<|assistant|>", true, {1, 32001}},
      {"<|user|>", false, {1, 529, 29989, 1792, 29989, 29958}},
      // Each run of text after a special token gets the space prefix too.
      {"<|user|>\nHi<|end|>\n<|assistant|>", true, {1, 32010, 29871, 13, 18567, 32007, 29871, 13, 32001}},
  });
}

TEST_F(TokenizerVocab, Gpt2EndsAtEndOfText) {
  LOAD_OR_RETURN("gpt-2");
  EXPECT_EQ(tok_->eot(), 50256);
  EXPECT_TRUE(tok_->is_end_of_generation(50256));
  EXPECT_FALSE(tok_->is_end_of_generation(15496));
  EXPECT_EQ(tok_->decode(Ids{15496, 50256}), "Hello");
  EXPECT_EQ(tok_->decode(Ids{15496, 50256}, /*special=*/true), "Hello<|endoftext|>");
}

TEST_F(TokenizerVocab, Qwen2EndsAtImEndAndEndOfText) {
  LOAD_OR_RETURN("qwen2");
  EXPECT_EQ(tok_->eot(), 151645);
  EXPECT_TRUE(tok_->is_end_of_generation(151643));   // <|endoftext|>, the file's EOS
  EXPECT_TRUE(tok_->is_end_of_generation(151645));   // <|im_end|>
  EXPECT_FALSE(tok_->is_end_of_generation(151644));  // <|im_start|>
  EXPECT_EQ(tok_->decode(Ids{151644, 872, 198, 13048, 151645}), "user\nHi");
  EXPECT_EQ(tok_->decode(Ids{151644, 872, 198, 13048, 151645}, true), "<|im_start|>user\nHi<|im_end|>");
}

TEST_F(TokenizerVocab, Phi3EndsAtEndAndEndOfText) {
  LOAD_OR_RETURN("phi-3");
  EXPECT_EQ(tok_->eot(), 32007);
  EXPECT_TRUE(tok_->is_end_of_generation(32000));   // <|endoftext|>, the file's EOS
  EXPECT_TRUE(tok_->is_end_of_generation(32007));   // <|end|>
  EXPECT_FALSE(tok_->is_end_of_generation(32010));  // <|user|>
  // The prefix space is removed at the start of the text only; after <|user|> "▁Hi" is " Hi".
  EXPECT_EQ(tok_->decode(Ids{1, 32010, 6324, 32007}), " Hi");
  EXPECT_EQ(tok_->decode(Ids{1, 32010, 6324, 32007}, true), "<|user|> Hi<|end|>");
}

// Phi-3's [PAD32011]..[PAD32063] have the unknown type: they print nothing
// in generated text, as control tokens, and their text with `special`.
TEST_F(TokenizerVocab, Phi3UnknownTypeTokensPrintOnlyWithSpecial) {
  LOAD_OR_RETURN("phi-3");
  const int32_t ionen = 17725, pad = 32013, pueblo = 24742;
  ASSERT_EQ(tok_->text(pad), "[PAD32013]");
  ASSERT_EQ(tok_->type(pad), TokenType::unknown);
  ASSERT_EQ(tok_->text(ionen), "ionen");
  EXPECT_EQ(tok_->decode(Ids{ionen, pad, ionen, pueblo}), "ionenionen pueblo");
  EXPECT_EQ(tok_->decode(Ids{ionen, pad, ionen, pueblo}, /*special=*/true), "ionen[PAD32013]ionen pueblo");
  EXPECT_EQ(tok_->token_to_piece(pad), "");
  EXPECT_EQ(tok_->token_to_piece(pad, /*special=*/true), "[PAD32013]");
  // Streamed as a generator hands out tokens, one at a time.
  for (const bool special : {false, true}) {
    DetokenizeStream stream(*tok_, /*sequence_start=*/false, special);
    std::string text;
    for (int32_t id : {ionen, pad, ionen, pueblo}) text += stream.push(id);
    text += stream.flush();
    EXPECT_EQ(text, special ? "ionen[PAD32013]ionen pueblo" : "ionenionen pueblo") << "special=" << special;
  }
}

TEST_F(TokenizerVocab, Gpt2RoundTrips) {
  LOAD_OR_RETURN("gpt-2");
  expect_round_trips();
}

TEST_F(TokenizerVocab, Qwen2RoundTrips) {
  LOAD_OR_RETURN("qwen2");
  expect_round_trips();
}

}  // namespace
}  // namespace tensorpc
