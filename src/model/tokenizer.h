// Tokenizer: text <-> token ids for the SentencePiece-style ("llama") vocabulary
// that llama-family GGUF files carry.
//
// It is built from plain data (Vocabulary), so it does not depend on the GGUF
// reader: the model loader copies tokenizer.ggml.tokens / scores / token_type
// and the special ids into a Vocabulary and calls Tokenizer::create, which
// validates it once. After that a Tokenizer is immutable and every method is
// const and thread-safe.
//
// Encoding is the SentencePiece BPE algorithm: spaces become "▁" (U+2581), a
// "▁" is prefixed to the text (add_space_prefix), the text is split into UTF-8
// characters, and the adjacent pair whose concatenation is a vocabulary piece
// with the highest score is merged until no pair is a piece. Characters that
// are not pieces fall back to byte tokens <0xXX> (or unk without byte tokens).
//
// Round trip: for any byte string x that does not contain "▁" itself,
// decode(encode(x)) == x byte for byte (invalid UTF-8 included) as long as the
// vocabulary has all 256 byte tokens. A literal "▁" in the input decodes as a
// space, because SentencePiece cannot tell the two apart.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,       // <s>, </s>: never produced from text unless parse_special
  user_defined = 4,  // matched literally when parse_special, otherwise an ordinary piece
  unused = 5,
  byte = 6,  // <0x00>..<0xFF>: the byte fallback
};

// The vocabulary as a GGUF file stores it. Empty `scores` means all 0; empty
// `types` means normal, except pieces spelled <0xXX>, which are byte tokens.
// A special id of -1 means the vocabulary has no such token.
struct Vocabulary {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  int32_t bos = 1, eos = 2, unk = 0;
  bool add_bos = true, add_eos = false, add_space_prefix = true;
};

class Tokenizer {
 public:
  // Validates `vocab`: non-empty; scores and types empty or one per token;
  // types known; special ids -1 or in range (bos required by add_bos, eos by
  // add_eos); byte tokens spelled <0xXX>. Missing byte tokens are not an
  // error; they are listed by missing_bytes().
  static StatusOr<Tokenizer> create(Vocabulary vocab);

  // Token ids of `text`. With add_special, BOS is prepended (add_bos) and EOS
  // appended (add_eos). With parse_special, the literal text of control and
  // user-defined tokens (e.g. "<s>") becomes that token; by default it is
  // encoded as ordinary text, so user input cannot inject control tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true, bool parse_special = false) const;

  // The text of `tokens`, as one sequence: a leading BOS is skipped and, with
  // add_space_prefix, the space the encoder prefixed is removed.
  std::string decode(std::span<const int32_t> tokens) const;

  // The bytes one token stands for, with no sequence context: "▁" becomes a
  // space, a byte token its byte (possibly part of a UTF-8 character),
  // control tokens and ids out of range nothing.
  std::string token_to_piece(int32_t token) const;

  int32_t n_tokens() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }
  int32_t unk() const { return vocab_.unk; }
  bool add_space_prefix() const { return vocab_.add_space_prefix; }
  // Whether encode() with add_special puts BOS before a text.
  bool add_bos() const { return vocab_.add_bos; }
  // Normal for ids out of range, so callers need not check first.
  TokenType type(int32_t token) const;
  bool is_control(int32_t token) const { return type(token) == TokenType::control; }
  // The stored piece text ("▁Hello", "<0x0A>", "<s>"); empty when out of range.
  std::string_view text(int32_t token) const;
  // Id of the byte token for `b`, or -1.
  int32_t byte_token(uint8_t b) const { return byte_to_token_[b]; }
  bool has_byte_tokens() const { return has_byte_tokens_; }
  // Bytes without a <0xXX> token when the vocabulary has some byte tokens;
  // those bytes encode as unk.
  const std::vector<uint8_t>& missing_bytes() const { return missing_bytes_; }

 private:
  // Hash and equality that let std::string_view look up std::string keys.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceMap = std::unordered_map<std::string, int32_t, PieceHash, std::equal_to<>>;

  explicit Tokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) {}

  // Id of the piece that merges may produce (normal, user-defined, undefined), or -1.
  int32_t find_piece(std::string_view piece) const;
  // Runs the SentencePiece merges over `text` (spaces already escaped).
  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;
  // Splits `text` into ordinary text and literal special tokens.
  void encode_with_specials(std::string_view text, bool add_prefix, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, bool add_prefix, std::vector<int32_t>& out) const;

  Vocabulary vocab_;
  PieceMap pieces_;
  std::array<int32_t, 256> byte_to_token_{};
  bool has_byte_tokens_ = false;
  std::vector<uint8_t> missing_bytes_;
  // Control and user-defined token ids by the first byte of their text,
  // longest text first: the candidates parse_special tries at each position.
  std::array<std::vector<int32_t>, 256> specials_by_first_byte_;
};

// Turns generated tokens into text as they arrive, emitting only complete
// UTF-8 characters: a character split over several byte tokens comes out
// whole, once its last byte has arrived. Bytes that can never complete a
// character are emitted as they are. The Tokenizer must outlive the stream.
class DetokenizeStream {
 public:
  // With sequence_start, the first tokens pushed are the start of a sequence
  // and are treated as decode() treats them (BOS skipped, prefix space removed);
  // without, e.g. for tokens generated after a prompt, every space is kept.
  explicit DetokenizeStream(const Tokenizer& tokenizer, bool sequence_start = false);

  // Text completed by `token`; may be empty.
  std::string push(int32_t token);
  // Whatever is still held back (an incomplete character at the end).
  std::string flush();

 private:
  std::string emit(size_t n);

  const Tokenizer* tokenizer_;
  std::string pending_;  // raw bytes not yet emitted, "▁" not yet turned into a space
  enum class Start { expect_bos, expect_first, done } start_;
  bool strip_space_ = false;  // drop the next emitted character if it is a space
};

}  // namespace tensorpc
