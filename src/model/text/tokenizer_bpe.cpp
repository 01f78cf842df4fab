// BpeEncoder: byte-to-unicode table, merges by rank, and the byte fallback.
// See tokenizer_bpe.h.
#include "model/text/tokenizer_bpe.h"

#include <algorithm>

#include "model/text/symbol_list.h"
#include "model/text/tokenizer.h"
#include "model/text/utf8.h"

namespace tensorpc {
namespace {

// The table's characters: the printable bytes '!'..'~', '¡'..'¬', '®'..'ÿ'
// stand for themselves; the other 68 bytes, in order, for U+0100..U+0143.
struct ByteTable {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 0x144> to_byte{};  // -1 for characters outside the table

  ByteTable() {
    to_byte.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;  // immutable once built
  return table;
}

// The byte the table's character of `len` bytes at text[i] stands for (len
// as utf8_char_length gave it), or -1 for any other character or byte.
int table_byte(std::string_view text, size_t i, int len) {
  if (len <= 0) return -1;
  const uint32_t cp = utf8_decode(text, i, len);
  const ByteTable& table = byte_table();
  return cp < table.to_byte.size() ? table.to_byte[cp] : -1;
}

// The bytes a token's text spells: one per character when all are the
// table's, else 0, as merges build texts of the table's characters only and
// so never make that token.
size_t spelled_byte_count(std::string_view text) {
  size_t count = 0;
  for (size_t i = 0; i < text.size(); ++count) {
    const int len = utf8_char_length(text, i);
    if (table_byte(text, i, len) < 0) return 0;
    i += static_cast<size_t>(len);
  }
  return count;
}

// A merge's text for messages: hostile files may hold long or binary ones.
std::string quoted(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "\"";
  out.append(s.substr(0, kMax));
  out.append(s.size() > kMax ? "...\"" : "\"");
  return out;
}

}  // namespace

uint32_t bpe_byte_to_char(uint8_t b) { return byte_table().to_char[b]; }

void bpe_text_to_bytes(std::string_view text, std::string& out) {
  for (size_t i = 0; i < text.size();) {
    const int len = utf8_char_length(text, i);
    const size_t step = len > 0 ? static_cast<size_t>(len) : 1;  // an ill-formed byte is itself
    const int b = table_byte(text, i, len);
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(text.substr(i, step));
    }
    i += step;
  }
}

StatusOr<std::shared_ptr<const BpeEncoder>> BpeEncoder::create(const Vocabulary& vocab) {
  TENSORPC_ASSIGN_OR_RETURN(auto pre, PreTokenizer::create(vocab.pre.empty() ? "default" : vocab.pre));
  std::shared_ptr<BpeEncoder> enc(new BpeEncoder(std::move(pre)));
  const auto n = static_cast<int32_t>(vocab.tokens.size());
  enc->n_tokens_ = n;

  // Symbol ids: mergeable tokens by their text, then texts that are not tokens.
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(static_cast<size_t>(n) + vocab.merges.size());
  for (int32_t id = 0; id < n; ++id) {
    const auto type = static_cast<TokenType>(vocab.types[id]);
    if (type == TokenType::normal || type == TokenType::undefined) {
      ids.try_emplace(vocab.tokens[id], id);
      enc->max_token_bytes_ = std::max(enc->max_token_bytes_, spelled_byte_count(vocab.tokens[id]));
    }
  }
  if (enc->pre_.ignore_merges()) enc->whole_words_ = ids;
  int64_t next_id = n;
  // Ids past INT32_MAX cannot happen: each merge adds at most three texts and
  // the file's size bounds the count long before.
  const auto intern = [&](std::string text) {
    auto [it, added] = ids.try_emplace(std::move(text), static_cast<int32_t>(next_id));
    if (added) ++next_id;
    return it->second;
  };

  for (int b = 0; b < 256; ++b) {
    std::string text;
    utf8_append(bpe_byte_to_char(static_cast<uint8_t>(b)), text);
    const int32_t id = intern(std::move(text));
    enc->byte_symbol_[b] = id;
    enc->byte_token_[b] = id < n ? id : -1;
  }

  enc->merges_.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& merge = vocab.merges[rank];
    const size_t space = merge.find(' ');
    if (space == 0 || space == std::string::npos || space + 1 == merge.size() ||
        merge.find(' ', space + 1) != std::string::npos) {
      return invalid_argument("tokenizer: merge " + std::to_string(rank) + " is " + quoted(merge) +
                              ", not two pieces separated by one space");
    }
    if (rank > static_cast<size_t>(INT32_MAX)) return invalid_argument("tokenizer: more merges than int32 ranks");
    const std::string_view left(merge.data(), space), right(merge.data() + space + 1, merge.size() - space - 1);
    const int32_t l = intern(std::string(left));
    const int32_t r = intern(std::string(right));
    const int32_t result = intern(std::string(left) + std::string(right));
    // The first of duplicate merges keeps its rank.
    enc->merges_.try_emplace(pair_key(l, r), Merge{static_cast<int32_t>(rank), result});
  }
  return std::shared_ptr<const BpeEncoder>(std::move(enc));
}

// The word as a doubly linked list of symbols, one per byte at first. A merge
// grows the left symbol and empties the right one (len 0). Candidate merges
// wait in a heap, best first: lowest rank, then leftmost. A candidate is stale
// once either side has changed; the ids it was made from tell.
struct BpeEncoder::Scratch {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t start, len;
  };
  struct Candidate {
    int32_t rank;
    int32_t left, right;
    int32_t left_id, right_id, result;
  };
  static bool worse(const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
  std::vector<Symbol> syms;
  std::vector<Candidate> queue;
  std::string spelled;
};

void BpeEncoder::encode(std::string_view text, int32_t unk, std::vector<int32_t>& out) const {
  // Word by word as the pre-tokenizer finds them: the working set is one
  // word's scratch and the cache, whatever the length of the text.
  Scratch scratch;
  // Words repeat (" the", " and"): within one call, a short word merged once
  // is copied from its first ids. Local, so encode stays const and thread-safe.
  constexpr size_t kMaxCachedWord = 24, kMaxCacheEntries = 1 << 16;
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;  // word -> [begin, end) in out
  pre_.for_each_word(text, [&](std::string_view word) {
    if (word.size() > kMaxCachedWord) {
      encode_word(word, unk, scratch, out);
      return;
    }
    auto it = seen.find(word);
    if (it != seen.end()) {
      for (size_t k = it->second.first; k < it->second.second; ++k) {
        const int32_t id = out[k];
        out.push_back(id);
      }
      return;
    }
    const size_t begin = out.size();
    encode_word(word, unk, scratch, out);
    if (seen.size() < kMaxCacheEntries) seen.emplace(word, std::pair{begin, out.size()});
  });
}

void BpeEncoder::encode_word(std::string_view word, int32_t unk, Scratch& scratch, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (!whole_words_.empty()) {
    std::string& spelled = scratch.spelled;
    spelled.clear();
    for (char c : word) utf8_append(bpe_byte_to_char(static_cast<uint8_t>(c)), spelled);
    auto it = whole_words_.find(spelled);
    if (it != whole_words_.end()) {
      out.push_back(it->second);
      return;
    }
  }

  using Symbol = Scratch::Symbol;
  using Candidate = Scratch::Candidate;
  std::vector<Symbol>& syms = scratch.syms;
  syms.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    const auto idx = static_cast<int32_t>(i);
    syms.push_back({byte_symbol_[static_cast<uint8_t>(word[i])], idx - 1, idx + 1, static_cast<uint32_t>(i), 1});
  }
  syms.back().next = -1;

  const auto worse = &Scratch::worse;
  std::vector<Candidate>& queue = scratch.queue;
  queue.clear();
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merges_.find(pair_key(syms[left].id, syms[right].id));
    if (it == merges_.end()) return;
    queue.push_back({it->second.rank, left, right, syms[left].id, syms[right].id, it->second.result});
    std::push_heap(queue.begin(), queue.end(), worse);
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i) consider(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), worse);
    const Candidate c = queue.back();
    queue.pop_back();
    Symbol& left = syms[c.left];
    Symbol& right = syms[c.right];
    if (left.len == 0 || right.len == 0 || left.next != c.right || left.id != c.left_id || right.id != c.right_id) {
      continue;
    }
    left.id = c.result;
    join_with_next(syms, c.left);
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const Symbol& s = syms[i];
    if (s.id < n_tokens_) {
      out.push_back(s.id);
      continue;
    }
    // Not a token: the tokens of its bytes.
    for (uint32_t k = s.start; k < s.start + s.len; ++k) {
      const int32_t t = byte_token_[static_cast<uint8_t>(word[k])];
      if (t >= 0) {
        out.push_back(t);
      } else if (unk >= 0) {
        out.push_back(unk);
      }
    }
  }
}

}  // namespace tensorpc
