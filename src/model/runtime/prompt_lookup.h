// Prompt lookup: drafts of the tokens that come next, for speculative
// decoding without a draft model (speculative_step.h verifies them).
//
// A text that quotes itself — code edited, a passage summarised, a list
// continued — often goes on as it went on before. The drafter finds the most
// recent earlier place where the text's last n tokens occurred (n from
// max_ngram down to min_ngram: the longest match first) and proposes the
// tokens that followed there.
//
// The draft's length adapts to how well drafts fare (Drafter::record).
//
// Ownership: the drafter keeps its own copy of the text (prompt and tokens
// so far), fed by the caller.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/runtime/drafter.h"

namespace tensorpc {

// The tokens that followed the latest earlier occurrence of `text`'s last n
// tokens, for the largest n in [min_ngram, max_ngram] that has one; at most
// max_tokens of them. Empty when no suffix of those lengths occurred before.
std::vector<int32_t> lookup_draft(std::span<const int32_t> text, size_t max_tokens, size_t max_ngram = 3,
                                  size_t min_ngram = 1);

class PromptLookup : public Drafter {
 public:
  explicit PromptLookup(int draft_max) : Drafter(draft_max) {}

  void push(std::span<const int32_t> tokens) override { text_.insert(text_.end(), tokens.begin(), tokens.end()); }
  using Drafter::push;
  void clear() override { text_.clear(); }
  // Empty when no suffix of the text occurred before; never an error.
  StatusOr<std::vector<int32_t>> draft(size_t limit) override { return lookup_draft(text_, std::min(limit, length())); }

 private:
  std::vector<int32_t> text_;
};

}  // namespace tensorpc
