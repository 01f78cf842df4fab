// Drafter: where speculative decoding's drafts come from — prompt lookup
// (prompt_lookup.h) or a draft model (draft_model.h). speculative_step.h
// verifies what a drafter proposes; the drafter only guesses, so a bad guess
// costs a step's extra tokens, never the text.
//
// The draft's length adapts to how well drafts fare: it doubles after a
// draft accepted whole and falls back to one more than was accepted after a
// rejection, within [1, draft_max]. A long draft costs little over a network
// (one round trip either way) but computes tokens thrown away.
//
// Ownership: a drafter keeps its own copy of the text (prompt and tokens so
// far), fed by the caller.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc {

// What speculation did over one generation.
struct SpeculationCounts {
  int64_t steps = 0;     // verification steps (each one evaluation of a token and its draft)
  int64_t drafted = 0;   // draft tokens evaluated
  int64_t accepted = 0;  // of which the sampler picked the same token
};

class Drafter {
 public:
  explicit Drafter(int draft_max) : draft_max_(draft_max < 1 ? 1 : draft_max), length_(draft_max_) {}
  virtual ~Drafter() = default;

  // Appends tokens of the text (the prompt, then each token generated).
  virtual void push(std::span<const int32_t> tokens) = 0;
  void push(int32_t token) { push(std::span<const int32_t>(&token, 1)); }
  // Forgets the text (a new generation); the adapted length stays.
  virtual void clear() = 0;
  // A draft of the tokens after the text, at most min(limit, length())
  // of them; empty: none.
  virtual StatusOr<std::vector<int32_t>> draft(size_t limit) = 0;

  // Records how a draft of `drafted` tokens fared: `accepted` of them kept.
  void record(size_t drafted, size_t accepted) {
    ++counts_.steps;
    counts_.drafted += static_cast<int64_t>(drafted);
    counts_.accepted += static_cast<int64_t>(accepted);
    // A draft shorter than length_ (the drafter had no more) says nothing against length_.
    length_ = accepted == drafted ? std::min(draft_max_, std::max(length_, 2 * drafted)) : accepted + 1;
  }
  const SpeculationCounts& counts() const { return counts_; }
  size_t length() const { return length_; }

 private:
  size_t draft_max_;
  size_t length_;  // the next draft's length at most
  SpeculationCounts counts_;
};

}  // namespace tensorpc
