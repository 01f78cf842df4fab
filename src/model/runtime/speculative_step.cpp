// Verifying a draft in one step (speculative_step.h).
#include "model/runtime/speculative_step.h"

#include <algorithm>

#include "model/runtime/next_token.h"

namespace tensorpc {

StatusOr<size_t> verify_draft(Generator& gen, Sampler& sampler, int32_t last, std::span<const int32_t> draft,
                              const TakeToken& take) {
  const int64_t start = gen.position();
  const int64_t n_vocab = gen.model().hparams().n_vocab;
  std::vector<int32_t> tokens{last};
  tokens.insert(tokens.end(), draft.begin(), draft.end());
  // Each accepted token may add one to the candidates the sampler needs (a
  // token generated once more): enough for the last position is enough for all.
  int64_t k = sampler.candidates_needed(n_vocab);
  if (k > 0) k = std::min(n_vocab, k + static_cast<int64_t>(draft.size()));
  const bool top = k > 0 && gen.can_select_on_device();
  const int64_t width = top ? 2 * k : n_vocab;  // of one position's row
  TENSORPC_ASSIGN_OR_RETURN(const std::vector<float> rows, top ? gen.eval_top_all(tokens, k) : gen.eval_all(tokens));
  std::vector<float> logits;  // every logit of the step, read only when candidates cannot decide

  size_t picked = 0;  // draft tokens the sampler picked
  size_t row = 0;
  for (;; ++row) {
    const std::span<const float> r(rows.data() + row * static_cast<size_t>(width), static_cast<size_t>(width));
    int32_t token = -1;
    if (top) {
      TENSORPC_ASSIGN_OR_RETURN(token, sampler.sample_candidates(r, n_vocab));
      if (token == Sampler::kUndecided) {
        if (logits.empty()) {
          TENSORPC_ASSIGN_OR_RETURN(logits, gen.read_logits());
        }
        token = sampler.sample(
            std::span<const float>(logits).subspan(row * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab)));
      }
    } else {
      token = sampler.sample(r);
    }
    if (token < 0) return internal_error("no token can be sampled: every logit is NaN or -inf");
    const bool confirmed = row < draft.size() && token == draft[row];
    if (confirmed) ++picked;
    if (!take(token) || !confirmed) break;
  }
  // Plain decoding would have fed `last` and the draft tokens before the last one taken.
  TENSORPC_RETURN_IF_ERROR(gen.rewind(start + 1 + static_cast<int64_t>(row)));
  return picked;
}

Status decode_after(Generator& gen, Sampler& sampler, PromptLookup* lookup, int32_t last, size_t room,
                    const TakeToken& take) {
  std::vector<int32_t> draft;
  if (lookup != nullptr) {
    // The step feeds 1 + draft tokens: within the context and one prompt batch; a draft yields one token more.
    const int64_t fits = std::min(gen.seq_ctx() - gen.position(), gen.options().n_batch) - 1;
    const size_t limit = std::min(room > 0 ? room - 1 : 0, static_cast<size_t>(std::max<int64_t>(0, fits)));
    if (limit > 0) draft = lookup->draft(limit);
  }
  const auto keep = [&](int32_t token) {
    if (lookup != nullptr) lookup->push(token);
    return take(token);
  };
  if (draft.empty()) {
    TENSORPC_ASSIGN_OR_RETURN(const int32_t token, next_token(gen, sampler, std::span<const int32_t>(&last, 1)));
    keep(token);
    return Status();
  }
  TENSORPC_ASSIGN_OR_RETURN(const size_t picked, verify_draft(gen, sampler, last, draft, keep));
  lookup->record(draft.size(), picked);
  return Status();
}

}  // namespace tensorpc
