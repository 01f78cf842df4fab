// Tokenizer::max_token_bytes(), the most bytes of text one token stands for:
// hand-made vocabularies show each thing a token can stand for; over every
// real vocabulary at hand (../shared/vocab and the bundled models) random,
// adversarial and special-token texts never encode to fewer tokens than the
// bound allows, and some text comes close to it, so it is not needlessly
// large. The real vocabularies skip, saying why, when their file is absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/text/bpe_vocabulary_testing.h"
#include "model/text/tokenizer.h"
#include "model/text/utf8.h"
#include "model/text/vocabulary_files_testing.h"

namespace tensorpc {
namespace {

using Ids = std::vector<int32_t>;

constexpr std::string_view kEscape = "\xE2\x96\x81";  // "▁"

TEST(TokenizerBound, BytePairPiecesStandForTheBytesTheySpell) {
  Vocabulary v = test::byte_level_vocabulary("gpt-2");
  // Four spaces in one token spelled with 8 bytes; "▁▁▁▁▁" has no character
  // of the byte-to-unicode table, so no merge makes it.
  v.tokens.insert(v.tokens.end(), {"\xC4\xA0\xC4\xA0", "\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0",
                                   "\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81"});
  v.merges = {"\xC4\xA0 \xC4\xA0", "\xC4\xA0\xC4\xA0 \xC4\xA0\xC4\xA0"};
  v.bos = v.eos = v.unk = -1;
  v.add_bos = false;
  Tokenizer tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.encode("    "), Ids{257});
  EXPECT_EQ(tok.max_token_bytes(), 4u);

  // parse_special matches a control token's whole text.
  v.tokens.push_back("<|im_start|>");
  v.types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::normal));
  v.types.back() = static_cast<int32_t>(TokenType::control);
  tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.encode("<|im_start|>", false, true), Ids{259});
  EXPECT_EQ(tok.max_token_bytes(), 12u);
}

TEST(TokenizerBound, ALiteralEscapeInTheTextIsThreeBytesOfASentencePiece) {
  Vocabulary v;
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81\xE2\x96\x81", "ab"};  // "▁▁"
  v.types = {2, 3, 3, 1, 1};
  Tokenizer tok = test::make_tokenizer(v);
  // "▁ab▁▁": the prefix is unk (no piece "▁"); the text's own "▁▁", 6 bytes, is one token.
  EXPECT_EQ(tok.encode("ab\xE2\x96\x81\xE2\x96\x81", false), (Ids{0, 4, 3}));
  EXPECT_EQ(tok.encode("   ", false), (Ids{3, 3}));  // spaces: a byte each
  EXPECT_EQ(tok.max_token_bytes(), 6u);
}

TEST(TokenizerBound, WithoutByteTokensUnkStandsForACharacterAndWithoutUnkNothingBounds) {
  Vocabulary v;
  v.tokens = {"?", "B", "E", "a"};
  v.types = {2, 3, 3, 1};
  v.add_space_prefix = false;
  Tokenizer tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.encode("\xF0\x9F\x98\x80", false), Ids{0});  // 😀: 4 bytes, one unk
  EXPECT_EQ(tok.max_token_bytes(), 4u);
  v.unk = -1;
  tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.encode("\xF0\x9F\x98\x80", false), Ids{});
  EXPECT_EQ(tok.max_token_bytes(), SIZE_MAX);
}

TEST(TokenizerBound, BytesWithoutATokenOrUnkLeaveNothingToBound) {
  Vocabulary v = test::byte_level_vocabulary("gpt-2");
  v.tokens[0xFF] = "<no byte>";
  v.bos = v.eos = v.unk = -1;
  v.add_bos = false;
  Tokenizer tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.encode("\xFF\xFF"), Ids{});
  EXPECT_EQ(tok.max_token_bytes(), SIZE_MAX);
  v.unk = 'U';
  tok = test::make_tokenizer(v);
  EXPECT_EQ(tok.encode("\xFF\xFF"), (Ids{'U', 'U'}));
  EXPECT_EQ(tok.max_token_bytes(), 1u);
}

// Random SentencePiece vocabularies (pieces of "▁", letters and a two-byte
// character; random types and scores; byte tokens, some or none; unk or not;
// with and without the prefix): no random text has more bytes than its
// tokens allow.
TEST(TokenizerBound, RandomSentencePieceVocabulariesKeepTheBound) {
  std::mt19937 rng(5);
  const std::string atoms[] = {std::string(kEscape), " ", "a", "b", "\xC3\xA9", "<", ">"};
  const auto atom_text = [&](size_t max_atoms) {
    std::string s;
    for (size_t n = 1 + rng() % max_atoms; n > 0; --n) s += atoms[rng() % std::size(atoms)];
    return s;
  };
  for (int round = 0; round < 200; ++round) {
    Vocabulary v;
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.types = {2, 3, 3};
    const int byte_tokens = round % 3;  // none, some, all
    for (int b = 0; b < 256 && byte_tokens > 0; ++b) {
      if (byte_tokens == 1 && rng() % 2) continue;
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      v.tokens.push_back(name);
      v.types.push_back(static_cast<int32_t>(TokenType::byte));
    }
    const TokenType piece_types[] = {TokenType::normal,       TokenType::normal, TokenType::control,
                                     TokenType::user_defined, TokenType::unused, TokenType::undefined};
    for (int k = 0; k < 40; ++k) {
      v.tokens.push_back(atom_text(6));
      v.types.push_back(static_cast<int32_t>(piece_types[rng() % std::size(piece_types)]));
    }
    for (size_t i = 0; i < v.tokens.size(); ++i) v.scores.push_back(static_cast<float>(rng() % 16));
    v.unk = rng() % 4 ? 0 : -1;
    v.add_space_prefix = rng() % 2;
    Tokenizer tok = test::make_tokenizer(v);
    const size_t bound = tok.max_token_bytes();
    for (int n = 0; n < 20; ++n) {
      std::string s = atom_text(30);
      if (n % 2) s += static_cast<char>(rng() % 256);
      for (bool parse_special : {false, true}) {
        const size_t n_tokens = tok.encode(s, /*add_special=*/false, parse_special).size();
        if (bound < SIZE_MAX) {
          ASSERT_LE(s.size(), n_tokens * bound) << "round " << round << ": " << s;
        }
      }
    }
  }
}

// The real vocabularies, by name (test::vocabulary_path).
class TokenizerBoundOfVocabulary : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    test::open_tokenizer(test::vocabulary_path(GetParam()), tok_);
    if (!tok_) return;
    bound_ = tok_->max_token_bytes();
    ASSERT_LT(bound_, SIZE_MAX) << "every byte of these vocabularies has a token";
  }

  // The text `id` comes from: a BPE piece's bytes, else the stored text (a
  // SentencePiece "▁" kept literal, a special token's text for parse_special).
  std::string source(int32_t id) const {
    const TokenType type = tok_->type(id);
    const bool piece = type == TokenType::normal || type == TokenType::undefined;
    return tok_->kind() == VocabularyKind::bpe && piece ? tok_->token_to_piece(id) : std::string(tok_->text(id));
  }

  // The most bytes per token of `text`, over both parse_special settings,
  // without BOS and EOS (which only add tokens).
  double bytes_per_token(const std::string& text) const {
    double most = 0;
    for (bool parse_special : {false, true}) {
      const size_t n = tok_->encode(text, /*add_special=*/false, parse_special).size();
      most = std::max(most, static_cast<double>(text.size()) / static_cast<double>(std::max<size_t>(n, 1)));
      EXPECT_LE(text.size(), n * bound_) << "parse_special=" << parse_special << ", " << text.size()
                                         << " bytes: " << text.substr(0, 80);
    }
    return most;
  }

  // Ids of the tokens, longest source first.
  std::vector<int32_t> longest_first() const {
    std::vector<std::pair<size_t, int32_t>> by_length;
    for (int32_t id = 0; id < tok_->n_tokens(); ++id) by_length.emplace_back(source(id).size(), id);
    std::sort(by_length.rbegin(), by_length.rend());
    std::vector<int32_t> ids;
    for (const auto& [length, id] : by_length) ids.push_back(id);
    return ids;
  }

  std::unique_ptr<Tokenizer> tok_;
  size_t bound_ = 0;
};

TEST_P(TokenizerBoundOfVocabulary, NoTextHasMoreBytesThanItsTokensAllow) {
  std::mt19937 rng(2024);
  // Runs of one character or word, around the lengths of the longest tokens.
  const std::string atoms[] = {" ",
                               "a",
                               "\n",
                               "\t",
                               "-",
                               "=",
                               "/",
                               ".",
                               "0",
                               std::string(kEscape),
                               "\xC3\x83\xC3\x82",
                               "\xFF",
                               "ab",
                               " the",
                               "\xE4\xBD\xA0",
                               "\xF0\x9F\xA6\x99"};
  for (const std::string& atom : atoms) {
    for (size_t n : {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 1000, 5000}) {
      std::string text;
      for (size_t i = 0; i < n; ++i) text += atom;
      bytes_per_token(text);
    }
  }
  // Random bytes, and random characters (ASCII, Latin-1, Cyrillic, CJK, emoji, "▁").
  for (int i = 0; i < 200; ++i) {
    std::string text(rng() % 400, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 256);
    bytes_per_token(text);
  }
  const uint32_t ranges[][2] = {{0x20, 0x7E},     {0xA0, 0xFF},       {0x400, 0x4FF},
                                {0x4E00, 0x9FFF}, {0x1F300, 0x1FAFF}, {0x2581, 0x2581}};
  for (int i = 0; i < 200; ++i) {
    std::string text;
    for (int n = static_cast<int>(rng() % 200); n > 0; --n) {
      const auto& r = ranges[rng() % std::size(ranges)];
      utf8_append(r[0] + static_cast<uint32_t>(rng() % (r[1] - r[0] + 1)), text);
    }
    bytes_per_token(text);
  }
  // Texts made of tokens: random ones, the longest ones, and every special token.
  for (int i = 0; i < 300; ++i) {
    std::string text;
    for (int n = 1 + static_cast<int>(rng() % 8); n > 0; --n)
      text += source(static_cast<int32_t>(rng() % tok_->n_tokens()));
    bytes_per_token(text);
  }
  const std::vector<int32_t> longest = longest_first();
  std::string all_longest;
  for (size_t k = 0; k < 64; ++k) {
    const std::string s = source(longest[k]);
    bytes_per_token(s);
    bytes_per_token(s + s + s + s);
    all_longest += s;
  }
  bytes_per_token(all_longest);
  std::string all_special;
  for (int32_t id = 0; id < tok_->n_tokens(); ++id) {
    if (tok_->type(id) == TokenType::control || tok_->type(id) == TokenType::user_defined) all_special += source(id);
  }
  bytes_per_token(all_special);
  bytes_per_token(all_special + all_special);
  // A long word.
  std::string word(20000, 'a');
  for (char& c : word) c = static_cast<char>('a' + rng() % 26);
  bytes_per_token(word);
}

TEST_P(TokenizerBoundOfVocabulary, SomeTextComesCloseToTheBound) {
  // The longest tokens' texts, alone and repeated (a SentencePiece prefix
  // costs one token of its own once).
  double best = 0;
  for (int32_t id : longest_first()) {
    const std::string s = source(id);
    if (s.size() * 4 < bound_ * 3) break;
    std::string repeated;
    for (int k = 0; k < 8; ++k) repeated += s;
    best = std::max({best, bytes_per_token(s), bytes_per_token(repeated)});
  }
  EXPECT_GE(best * 4, static_cast<double>(bound_) * 3) << "bound " << bound_ << ", best " << best;
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerBoundOfVocabulary, ::testing::ValuesIn(test::all_vocabularies()),
                         test::vocabulary_test_name);

}  // namespace
}  // namespace tensorpc
