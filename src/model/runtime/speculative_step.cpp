// Verifying a draft in one step (speculative_step.h).
#include "model/runtime/speculative_step.h"

#include <algorithm>

#include "model/runtime/next_token.h"

namespace tensorpc {

int64_t draft_candidates(const Sampler& sampler, int64_t n_vocab, size_t draft_size) {
  const int64_t k = sampler.candidates_needed(n_vocab);
  return k > 0 ? std::min(n_vocab, k + static_cast<int64_t>(draft_size)) : 0;
}

StatusOr<DraftWalk> walk_draft(Sampler& sampler, int64_t n_vocab, const DraftRows& rows, std::span<const int32_t> draft,
                               const TakeToken& take) {
  const size_t width = static_cast<size_t>(rows.k > 0 ? 2 * rows.k : n_vocab);  // of one position's row
  DraftWalk walk;
  for (;; ++walk.fed) {
    const std::span<const float> r = rows.rows.subspan(walk.fed * width, width);
    int32_t token = -1;
    if (rows.k > 0) {
      TENSORPC_ASSIGN_OR_RETURN(token, sampler.sample_candidates(r, n_vocab));
      if (token == Sampler::kUndecided) {
        TENSORPC_ASSIGN_OR_RETURN(const std::span<const float> logits, rows.logits(walk.fed));
        token = sampler.sample(logits);
      }
    } else {
      token = sampler.sample(r);
    }
    if (token < 0) return internal_error("no token can be sampled: every logit is NaN or -inf");
    const bool confirmed = walk.fed < draft.size() && token == draft[walk.fed];
    if (confirmed) ++walk.picked;
    if (!take(token) || !confirmed) return walk;
  }
}

StatusOr<size_t> verify_draft(Generator& gen, Sampler& sampler, int32_t last, std::span<const int32_t> draft,
                              const TakeToken& take) {
  const int64_t start = gen.position();
  const int64_t n_vocab = gen.model().hparams().n_vocab;
  std::vector<int32_t> tokens{last};
  tokens.insert(tokens.end(), draft.begin(), draft.end());
  const int64_t k = draft_candidates(sampler, n_vocab, draft.size());
  const bool top = k > 0 && gen.can_select_on_device();
  TENSORPC_ASSIGN_OR_RETURN(const std::vector<float> rows, top ? gen.eval_top_all(tokens, k) : gen.eval_all(tokens));
  std::vector<float> logits;  // every logit of the step, read only when candidates cannot decide
  const auto read = [&](size_t position) -> StatusOr<std::span<const float>> {
    if (logits.empty()) {
      TENSORPC_ASSIGN_OR_RETURN(logits, gen.read_logits());
    }
    return std::span<const float>(logits).subspan(position * static_cast<size_t>(n_vocab),
                                                  static_cast<size_t>(n_vocab));
  };
  TENSORPC_ASSIGN_OR_RETURN(
      const DraftWalk walk,
      walk_draft(sampler, n_vocab, {.rows = rows, .k = top ? k : 0, .logits = read}, draft, take));
  // Plain decoding would have fed `last` and the draft tokens before the last one taken.
  TENSORPC_RETURN_IF_ERROR(gen.rewind(start + 1 + static_cast<int64_t>(walk.fed)));
  return walk.picked;
}

Status decode_after(Generator& gen, Sampler& sampler, Drafter* drafter, int32_t last, size_t room,
                    const TakeToken& take) {
  std::vector<int32_t> draft;
  if (drafter != nullptr) {
    // The step feeds 1 + draft tokens: within the context and one prompt batch; a draft yields one token more.
    const int64_t fits = std::min(gen.seq_ctx() - gen.position(), gen.options().n_batch) - 1;
    const size_t limit = std::min(room > 0 ? room - 1 : 0, static_cast<size_t>(std::max<int64_t>(0, fits)));
    if (limit > 0) {
      auto drafted = drafter->draft(limit);
      if (!drafted.ok()) return drafted.status().with_context("draft");
      draft = std::move(drafted).value();
    }
  }
  const auto keep = [&](int32_t token) {
    if (drafter != nullptr) drafter->push(token);
    return take(token);
  };
  if (draft.empty()) {
    TENSORPC_ASSIGN_OR_RETURN(const int32_t token, next_token(gen, sampler, std::span<const int32_t>(&last, 1)));
    keep(token);
    return Status();
  }
  TENSORPC_ASSIGN_OR_RETURN(const size_t picked, verify_draft(gen, sampler, last, draft, keep));
  drafter->record(draft.size(), picked);
  return Status();
}

}  // namespace tensorpc
