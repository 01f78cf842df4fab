// BpeEncoder: the byte-level BPE ("gpt2") half of Tokenizer.
//
// Byte-level BPE spells every byte as one printable character (the GPT-2
// byte-to-unicode table: printable Latin-1 bytes stand for themselves, the
// others for U+0100 onwards, so a space is "Ġ"), and token texts are made of
// those characters. Encoding pre-tokenizes the text into words
// (PreTokenizer), spells each word's bytes so, and merges adjacent symbols by
// the rank of tokenizer.ggml.merges (lowest rank first, leftmost first among
// equals) until no adjacent pair has a merge. A symbol that ends up not being
// a token falls back to the tokens of its single bytes.
//
// Merges work on integer symbol ids: every token, and every text a merge
// names that is not a token, has one, so a merge is a lookup of a pair of
// ids. Built once by Tokenizer::create; immutable and thread-safe after that.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/text/pretokenize.h"
#include "tensorpc/status.h"

namespace tensorpc {

struct Vocabulary;

// The character byte-level BPE writes for byte `b`.
uint32_t bpe_byte_to_char(uint8_t b);
// Appends the bytes a BPE token's text stands for: each character of the
// byte-to-unicode table its byte, anything else (a character outside the
// table, ill-formed UTF-8) its own bytes unchanged.
void bpe_text_to_bytes(std::string_view text, std::string& out);

class BpeEncoder {
 public:
  // From a vocabulary whose types Tokenizer::create has checked and filled
  // in. Merges produce normal and undefined tokens only: control and
  // user-defined ones come from parse_special, and other types never.
  // Malformed merges and an unknown pre are errors that name them.
  static StatusOr<std::shared_ptr<const BpeEncoder>> create(const Vocabulary& vocab);

  // Appends the ids of `text` (plain text: special tokens are split off
  // before). Bytes without a token become `unk`, or nothing when it is -1.
  void encode(std::string_view text, int32_t unk, std::vector<int32_t>& out) const;

  // The most input bytes one token of encode() stands for: a piece the
  // merges make spells a byte per character, and a fallback token (a byte's,
  // or unk) one byte.
  size_t max_token_bytes() const { return max_token_bytes_; }

  // The token that stands for byte `b` alone, or -1.
  int32_t byte_token(uint8_t b) const { return byte_token_[b]; }
  const PreTokenizer& pre_tokenizer() const { return pre_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the merged text
  };
  explicit BpeEncoder(PreTokenizer pre) : pre_(std::move(pre)) {}
  struct Scratch;  // working space of encode_word, reused across the words of one encode
  // Runs the merges over one word and appends its tokens.
  void encode_word(std::string_view word, int32_t unk, Scratch& scratch, std::vector<int32_t>& out) const;

  static uint64_t pair_key(int32_t left, int32_t right) {
    return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  }

  PreTokenizer pre_;
  int32_t n_tokens_ = 0;                        // symbol ids from here on are texts that are not tokens
  std::array<int32_t, 256> byte_symbol_{};      // symbol id of each byte's character
  std::array<int32_t, 256> byte_token_{};       // token of each byte's character, or -1
  size_t max_token_bytes_ = 1;
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left, right) -> merge
  // Mergeable token texts (the ignore_merges lookup of Llama 3's pre-tokenizer).
  std::unordered_map<std::string, int32_t> whole_words_;
};

}  // namespace tensorpc
