// Feeding tokens and sampling the next one (next_token.h).
#include "model/runtime/next_token.h"

namespace tensorpc {

StatusOr<int32_t> next_token(Generator& gen, Sampler& sampler, std::span<const int32_t> tokens) {
  const int64_t n_vocab = gen.model().hparams().n_vocab;
  const int64_t candidates = sampler.candidates_needed(n_vocab);
  StatusOr<int32_t> token = -1;
  // The device runs the chain alone: penalties and biases of OpenAI's kind are picked here.
  if (candidates > 0 && !sampler.options().adjusts_logits() && gen.can_sample_on_device()) {
    // The device picks the token with this sampler's settings, recent tokens
    // and next draw; the draw is used up only when it did.
    const SampleSettings settings = sampler.options().chain_settings();
    const DeviceSampling sampling{.settings = settings,
                                  .recent = sampler.recent(),
                                  .draw = settings.temperature > 0.0f ? sampler.peek_draw() : 0};
    TENSORPC_ASSIGN_OR_RETURN(token, gen.eval_sample(tokens, candidates, sampling));
    if (token.value() == kSampleUndecided) {
      TENSORPC_ASSIGN_OR_RETURN(const std::vector<float> logits, gen.read_logits());
      token = sampler.sample(logits);
    } else if (sampling.settings.temperature > 0.0f) {
      sampler.commit_draw();
    }
  } else if (candidates > 0 && gen.can_select_on_device()) {
    TENSORPC_ASSIGN_OR_RETURN(const std::vector<float> top, gen.eval_top(tokens, candidates));
    token = sampler.sample_candidates(top, n_vocab);
    if (token.ok() && token.value() == Sampler::kUndecided) {
      // Every candidate +inf: rare enough for one more read.
      TENSORPC_ASSIGN_OR_RETURN(const std::vector<float> logits, gen.read_logits());
      token = sampler.sample(logits);
    }
  } else {
    TENSORPC_ASSIGN_OR_RETURN(const std::vector<float> logits, gen.eval(tokens));
    token = sampler.sample(logits);
  }
  if (token.ok() && token.value() < 0) return internal_error("no token can be sampled: every logit is NaN or -inf");
  return token;
}

}  // namespace tensorpc
