// Prompt lookup: drafts of the tokens that come next, for speculative
// decoding without a draft model (speculative_step.h verifies them).
//
// A text that quotes itself — code edited, a passage summarised, a list
// continued — often goes on as it went on before. The drafter finds the most
// recent earlier place where the text's last n tokens occurred (n from
// max_ngram down to min_ngram: the longest match first) and proposes the
// tokens that followed there.
//
// The draft's length adapts to how well drafts fare: it doubles after a
// draft accepted whole and falls back to one more than was accepted after a
// rejection, within [1, draft_max]. A long draft costs little over a network
// (one round trip either way) but computes tokens thrown away.
//
// Ownership: the drafter keeps its own copy of the text (prompt and tokens
// so far), fed by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tensorpc {

// The tokens that followed the latest earlier occurrence of `text`'s last n
// tokens, for the largest n in [min_ngram, max_ngram] that has one; at most
// max_tokens of them. Empty when no suffix of those lengths occurred before.
std::vector<int32_t> lookup_draft(std::span<const int32_t> text, size_t max_tokens, size_t max_ngram = 3,
                                  size_t min_ngram = 1);

// What speculation did over one generation.
struct SpeculationCounts {
  int64_t steps = 0;     // verification steps (each one evaluation of a token and its draft)
  int64_t drafted = 0;   // draft tokens evaluated
  int64_t accepted = 0;  // of which the sampler picked the same token
};

class PromptLookup {
 public:
  explicit PromptLookup(int draft_max) : draft_max_(draft_max < 1 ? 1 : draft_max), length_(draft_max_) {}

  // Appends tokens of the text (the prompt, then each token generated).
  void push(std::span<const int32_t> tokens) { text_.insert(text_.end(), tokens.begin(), tokens.end()); }
  void push(int32_t token) { text_.push_back(token); }
  // Forgets the text (a new generation); the adapted length stays.
  void clear() { text_.clear(); }

  // A draft of at most min(limit, the current length) tokens; empty: none found.
  std::vector<int32_t> draft(size_t limit) const;
  // Records how a draft of `drafted` tokens fared: `accepted` of them kept.
  void record(size_t drafted, size_t accepted);

  const SpeculationCounts& counts() const { return counts_; }
  size_t length() const { return length_; }

 private:
  size_t draft_max_;
  size_t length_;  // the next draft's length at most
  std::vector<int32_t> text_;
  SpeculationCounts counts_;
};

}  // namespace tensorpc
