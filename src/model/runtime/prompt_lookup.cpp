// Drafting by prompt lookup (prompt_lookup.h).
#include "model/runtime/prompt_lookup.h"

#include <algorithm>

namespace tensorpc {

std::vector<int32_t> lookup_draft(std::span<const int32_t> text, size_t max_tokens, size_t max_ngram,
                                  size_t min_ngram) {
  if (max_tokens == 0) return {};
  for (size_t n = max_ngram; n >= std::max<size_t>(min_ngram, 1); --n) {
    if (text.size() <= n) continue;  // a match needs a token after it, before the suffix itself
    const std::span<const int32_t> suffix = text.last(n);
    // Latest first: start positions from the one just before the suffix's own back to 0.
    for (size_t start = text.size() - n; start-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), text.begin() + static_cast<std::ptrdiff_t>(start))) continue;
      const size_t from = start + n;
      const size_t to = std::min(text.size(), from + max_tokens);
      return std::vector<int32_t>(text.begin() + static_cast<std::ptrdiff_t>(from),
                                  text.begin() + static_cast<std::ptrdiff_t>(to));
    }
  }
  return {};
}

}  // namespace tensorpc
