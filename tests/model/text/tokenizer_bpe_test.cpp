// Byte-level BPE: the pre-tokenizers' splits, merges by rank over a small
// hand-made vocabulary, the byte fallback, round trips of arbitrary bytes
// under every pre value, and the refusal of malformed vocabularies.
#include "model/text/tokenizer_bpe.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/text/bpe_vocabulary_testing.h"
#include "model/text/pretokenize.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_gguf.h"
#include "model/text/utf8.h"

namespace tensorpc {
namespace {

using Ids = std::vector<int32_t>;
using Words = std::vector<std::string_view>;

// The text byte-level BPE spells `bytes` with ("Ġ" for a space).
std::string spelled(std::string_view bytes) {
  std::string out;
  for (char c : bytes) utf8_append(bpe_byte_to_char(static_cast<uint8_t>(c)), out);
  return out;
}

// Ids 0..255: the character of each byte, in byte order. Then the merges'
// results and the specials below.
constexpr int32_t kHe = 256, kLl = 257, kHell = 258, kHello = 259, kSpaceW = 260, kXyz = 261, kEnd = 262, kTool = 263;

Vocabulary bpe_vocabulary() {
  Vocabulary v = test::byte_level_vocabulary("gpt-2");
  for (const char* t : {"he", "ll", "hell", "hello", "Ġw", "xyz"}) v.tokens.push_back(t);
  v.tokens.push_back("<|end|>");
  v.tokens.push_back("<tool>");
  v.types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::normal));
  v.types[kEnd] = static_cast<int32_t>(TokenType::control);
  v.types[kTool] = static_cast<int32_t>(TokenType::user_defined);
  // "xy" is not a token, but a step to "xyz".
  v.merges = {"h e", "l l", "he ll", "hell o", "Ġ w", "x y", "xy z"};
  v.bos = v.eos = kEnd;
  v.unk = -1;
  v.add_bos = false;
  return v;
}

Words split(std::string_view pre, std::string_view text) {
  auto p = PreTokenizer::create(pre);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  Words words;
  p.value().split(text, words);
  return words;
}

TEST(BpePreTokenizer, Gpt2SplitsContractionsWordsNumbersAndSpaceRuns) {
  EXPECT_EQ(split("gpt-2", "Hello world's  12!?"), (Words{"Hello", " world", "'s", " ", " 12", "!?"}));
  // A newline before a letter is a word of its own: only a space joins the word after it.
  EXPECT_EQ(split("gpt-2", "a\n\nb  "), (Words{"a", "\n", "\n", "b", "  "}));
}

TEST(BpePreTokenizer, Llama3GroupsDigitsInThreesAndQwen2SplitsEachDigit) {
  EXPECT_EQ(split("llama-bpe", "12345 I'M ok"), (Words{"123", "45", " I", "'M", " ok"}));
  EXPECT_EQ(split("qwen2", "x123"), (Words{"x", "1", "2", "3"}));
  EXPECT_EQ(split("qwen2", "a.\n\n b"), (Words{"a", ".\n\n", " b"}));
}

TEST(BpePreTokenizer, LaterExpressionsSplitTheWordsOfEarlierOnes) {
  // deepseek-llm: newlines, then Latin letters, punctuation, CJK runs.
  EXPECT_EQ(split("deepseek-llm", "Hello \xE4\xB8\x96\xE7\x95\x8C\n"),
            (Words{"Hello", " ", "\xE4\xB8\x96\xE7\x95\x8C", "\n"}));
  // default: punctuation runs first, then GPT-2's split, digits, and threes of ASCII digits.
  EXPECT_EQ(split("default", "a+b 123456"), (Words{"a", "+", "b", " ", "123", "456"}));
}

TEST(BpePreTokenizer, WordsCoverInvalidUtf8) {
  EXPECT_EQ(split("gpt-2", "a\xFF\xC3 b"), (Words{"a", "\xFF\xC3", " b"}));
  EXPECT_EQ(split("qwen2", "\x80"), (Words{"\x80"}));
}

TEST(BpePreTokenizer, UnknownPreIsAnErrorNamingIt) {
  auto p = PreTokenizer::create("no-such-pre");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("'no-such-pre'"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("qwen2"), std::string::npos);  // and what it knows
}

TEST(BpeEncode, MergesByRankLowestFirst) {
  Tokenizer tok = test::make_tokenizer(bpe_vocabulary());
  EXPECT_EQ(tok.encode("hello"), (Ids{kHello}));
  EXPECT_EQ(tok.encode("hell"), (Ids{kHell}));
  EXPECT_EQ(tok.encode("he"), (Ids{kHe}));
  EXPECT_EQ(tok.encode("llo"), (Ids{kLl, 'o'}));
  EXPECT_EQ(tok.encode("hello world"), (Ids{kHello, kSpaceW, 'o', 'r', 'l', 'd'}));
  // With "e l" ranked first, "he" never forms and neither does "hello".
  Vocabulary v = bpe_vocabulary();
  v.merges.insert(v.merges.begin(), "e l");
  v.tokens.push_back("el");
  v.types.push_back(static_cast<int32_t>(TokenType::normal));
  EXPECT_EQ(test::make_tokenizer(v).encode("hello"), (Ids{'h', 264, 'l', 'o'}));
}

TEST(BpeEncode, IntermediateTextsThatAreNotTokensStillMerge) {
  Tokenizer tok = test::make_tokenizer(bpe_vocabulary());
  EXPECT_EQ(tok.encode("xyz"), (Ids{kXyz}));
  EXPECT_EQ(tok.encode("xy"), (Ids{'x', 'y'}));  // "xy" is no token: its bytes' tokens
}

TEST(BpeEncode, BytesWithoutATokenBecomeUnkOrNothing) {
  Vocabulary v = bpe_vocabulary();
  v.tokens[0xFF] = "unused-byte";  // byte 0xFF has no token now
  Tokenizer tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.missing_bytes(), std::vector<uint8_t>{0xFF});
  EXPECT_EQ(tok.encode("a\xFF"), (Ids{'a'}));
  v.unk = 'U';
  EXPECT_EQ(test::make_tokenizer(v).encode("a\xFF"), (Ids{'a', 'U'}));
}

TEST(BpeDecode, MapsCharactersBackToBytes) {
  Tokenizer tok = test::make_tokenizer(bpe_vocabulary());
  EXPECT_EQ(tok.decode(Ids{kHello, kSpaceW, 'o'}), "hello wo");
  EXPECT_EQ(tok.token_to_piece(' '), " ");
  EXPECT_EQ(tok.token_to_piece(0xFF), "\xFF");
  EXPECT_EQ(tok.token_to_piece(kTool), "<tool>");  // user-defined text is plain text
}

TEST(BpeRoundTrip, ArbitraryBytesUnderEveryPreValue) {
  std::mt19937 rng(7);
  const std::string samples[] = {
      "",
      " ",
      "  \t\n\n  x",
      "hello  world\n\n",
      "3333333 12,345.67",
      "I'm DON'T",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C",
      "\xF0\x9F\xA6\x99 emoji",
      "\xFF\xFE\x80 broken \xC3",
  };
  std::string names = PreTokenizer::known_names();
  for (size_t start = 0; start < names.size();) {
    size_t end = names.find(", ", start);
    if (end == std::string::npos) end = names.size();
    Vocabulary v = bpe_vocabulary();
    v.pre = names.substr(start, end - start);
    start = end + 2;
    Tokenizer tok = test::make_tokenizer(v);
    for (const std::string& s : samples) EXPECT_EQ(tok.decode(tok.encode(s)), s) << v.pre;
    for (int n = 0; n < 50; ++n) {
      std::string s(rng() % 40, '\0');
      for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? "he lo\n"[rng() % 6] : rng() % 256);
      EXPECT_EQ(tok.decode(tok.encode(s)), s) << v.pre;
    }
  }
}

TEST(BpeRoundTrip, LongRunsFinish) {
  Tokenizer tok = test::make_tokenizer(bpe_vocabulary());
  for (char c : {' ', 'a', '\xFF', '1', '!'}) {
    const std::string s(200000, c);
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }
}

// Random vocabularies (random texts, types and merges, as a hostile file may
// hold): encoding never yields an id out of range nor a token that stands for
// more than max_token_bytes() bytes, and with every byte's character a token
// the round trip holds.
TEST(BpeRoundTrip, RandomVocabulariesKeepTheContract) {
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    Vocabulary v;
    v.kind = VocabularyKind::bpe;
    v.pre = round % 2 ? "llama3" : "gpt-2";
    const bool all_bytes = round % 3 != 0;
    for (int b = 0; b < 256; ++b) {
      if (all_bytes || rng() % 2) v.tokens.push_back(spelled(std::string(1, static_cast<char>(b))));
    }
    const size_t n_base = v.tokens.size();
    for (int k = 0; k < 40; ++k) {
      const std::string a = v.tokens[rng() % v.tokens.size()], b = v.tokens[rng() % v.tokens.size()];
      if (rng() % 4) v.tokens.push_back(a + b);
      v.merges.push_back(a + " " + b);
    }
    v.types.resize(v.tokens.size());
    for (size_t i = 0; i < v.types.size(); ++i) {
      v.types[i] = i < n_base ? 1 : static_cast<int32_t>(rng() % 6);  // no byte type: its spelling is checked
    }
    v.bos = static_cast<int32_t>(rng() % v.tokens.size());
    v.eos = -1;
    v.unk = -1;
    v.add_bos = false;
    auto tok = Tokenizer::create(v);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const size_t bound = tok.value().max_token_bytes();
    ASSERT_EQ(bound == SIZE_MAX, !tok.value().missing_bytes().empty());  // no unk to stand for them
    for (int n = 0; n < 20; ++n) {
      std::string s(rng() % 30, '\0');
      for (char& c : s) c = static_cast<char>(rng() % 256);
      for (bool parse_special : {false, true}) {
        const Ids ids = tok.value().encode(s, true, parse_special);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.value().n_tokens());
        if (bound < SIZE_MAX) {
          ASSERT_LE(s.size(), ids.size() * bound);
        }
        (void)tok.value().decode(ids, parse_special);
        if (!parse_special && tok.value().missing_bytes().empty()) {
          ASSERT_EQ(tok.value().decode(ids), s);
        }
      }
    }
  }
}

TEST(BpeVocabulary, MalformedMergesAreNamed) {
  for (const char* bad : {"hello", " h", "h ", "h  e", "a b c", ""}) {
    Vocabulary v = bpe_vocabulary();
    v.merges.push_back(bad);
    auto tok = Tokenizer::create(v);
    ASSERT_FALSE(tok.ok()) << bad;
    EXPECT_NE(tok.status().message().find("merge 7 "), std::string::npos) << tok.status().message();
  }
}

TEST(BpeVocabulary, UnknownPreAndBadIdsAreRefused) {
  Vocabulary v = bpe_vocabulary();
  v.pre = "klingon";
  auto tok = Tokenizer::create(v);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::unsupported);
  EXPECT_NE(tok.status().message().find("'klingon'"), std::string::npos);

  v = bpe_vocabulary();
  v.eot = 100000;
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = bpe_vocabulary();
  v.types.pop_back();
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = bpe_vocabulary();
  v.tokens.clear();
  v.types.clear();
  EXPECT_FALSE(Tokenizer::create(v).ok());
  Vocabulary spm;
  spm.tokens = {"<unk>", "<s>", "</s>"};
  spm.merges = {"a b"};
  EXPECT_FALSE(Tokenizer::create(spm).ok());  // merges mean nothing to SentencePiece
}

TEST(BpeVocabulary, AnEmptyPreMeansDefault) {
  Vocabulary v = bpe_vocabulary();
  v.pre = "";
  Tokenizer tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.pre(), "default");
  EXPECT_EQ(tok.kind(), VocabularyKind::bpe);
  EXPECT_FALSE(tok.add_space_prefix());
}

// A GGUF file holding bpe_vocabulary()'s keys, with `edit` applied to the writer last.
StatusOr<Tokenizer> from_gguf(const std::function<void(GgufWriter&)>& edit, bool with_merges = true) {
  const Vocabulary v = bpe_vocabulary();
  GgufWriter w;
  EXPECT_TRUE(w.add_string("tokenizer.ggml.model", "gpt2").ok());
  EXPECT_TRUE(w.add_string_array("tokenizer.ggml.tokens", v.tokens).ok());
  EXPECT_TRUE(w.add_i32_array("tokenizer.ggml.token_type", v.types).ok());
  if (with_merges) {
    EXPECT_TRUE(w.add_string_array("tokenizer.ggml.merges", v.merges).ok());
  }
  EXPECT_TRUE(w.add_i32("tokenizer.ggml.eos_token_id", kEnd).ok());
  edit(w);
  auto bytes = w.encode();
  EXPECT_TRUE(bytes.ok());
  auto file = GgufFile::open_owned(std::move(bytes).value());
  EXPECT_TRUE(file.ok());
  return tokenizer_from_gguf(*file.value());
}

TEST(BpeGguf, ReadsAByteLevelVocabulary) {
  auto tok = from_gguf([](GgufWriter& w) { ASSERT_TRUE(w.add_string("tokenizer.ggml.pre", "qwen2").ok()); });
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok.value().pre(), "qwen2");
  EXPECT_EQ(tok.value().bos(), -1);
  EXPECT_FALSE(tok.value().add_bos());
  EXPECT_EQ(tok.value().encode("hello"), (Ids{kHello}));
}

TEST(BpeGguf, AnAbsentPreIsDefault) {
  auto tok = from_gguf([](GgufWriter&) {});
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok.value().pre(), "default");
}

TEST(BpeGguf, ErrorsNameWhatIsWrong) {
  auto unknown_pre = from_gguf([](GgufWriter& w) { ASSERT_TRUE(w.add_string("tokenizer.ggml.pre", "zz-top").ok()); });
  ASSERT_FALSE(unknown_pre.ok());
  EXPECT_NE(unknown_pre.status().message().find("'zz-top'"), std::string::npos);

  auto no_merges = from_gguf([](GgufWriter&) {}, /*with_merges=*/false);
  ASSERT_FALSE(no_merges.ok());
  EXPECT_NE(no_merges.status().message().find("tokenizer.ggml.merges"), std::string::npos)
      << no_merges.status().message();

  auto bad_id = from_gguf([](GgufWriter& w) { ASSERT_TRUE(w.add_i32("tokenizer.ggml.eot_token_id", 1 << 30).ok()); });
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.status().message().find("eot id"), std::string::npos) << bad_id.status().message();

  GgufWriter w;
  ASSERT_TRUE(w.add_string("tokenizer.ggml.model", "bert").ok());
  auto file = GgufFile::open_owned(w.encode().value());
  ASSERT_TRUE(file.ok());
  auto bert = tokenizer_from_gguf(*file.value());
  ASSERT_FALSE(bert.ok());
  EXPECT_EQ(bert.status().code(), StatusCode::unsupported);
  EXPECT_NE(bert.status().message().find("'bert'"), std::string::npos);
}

}  // namespace
}  // namespace tensorpc
