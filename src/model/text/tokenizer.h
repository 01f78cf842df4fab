// Tokenizer: text <-> token ids for the two vocabulary kinds GGUF files
// carry: SentencePiece ("llama", tokenizer.ggml.model) and byte-level BPE
// ("gpt2").
//
// It is built from plain data (Vocabulary), so it does not depend on the GGUF
// reader: tokenizer_from_gguf (tokenizer_gguf.h) copies the tokenizer.ggml.*
// keys into a Vocabulary and calls Tokenizer::create, which validates it once.
// After that a Tokenizer is immutable and every method is const and
// thread-safe.
//
// SentencePiece encoding: spaces become "▁" (U+2581), a "▁" is prefixed to
// the text (add_space_prefix; with parse_special, to each run of text, the
// first and every one after a special token), the text is split into UTF-8 characters, and
// the adjacent pair whose concatenation is a vocabulary piece with the highest
// score is merged until no pair is a piece. Characters that are not pieces
// fall back to byte tokens <0xXX> (or unk without byte tokens). No merge
// crosses a boundary between two bytes that no piece holds side by side, so
// the text is merged one segment between such boundaries at a time (a word,
// in ordinary text), which needs memory for one segment only; a segment with
// no such boundary in 1 GiB is cut there all the same.
//
// Byte-level BPE encoding (tokenizer_bpe.h): the text is split into words by
// the regular expressions of tokenizer.ggml.pre (pretokenize.h), each word's
// bytes are spelled with the byte-to-unicode table, and merges are applied by
// rank. Every byte has a character, so no byte is lost.
//
// Round trip: for any byte string x, decode(encode(x)) == x byte for byte
// (invalid UTF-8 included) as long as every byte has a token (missing_bytes()
// is empty). For SentencePiece x must not contain "▁" itself: a literal "▁"
// decodes as a space, because SentencePiece cannot tell the two apart.
//
// Special tokens: control tokens (<s>, <|im_start|>, <|eot_id|>) come from
// text only with parse_special, and decode prints them only when asked to
// (`special`), so user text cannot inject them and output does not show them.
// Tokens of the unknown type (Phi-3's [PAD32013]) print as control tokens do.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc {

class BpeEncoder;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,       // prints as a control token does: nothing, or its text with `special`
  control = 3,       // <s>, </s>: never produced from text unless parse_special
  user_defined = 4,  // matched literally when parse_special, otherwise an ordinary piece
  unused = 5,
  byte = 6,  // <0x00>..<0xFF>: the byte fallback
};

// tokenizer.ggml.model: how text becomes tokens.
enum class VocabularyKind {
  spm,  // "llama": SentencePiece, merges by score
  bpe,  // "gpt2": byte-level BPE, merges by rank
};

// The vocabulary as a GGUF file stores it. Empty `scores` means all 0; empty
// `types` means normal, except (SentencePiece only) pieces spelled <0xXX>,
// which are byte tokens, and bos/eos, which are control tokens.
// A special id of -1 means the vocabulary has no such token.
struct Vocabulary {
  VocabularyKind kind = VocabularyKind::spm;
  std::vector<std::string> tokens;
  std::vector<float> scores;  // SentencePiece only
  std::vector<int32_t> types;
  // BPE only: tokenizer.ggml.merges, "left right", best (rank 0) first; and
  // tokenizer.ggml.pre, the pre-tokenizer ("" means "default").
  std::vector<std::string> merges;
  std::string pre;
  int32_t bos = 1, eos = 2, unk = 0;
  // End of turn, end of message (a tool call's end), padding.
  int32_t eot = -1, eom = -1, pad = -1;
  // add_space_prefix is SentencePiece only; a BPE tokenizer ignores it.
  bool add_bos = true, add_eos = false, add_space_prefix = true;
};

class Tokenizer {
 public:
  // Validates `vocab`: non-empty; scores and types empty or one per token;
  // types known; special ids -1 or in range (bos required by add_bos, eos by
  // add_eos); byte tokens spelled <0xXX>; for BPE, merges "left right" and a
  // pre value PreTokenizer knows (an unknown one is unsupported, naming it).
  // Missing byte tokens are not an error; they are listed by missing_bytes().
  static StatusOr<Tokenizer> create(Vocabulary vocab);

  // Token ids of `text`. With add_special, BOS is prepended (add_bos) and EOS
  // appended (add_eos). With parse_special, the literal text of control and
  // user-defined tokens (e.g. "<s>", "<|im_start|>") becomes that token, the
  // longest first where several match; by default it is encoded as ordinary
  // text, so user input cannot inject control tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true, bool parse_special = false) const;

  // The most bytes of text one token of encode() stands for, whatever the
  // flags: a text of more than n * max_token_bytes() bytes never encodes to n
  // tokens or fewer, so a caller may refuse it before encoding. It is the
  // largest of: the text of a control or user-defined token (parse_special
  // matches it whole); the input a piece the merges can make spells (BPE: a
  // byte per character of the byte-to-unicode table, and no piece with other
  // characters, which merges never make; SentencePiece: its stored bytes, as
  // each "▁" may be a literal "▁" of the text, three bytes, where a space is
  // one and the prefix none); 1 for a byte token; and what unk stands for (a
  // byte, or with SentencePiece without byte tokens a character, up to 4).
  // BOS and EOS stand for no text. SIZE_MAX when some text encodes to no
  // token at all (a byte or character with no token and no unk), since then
  // no number bounds it: multiply with care. Computed by create; O(1).
  size_t max_token_bytes() const { return max_token_bytes_; }

  // The text of `tokens`, as one sequence: a leading BOS (a control token) is skipped and, with
  // add_space_prefix, the space the encoder prefixed is removed. Control
  // and unknown tokens give nothing, or their text with `special`.
  std::string decode(std::span<const int32_t> tokens, bool special = false) const;

  // The bytes one token stands for, with no sequence context: "▁" becomes a
  // space, a BPE token's characters their bytes, a byte token its byte
  // (possibly part of a UTF-8 character); control and unknown tokens nothing
  // (their text with `special`); ids out of range nothing.
  std::string token_to_piece(int32_t token, bool special = false) const;

  VocabularyKind kind() const { return vocab_.kind; }
  // The pre-tokenizer's name (BPE); empty for SentencePiece.
  std::string_view pre() const { return vocab_.pre; }
  int32_t n_tokens() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }
  int32_t unk() const { return vocab_.unk; }
  int32_t pad() const { return vocab_.pad; }
  // The end-of-turn token: tokenizer.ggml.eot_token_id when the file names
  // one, else the first control or user-defined token spelled <|eot_id|>,
  // <|im_end|>, <|end|>, <end_of_turn>, <|END_OF_TURN_TOKEN|>, <EOT> or
  // <|endoftext|> (in that order); -1 when there is none.
  int32_t eot() const { return eot_; }
  // Whether generation ends at `token`: EOS, EOT and EOM by their ids, and
  // every control or user-defined token spelled as an end of turn or message
  // (the texts eot() looks for, and <|eom_id|>), so a chat stops at
  // <|im_end|> even when the file names only <|endoftext|> as EOS.
  bool is_end_of_generation(int32_t token) const;
  bool add_space_prefix() const { return vocab_.add_space_prefix; }
  // Whether encode() with add_special puts BOS before a text.
  bool add_bos() const { return vocab_.add_bos; }
  // Normal for ids out of range, so callers need not check first.
  TokenType type(int32_t token) const;
  bool is_control(int32_t token) const { return type(token) == TokenType::control; }
  // The stored piece text ("▁Hello", "<0x0A>", "<s>"); empty when out of range.
  std::string_view text(int32_t token) const;
  // Id of the token that stands for byte `b` alone (<0xXX>; for BPE, the
  // byte's character), or -1.
  int32_t byte_token(uint8_t b) const { return byte_to_token_[b]; }
  bool has_byte_tokens() const { return has_byte_tokens_; }
  // Bytes without such a token (SentencePiece: only when the vocabulary has
  // some byte tokens; BPE: always); those bytes encode as unk, or not at all.
  const std::vector<uint8_t>& missing_bytes() const { return missing_bytes_; }

 private:
  // Hash and equality that let std::string_view look up std::string keys.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceMap = std::unordered_map<std::string, int32_t, PieceHash, std::equal_to<>>;

  explicit Tokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) {}
  // Finds the end-of-turn and end-of-generation tokens (one of create's last steps).
  void find_end_tokens();
  // Sets max_token_bytes_ (create's last step).
  void find_max_token_bytes();

  // Id of the piece that merges may produce (normal, user-defined, undefined), or -1.
  int32_t find_piece(std::string_view piece) const;
  struct MergeScratch;  // working space of encode_fragment, reused across the segments of one text
  // Runs the SentencePiece merges over `text`, a segment (spaces already escaped).
  void encode_fragment(std::string_view text, MergeScratch& scratch, std::vector<int32_t>& out) const;
  // Splits `text` into ordinary text and literal special tokens.
  void encode_with_specials(std::string_view text, bool add_prefix, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, bool add_prefix, std::vector<int32_t>& out) const;

  Vocabulary vocab_;
  PieceMap pieces_;
  // SentencePiece: the byte pairs that some piece holds side by side, as
  // byte_pair() numbers them; a text is merged in segments cut between others.
  std::bitset<256 * 256> piece_byte_pairs_;
  std::array<int32_t, 256> byte_to_token_{};
  bool has_byte_tokens_ = false;
  std::vector<uint8_t> missing_bytes_;
  // Control and user-defined token ids by the first byte of their text,
  // longest text first: the candidates parse_special tries at each position.
  std::array<std::vector<int32_t>, 256> specials_by_first_byte_;
  std::shared_ptr<const BpeEncoder> bpe_;  // BPE only; shared, immutable
  int32_t eot_ = -1;
  std::vector<int32_t> end_of_generation_;  // sorted
  size_t max_token_bytes_ = 0;
};

// OK when `other` tokenizes as `model` does: the same tokens with the same texts and the same
// BOS and EOS. Otherwise invalid_argument naming the first difference, `other_name` first:
// "the draft model's vocabulary has 2048 tokens, the model's 4096".
Status check_same_vocabulary(const Tokenizer& model, const Tokenizer& other, std::string_view other_name);

// Turns generated tokens into text as they arrive, emitting only complete
// UTF-8 characters: a character split over several byte tokens comes out
// whole, once its last byte has arrived. Bytes that can never complete a
// character are emitted as they are. The Tokenizer must outlive the stream.
class DetokenizeStream {
 public:
  // With sequence_start, the first tokens pushed are the start of a sequence
  // and are treated as decode() treats them (BOS skipped, prefix space removed);
  // without, e.g. for tokens generated after a prompt, every space is kept.
  // With special, control tokens show their text (Tokenizer::decode's special).
  explicit DetokenizeStream(const Tokenizer& tokenizer, bool sequence_start = false, bool special = false);

  // Text completed by `token`; may be empty.
  std::string push(int32_t token);
  // Whatever is still held back (an incomplete character at the end).
  std::string flush();

 private:
  std::string emit(size_t n);

  const Tokenizer* tokenizer_;
  std::string pending_;  // raw bytes not yet emitted, "▁" not yet turned into a space
  enum class Start { expect_bos, expect_first, done } start_;
  bool special_ = false;
  bool strip_space_ = false;  // drop the next emitted character if it is a space
};

}  // namespace tensorpc
