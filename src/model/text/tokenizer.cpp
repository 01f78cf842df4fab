// Tokenizer: vocabulary validation, special tokens, SentencePiece encoding,
// decoding and the streaming detokenizer; byte-level BPE encoding is in
// tokenizer_bpe.cpp. See tokenizer.h for the contracts.
#include "model/text/tokenizer.h"

#include <algorithm>

#include "model/text/symbol_list.h"
#include "model/text/tokenizer_bpe.h"
#include "model/text/utf8.h"

namespace tensorpc {
namespace {

constexpr std::string_view kSpaceEscape = "\xE2\x96\x81";  // "▁", U+2581

// Parses "<0xXX>" (upper- or lower-case hex); -1 when `s` is not spelled so.
int parse_byte_piece(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  int value = 0;
  for (char c : s.substr(3, 2)) {
    int digit = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                         : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// The index of the adjacent bytes a, b in Tokenizer::piece_byte_pairs_.
size_t byte_pair(char a, char b) { return size_t{static_cast<uint8_t>(a)} << 8 | static_cast<uint8_t>(b); }

// The longest SentencePiece segment: the 32-bit indices of its symbols end beyond.
constexpr size_t kMaxSegment = size_t{1} << 30;

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, from.size()) == from) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

// Texts of the tokens that end a turn, in the order eot() prefers them.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|END_OF_TURN_TOKEN|>", "<EOT>", "<|endoftext|>",
};
// Ends of a message that is not the end of a turn (a tool call's).
constexpr std::string_view kEndOfMessageTexts[] = {"<|eom_id|>"};

// The bytes `token` contributes to a text, before "▁" becomes a space (SentencePiece).
void append_raw_piece(const Tokenizer& tok, int32_t token, bool special, std::string& out) {
  switch (tok.type(token)) {
    case TokenType::control:
    case TokenType::unknown:  // special as control tokens are ([PAD32013] of Phi-3)
      if (special) out += tok.text(token);
      return;
    case TokenType::byte: out += static_cast<char>(parse_byte_piece(tok.text(token))); return;  // validated by create
    case TokenType::normal:
    case TokenType::undefined:
      if (tok.kind() == VocabularyKind::bpe) {
        bpe_text_to_bytes(tok.text(token), out);
        return;
      }
      [[fallthrough]];
    default: out += tok.text(token);  // user-defined tokens are stored as plain text in both kinds
  }
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::create(Vocabulary vocab) {
  const size_t n = vocab.tokens.size();
  const auto error = [](const std::string& what) { return invalid_argument("tokenizer: " + what); };
  if (n == 0) return error("the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return error("the vocabulary has more tokens than int32 ids can name");
  if (!vocab.scores.empty() && vocab.scores.size() != n)
    return error(std::to_string(vocab.scores.size()) + " scores for " + std::to_string(n) + " tokens");
  if (!vocab.types.empty() && vocab.types.size() != n)
    return error(std::to_string(vocab.types.size()) + " token types for " + std::to_string(n) + " tokens");
  for (auto [name, id] : {std::pair<const char*, int32_t>{"bos", vocab.bos},
                          {"eos", vocab.eos},
                          {"unk", vocab.unk},
                          {"eot", vocab.eot},
                          {"eom", vocab.eom},
                          {"pad", vocab.pad}}) {
    if (id < -1 || id >= static_cast<int64_t>(n))
      return error(std::string(name) + " id " + std::to_string(id) + " is outside the vocabulary of " +
                   std::to_string(n) + " tokens");
  }
  const bool bpe = vocab.kind == VocabularyKind::bpe;
  if (bpe) {
    vocab.add_space_prefix = false;
    if (vocab.pre.empty()) vocab.pre = "default";
  } else if (!vocab.merges.empty()) {
    return error("merges are given for a SentencePiece vocabulary, which merges by score");
  }
  if (vocab.add_bos && vocab.bos < 0) return error("add_bos is set but the vocabulary has no bos token");
  if (vocab.add_eos && vocab.eos < 0) return error("add_eos is set but the vocabulary has no eos token");

  if (vocab.scores.empty()) vocab.scores.assign(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    // A NaN would break the ordering of the merge queue.
    if (vocab.scores[i] != vocab.scores[i]) return error("token " + std::to_string(i) + " has a NaN score");
  }
  if (vocab.types.empty()) {
    // Without types, infer what a GGUF file would have said.
    vocab.types.assign(n, static_cast<int32_t>(TokenType::normal));
    for (size_t i = 0; i < n && !bpe; ++i) {
      if (parse_byte_piece(vocab.tokens[i]) >= 0) vocab.types[i] = static_cast<int32_t>(TokenType::byte);
    }
    if (vocab.bos >= 0) vocab.types[vocab.bos] = static_cast<int32_t>(TokenType::control);
    if (vocab.eos >= 0) vocab.types[vocab.eos] = static_cast<int32_t>(TokenType::control);
    if (vocab.unk >= 0) vocab.types[vocab.unk] = static_cast<int32_t>(TokenType::unknown);
  }

  Tokenizer tok(std::move(vocab));
  tok.byte_to_token_.fill(-1);
  if (!bpe) tok.pieces_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& piece = tok.vocab_.tokens[i];
    const int32_t raw_type = tok.vocab_.types[i];
    if (raw_type < 0 || raw_type > static_cast<int32_t>(TokenType::byte))
      return error("token " + std::to_string(i) + " has unknown type " + std::to_string(raw_type));
    switch (static_cast<TokenType>(raw_type)) {
      case TokenType::byte: {
        const int b = parse_byte_piece(piece);
        if (b < 0) return error("byte token " + std::to_string(i) + " is spelled \"" + piece + "\", not <0xXX>");
        if (tok.byte_to_token_[b] < 0) tok.byte_to_token_[b] = id;  // the first of duplicates wins
        tok.has_byte_tokens_ = true;
        break;
      }
      case TokenType::user_defined:
      case TokenType::control:
        if (!piece.empty()) tok.specials_by_first_byte_[static_cast<uint8_t>(piece[0])].push_back(id);
        if (raw_type == static_cast<int32_t>(TokenType::control)) break;
        [[fallthrough]];  // user-defined pieces are also ordinary pieces
      case TokenType::normal:
      case TokenType::undefined:
        if (!bpe) {
          tok.pieces_.try_emplace(piece, id);  // the first of duplicates wins
          for (size_t k = 1; k < piece.size(); ++k) tok.piece_byte_pairs_.set(byte_pair(piece[k - 1], piece[k]));
        }
        break;
      case TokenType::unknown:
      case TokenType::unused: break;  // never produced by merges
    }
  }
  if (bpe) {
    TENSORPC_ASSIGN_OR_RETURN(tok.bpe_, BpeEncoder::create(tok.vocab_));
    // A byte's token is its character's: <0xXX> tokens, should a BPE
    // vocabulary have any, are not what its encoder falls back to.
    tok.has_byte_tokens_ = false;
    for (int b = 0; b < 256; ++b) {
      tok.byte_to_token_[b] = tok.bpe_->byte_token(static_cast<uint8_t>(b));
      if (tok.byte_to_token_[b] >= 0) tok.has_byte_tokens_ = true;
    }
  }
  if (tok.has_byte_tokens_ || bpe) {
    for (int b = 0; b < 256; ++b) {
      if (tok.byte_to_token_[b] < 0) tok.missing_bytes_.push_back(static_cast<uint8_t>(b));
    }
  }
  for (auto& ids : tok.specials_by_first_byte_) {
    // Longest first, so "<|im_start|>" wins over a "<|" that is also special.
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      const size_t la = tok.vocab_.tokens[a].size(), lb = tok.vocab_.tokens[b].size();
      return la != lb ? la > lb : a < b;
    });
  }
  tok.find_end_tokens();
  tok.find_max_token_bytes();
  return tok;
}

void Tokenizer::find_max_token_bytes() {
  // SentencePiece without byte tokens: a character that is no piece becomes unk, or nothing.
  const bool unk_for_characters = !bpe_ && !has_byte_tokens_;
  if (vocab_.unk < 0 && (!missing_bytes_.empty() || unk_for_characters)) {
    max_token_bytes_ = SIZE_MAX;
    return;
  }
  // BPE's pieces and fallbacks; a byte token or unk for a byte; unk for a character (UTF-8: up to 4 bytes).
  size_t most = bpe_ ? bpe_->max_token_bytes() : unk_for_characters ? 4 : 1;
  for (int32_t id = 0; id < n_tokens(); ++id) {
    switch (type(id)) {
      case TokenType::control:
      case TokenType::user_defined: most = std::max(most, text(id).size()); break;
      case TokenType::normal:
      case TokenType::undefined:
        if (!bpe_) most = std::max(most, text(id).size());
        break;
      default: break;  // unknown, unused and byte tokens stand for what unk and byte tokens do
    }
  }
  max_token_bytes_ = most;
}

void Tokenizer::find_end_tokens() {
  // The control or user-defined token spelled `text` (the lowest id of
  // equals), from the index parse_special uses.
  const auto spelled_as_special = [&](std::string_view text) {
    for (int32_t id : specials_by_first_byte_[static_cast<uint8_t>(text[0])]) {
      if (vocab_.tokens[id] == text) return id;
    }
    return -1;
  };
  eot_ = vocab_.eot;
  for (std::string_view text : kEndOfTurnTexts) {
    const int32_t id = spelled_as_special(text);
    if (eot_ < 0) eot_ = id;
    if (id >= 0) end_of_generation_.push_back(id);
  }
  for (std::string_view text : kEndOfMessageTexts) {
    const int32_t id = spelled_as_special(text);
    if (id >= 0) end_of_generation_.push_back(id);
  }
  for (int32_t id : {vocab_.eos, vocab_.eot, vocab_.eom}) {
    if (id >= 0) end_of_generation_.push_back(id);
  }
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()), end_of_generation_.end());
}

bool Tokenizer::is_end_of_generation(int32_t token) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), token);
}

TokenType Tokenizer::type(int32_t token) const {
  if (token < 0 || token >= n_tokens()) return TokenType::normal;
  return static_cast<TokenType>(vocab_.types[token]);
}

std::string_view Tokenizer::text(int32_t token) const {
  if (token < 0 || token >= n_tokens()) return {};
  return vocab_.tokens[token];
}

int32_t Tokenizer::find_piece(std::string_view piece) const {
  auto it = pieces_.find(piece);
  return it == pieces_.end() ? -1 : it->second;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos);
  // An empty text gets no space prefix: there is no word to mark.
  if (!text.empty()) {
    if (parse_special) {
      encode_with_specials(text, vocab_.add_space_prefix, out);
    } else {
      encode_text(text, vocab_.add_space_prefix, out);
    }
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos);
  return out;
}

void Tokenizer::encode_with_specials(std::string_view text, bool add_prefix, std::vector<int32_t>& out) const {
  size_t run_start = 0;  // start of the ordinary text not yet encoded
  for (size_t i = 0; i < text.size();) {
    int32_t match = -1;
    for (int32_t id : specials_by_first_byte_[static_cast<uint8_t>(text[i])]) {
      if (text.substr(i).starts_with(vocab_.tokens[id])) {
        match = id;
        break;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    // Every run of text gets the prefix, the first and each after a special
    // token (as the common GGUF runtimes tokenize "<|user|>\nHi").
    if (i > run_start) encode_text(text.substr(run_start, i - run_start), add_prefix, out);
    out.push_back(match);
    i += vocab_.tokens[match].size();
    run_start = i;
  }
  if (run_start < text.size()) encode_text(text.substr(run_start), add_prefix, out);
}

// The text as a doubly linked list of symbols (initially UTF-8 characters).
// A merge grows the left symbol and empties the right one (len 0). Candidate
// merges wait in a heap, best first: highest score, then leftmost. An entry
// goes stale when either side has changed since it was queued; `len` detects it.
struct Tokenizer::MergeScratch {
  struct Symbol {
    int32_t prev, next;
    uint32_t start, len;
  };
  struct Candidate {
    float score;
    int32_t left, right;
    uint32_t len;
  };
  static bool worse(const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  }
  std::vector<Symbol> syms;
  std::vector<Candidate> queue;
};

void Tokenizer::encode_text(std::string_view text, bool add_prefix, std::vector<int32_t>& out) const {
  if (bpe_) {
    bpe_->encode(text, vocab_.unk, out);
    return;
  }
  // Escaped a character at a time into the segment, which is merged and
  // emptied where the next character starts a new one. Characters are the
  // merges' first symbols: a space and its "▁" are each a whole one.
  MergeScratch scratch;
  std::string segment(add_prefix ? kSpaceEscape : "");
  for (size_t i = 0; i < text.size();) {
    const int len = utf8_char_length(text, i);
    const size_t step = len > 0 ? static_cast<size_t>(len) : 1;  // an ill-formed byte is a symbol of its own
    const std::string_view character = text[i] == ' ' ? kSpaceEscape : text.substr(i, step);
    if (!segment.empty() &&
        (!piece_byte_pairs_.test(byte_pair(segment.back(), character.front())) || segment.size() >= kMaxSegment)) {
      encode_fragment(segment, scratch, out);
      segment.clear();
    }
    segment += character;
    i += step;
  }
  if (!segment.empty()) encode_fragment(segment, scratch, out);
}

void Tokenizer::encode_fragment(std::string_view text, MergeScratch& scratch, std::vector<int32_t>& out) const {
  using Candidate = MergeScratch::Candidate;
  std::vector<MergeScratch::Symbol>& syms = scratch.syms;
  syms.clear();
  for (size_t i = 0; i < text.size();) {
    const int len = utf8_char_length(text, i);
    const size_t step = len > 0 ? static_cast<size_t>(len) : 1;  // an ill-formed byte is a symbol of its own
    const auto idx = static_cast<int32_t>(syms.size());
    syms.push_back({idx - 1, idx + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(step)});
    i += step;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  const auto worse = &MergeScratch::worse;
  std::vector<Candidate>& queue = scratch.queue;
  queue.clear();
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = syms[left].len + syms[right].len;
    const int32_t id = find_piece(text.substr(syms[left].start, len));
    if (id < 0) return;
    queue.push_back({vocab_.scores[id], left, right, len});
    std::push_heap(queue.begin(), queue.end(), worse);
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i) consider(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), worse);
    const Candidate c = queue.back();
    queue.pop_back();
    MergeScratch::Symbol& left = syms[c.left];
    MergeScratch::Symbol& right = syms[c.right];
    if (left.len == 0 || right.len == 0 || left.next != c.right || left.len + right.len != c.len) continue;
    join_with_next(syms, c.left);
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].start, syms[i].len);
    const int32_t id = find_piece(piece);
    if (id >= 0) {
      out.push_back(id);
    } else if (has_byte_tokens_) {
      for (char c : piece) {
        const int32_t b = byte_to_token_[static_cast<uint8_t>(c)];
        if (b >= 0) {
          out.push_back(b);
        } else if (vocab_.unk >= 0) {
          out.push_back(vocab_.unk);
        }
      }
    } else if (vocab_.unk >= 0) {
      out.push_back(vocab_.unk);  // one unk per unknown character
    }
    // With neither byte tokens nor unk, the character is dropped.
  }
}

std::string Tokenizer::decode(std::span<const int32_t> tokens, bool special) const {
  DetokenizeStream stream(*this, /*sequence_start=*/true, special);
  std::string out;
  for (int32_t t : tokens) out += stream.push(t);
  out += stream.flush();
  return out;
}

std::string Tokenizer::token_to_piece(int32_t token, bool special) const {
  std::string raw;
  append_raw_piece(*this, token, special, raw);
  if (bpe_) return raw;
  return replace_all(raw, kSpaceEscape, " ");  // a single byte is never a whole "▁"
}

DetokenizeStream::DetokenizeStream(const Tokenizer& tokenizer, bool sequence_start, bool special)
    : tokenizer_(&tokenizer), start_(sequence_start ? Start::expect_bos : Start::done), special_(special) {}

std::string DetokenizeStream::push(int32_t token) {
  if (start_ != Start::done) {
    // A BOS that is an ordinary token (a vocabulary may say so) is text, not a marker.
    if (start_ == Start::expect_bos && token == tokenizer_->bos() && tokenizer_->is_control(token)) {
      start_ = Start::expect_first;
      return {};
    }
    start_ = Start::done;
    // The encoder put a space before the first word; a control token there means it did not.
    strip_space_ = tokenizer_->add_space_prefix() && !tokenizer_->is_control(token);
  }
  append_raw_piece(*tokenizer_, token, special_, pending_);
  // Emit up to the last complete character; an ill-formed byte counts as complete
  // (nothing can repair it), a well-formed start cut off by the end waits.
  size_t complete = 0;
  while (complete < pending_.size()) {
    const int len = utf8_char_length(pending_, complete);
    if (len < 0) break;
    complete += len == 0 ? 1 : static_cast<size_t>(len);
  }
  return emit(complete);
}

std::string DetokenizeStream::flush() { return emit(pending_.size()); }

std::string DetokenizeStream::emit(size_t n) {
  // "▁" is complete once emitted, so replacing here never splits one.
  std::string text = tokenizer_->kind() == VocabularyKind::bpe
                         ? pending_.substr(0, n)
                         : replace_all(std::string_view(pending_).substr(0, n), kSpaceEscape, " ");
  pending_.erase(0, n);
  if (strip_space_ && !text.empty()) {
    if (text[0] == ' ') text.erase(0, 1);
    strip_space_ = false;
  }
  return text;
}

Status check_same_vocabulary(const Tokenizer& model, const Tokenizer& other, std::string_view other_name) {
  const auto quoted = [](std::string_view s) {
    std::string q(1, '"');
    q.append(s).push_back('"');
    return q;
  };
  if (other.n_tokens() != model.n_tokens()) {
    return invalid_argument(std::string(other_name) + "'s vocabulary has " + std::to_string(other.n_tokens()) +
                            " tokens, the model's " + std::to_string(model.n_tokens()));
  }
  for (int32_t t = 0; t < model.n_tokens(); ++t) {
    if (other.text(t) != model.text(t)) {
      return invalid_argument(std::string(other_name) + "'s token " + std::to_string(t) + " is " +
                              quoted(other.text(t)) + ", the model's " + quoted(model.text(t)));
    }
  }
  if (other.bos() != model.bos() || other.eos() != model.eos()) {
    return invalid_argument(std::string(other_name) + "'s BOS and EOS are tokens " + std::to_string(other.bos()) +
                            " and " + std::to_string(other.eos()) + ", the model's " + std::to_string(model.bos()) +
                            " and " + std::to_string(model.eos()));
  }
  return Status();
}

}  // namespace tensorpc
