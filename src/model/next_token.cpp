// Feeding tokens and sampling the next one (next_token.h).
#include "model/next_token.h"

namespace tensorpc {

StatusOr<int32_t> next_token(Generator& gen, Sampler& sampler, std::span<const int32_t> tokens) {
  const int64_t n_vocab = gen.model().hparams().n_vocab;
  const int64_t candidates = sampler.candidates_needed(n_vocab);
  StatusOr<int32_t> token = -1;
  if (candidates > 0 && gen.can_select_on_device()) {
    auto top = gen.eval_top(tokens, candidates);
    if (!top.ok()) return top.status();
    token = sampler.sample_candidates(top.value(), n_vocab);
    if (token.ok() && token.value() == Sampler::kUndecided) {
      auto logits = gen.read_logits();  // every candidate +inf: rare enough for one more read
      if (!logits.ok()) return logits.status();
      token = sampler.sample(logits.value());
    }
  } else {
    auto logits = gen.eval(tokens);
    if (!logits.ok()) return logits.status();
    token = sampler.sample(logits.value());
  }
  if (token.ok() && token.value() < 0) return internal_error("no token can be sampled: every logit is NaN or -inf");
  return token;
}

}  // namespace tensorpc
