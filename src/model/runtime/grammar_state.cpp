// GrammarState: the set of parse stacks of grammar.h, moved on one byte at a time.
#include <algorithm>

#include "model/runtime/grammar.h"

namespace tensorpc {
namespace {

using Kind = Grammar::Symbol::Kind;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

uint64_t hash_frames(const uint32_t* f, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ f[i]) * 1099511628211ull;
  return h ^ n;
}

size_t stack_begin(const GrammarStacks& s, size_t i) { return i == 0 ? 0 : s.ends[i - 1]; }

}  // namespace

GrammarState::GrammarState(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  const auto& alternatives = grammar_->rule(grammar_->root()).alternatives;
  for (size_t i = 1; i < alternatives.size(); ++i) {
    pending_.frames.push_back(alternatives[i]);
    pending_.ends.push_back(static_cast<uint32_t>(pending_.frames.size()));
  }
  scratch_.assign(1, alternatives[0]);
  expand();
}

void GrammarState::fail(std::string why) {
  error_ = out_of_memory("grammar: " + why);
  stacks_.clear();
}

void GrammarState::add_stack(const std::vector<uint32_t>& stack) {
  const uint64_t h = hash_frames(stack.data(), stack.size());
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (stacks_.hashes[i] != h) continue;
    const size_t begin = stack_begin(stacks_, i);
    if (stacks_.ends[i] - begin == stack.size() &&
        std::equal(stack.begin(), stack.end(), stacks_.frames.begin() + static_cast<ptrdiff_t>(begin)))
      return;
  }
  if (stacks_.size() >= static_cast<size_t>(grammar_->limits().max_stacks)) {
    fail("more than " + std::to_string(grammar_->limits().max_stacks) +
         " parse stacks at once (the grammar is too ambiguous)");
    return;
  }
  stacks_.frames.insert(stacks_.frames.end(), stack.begin(), stack.end());
  stacks_.ends.push_back(static_cast<uint32_t>(stacks_.frames.size()));
  stacks_.hashes.push_back(h);
}

void GrammarState::expand() {
  const Grammar& g = *grammar_;
  const size_t max_depth = static_cast<size_t>(g.limits().max_stack_depth);
  const int budget = g.limits().max_stacks * 64;
  while (error_.ok()) {
    // Follow scratch_ until its top is a code-point set (or nothing: the text may end).
    while (true) {
      if (++work_ > budget) {
        fail("more than " + std::to_string(budget) + " expansion steps for one character");
        return;
      }
      if (scratch_.empty()) {
        add_stack(scratch_);
        break;
      }
      const Grammar::Symbol& top = g.symbol(scratch_.back());
      if (top.kind == Kind::end) {
        scratch_.pop_back();
        continue;
      }
      if (top.kind == Kind::chars) {
        if (scratch_.size() <= max_depth) add_stack(scratch_);
        break;
      }
      if (scratch_.size() > max_depth) break;  // too deep: this choice is dropped
      // A reference: return past it (at once, when its alternative ends there), into each alternative.
      scratch_.back() += 1;
      while (!scratch_.empty() && g.symbol(scratch_.back()).kind == Kind::end) scratch_.pop_back();
      const auto& alternatives = g.rule(top.first).alternatives;
      for (size_t i = 1; i < alternatives.size(); ++i) {
        pending_.frames.insert(pending_.frames.end(), scratch_.begin(), scratch_.end());
        pending_.frames.push_back(alternatives[i]);
        pending_.ends.push_back(static_cast<uint32_t>(pending_.frames.size()));
      }
      scratch_.push_back(alternatives[0]);
    }
    if (pending_.size() == 0) return;
    const size_t begin = stack_begin(pending_, pending_.size() - 1);
    scratch_.assign(pending_.frames.begin() + static_cast<ptrdiff_t>(begin), pending_.frames.end());
    pending_.frames.resize(begin);
    pending_.ends.pop_back();
  }
  pending_.clear();
}

uint64_t GrammarStepCache::slot_key(const GrammarStacks& from, uint32_t cp) {
  uint64_t h = cp * 0x9E3779B97F4A7C15ull;
  for (const uint64_t stack : from.hashes) h = (h ^ stack) * 0x100000001B3ull;
  return h ^ (h >> 29);
}

const GrammarStacks* GrammarStepCache::find(const Grammar* grammar, const GrammarStacks& from, uint32_t cp) const {
  const Entry& e = entries_[slot_key(from, cp) % entries_.size()];
  if (e.grammar.get() != grammar || e.cp != cp || e.from.ends != from.ends || e.from.frames != from.frames)
    return nullptr;
  return &e.to;
}

void GrammarStepCache::insert(const std::shared_ptr<const Grammar>& grammar, const GrammarStacks& from, uint32_t cp,
                              const GrammarStacks& to) {
  Entry& e = entries_[slot_key(from, cp) % entries_.size()];
  if (e.grammar != grammar) e.grammar = grammar;
  e.cp = cp;
  e.from = from;
  e.to = to;
}

bool GrammarState::step_code_point(const GrammarState& from, uint32_t cp, GrammarStepCache* cache) {
  const Grammar& g = *grammar_;
  const GrammarStacks& in = from.stacks_;
  if (cache) {
    if (const GrammarStacks* known = cache->find(&g, in, cp)) {
      stacks_ = *known;
      return valid();
    }
  }
  for (size_t i = 0; i < in.size() && error_.ok(); ++i) {
    const size_t begin = stack_begin(in, i), end = in.ends[i];
    if (begin == end || !g.matches(g.symbol(in.frames[end - 1]), cp)) continue;
    scratch_.assign(in.frames.begin() + static_cast<ptrdiff_t>(begin), in.frames.begin() + static_cast<ptrdiff_t>(end));
    scratch_.back() += 1;
    expand();
  }
  if (cache && error_.ok()) cache->insert(grammar_, in, cp, stacks_);
  return valid();
}

bool Utf8Prefix::push(uint8_t byte) {
  int length_now = length;
  if (left > 0) {
    if ((byte & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (byte & 0x3Fu);
    --left;
  } else if (byte < 0x80) {
    cp = byte, left = 0, length_now = 1;
  } else if (byte >= 0xC2 && byte <= 0xDF) {
    cp = byte & 0x1Fu, left = 1, length_now = 2;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    cp = byte & 0x0Fu, left = 2, length_now = 3;
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    cp = byte & 0x07u, left = 3, length_now = 4;
  } else {
    return false;
  }
  length = length_now;
  // Well-formed UTF-8 only: no overlong form, no surrogate, nothing above U+10FFFF.
  static constexpr uint32_t kShortest[4] = {0, 0x80, 0x800, 0x10000};
  lo = std::max(cp << (6 * left), kShortest[length - 1]);
  hi = std::min(((cp + 1) << (6 * left)) - 1, kMaxCodePoint);
  return lo <= hi && !(lo >= 0xD800 && hi <= 0xDFFF);
}

bool GrammarState::advance_from(const GrammarState& from, uint8_t byte, GrammarStepCache* cache) {
  if (grammar_ != from.grammar_) grammar_ = from.grammar_;
  stacks_.clear();
  pending_.clear();
  if (!from.error_.ok() || !error_.ok()) error_ = from.error_;
  work_ = 0;
  utf8_ = from.utf8_;
  if (!from.valid() || !utf8_.push(byte)) {
    utf8_ = {};
    return false;
  }
  if (utf8_.left == 0) return step_code_point(from, utf8_.cp, cache);
  // A character cut off: keep the stacks whose set holds some character it may still become.
  const Grammar& g = *grammar_;
  const GrammarStacks& in = from.stacks_;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t begin = stack_begin(in, i), end = in.ends[i];
    if (begin == end || !g.matches_some(g.symbol(in.frames[end - 1]), utf8_.lo, utf8_.hi)) continue;
    stacks_.frames.insert(stacks_.frames.end(), in.frames.begin() + static_cast<ptrdiff_t>(begin),
                          in.frames.begin() + static_cast<ptrdiff_t>(end));
    stacks_.ends.push_back(static_cast<uint32_t>(stacks_.frames.size()));
    stacks_.hashes.push_back(in.hashes[i]);
  }
  return valid();
}

bool GrammarState::advance_byte(uint8_t byte) {
  const GrammarState from(*this);
  return advance_from(from, byte);
}

bool GrammarState::advance(std::string_view bytes) {
  for (const char c : bytes) {
    if (!advance_byte(static_cast<uint8_t>(c))) return false;
  }
  return valid();
}

bool GrammarState::non_ascii_alike() const {
  if (!valid() || utf8_.left > 0) return false;
  const Grammar& g = *grammar_;
  for (size_t i = 0; i < stacks_.size(); ++i) {
    const size_t begin = stack_begin(stacks_, i), end = stacks_.ends[i];
    if (begin == end) continue;
    const Grammar::Symbol& top = g.symbol(stacks_.frames[end - 1]);
    if (g.matches_some(top, 0x80, kMaxCodePoint) && !g.matches_all(top, 0x80, kMaxCodePoint)) return false;
  }
  return true;
}

bool GrammarState::complete() const {
  if (!valid() || utf8_.left > 0) return false;
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (stacks_.ends[i] == stack_begin(stacks_, i)) return true;
  }
  return false;
}

}  // namespace tensorpc
