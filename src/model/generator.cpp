// Running a placed llama model (see generator.h).
#include "model/generator.h"

#include <algorithm>

namespace tensorpc {

Generator::Generator(const LlamaModel& model, ModelPlacement& placement, GeneratorOptions options)
    : model_(model), placement_(placement), options_(options), scheduler_(placement.devices()) {}

Status Generator::reset() {
  position_ = 0;
  return placement_.clear_cache();
}

StatusOr<std::vector<float>> Generator::eval(std::span<const int32_t> tokens) {
  if (tokens.empty()) return invalid_argument("generator: no tokens to evaluate");
  const LlamaHparams& hp = model_.hparams();
  if (position_ + static_cast<int64_t>(tokens.size()) > placement_.n_ctx()) {
    return out_of_memory("generator: " + std::to_string(position_ + static_cast<int64_t>(tokens.size())) +
                         " tokens do not fit the context of " + std::to_string(placement_.n_ctx()));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp.n_vocab) return invalid_argument("generator: token " + std::to_string(t) + " is not in the vocabulary");
  }
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(std::max<int64_t>(1, options_.n_batch)));
    const int64_t n_kv = kv_window(position_ + static_cast<int64_t>(n), placement_.n_ctx(), options_.kv_granularity);

    const bool reuse = built_ && built_->step.n_tokens == static_cast<int64_t>(n) && built_->step.n_kv == n_kv;
    if (!reuse) {
      built_.reset();
      auto b = std::make_unique<BuiltStep>();
      b->step = build_llama_step(b->ctx, hp, model_.weights(), placement_.cache(), static_cast<int64_t>(n), n_kv,
                                 /*all_logits=*/false);
      b->graph = Graph::build({b->step.logits});
      built_ = std::move(b);
    }
    const LlamaStep& step = built_->step;
    Graph& g = built_->graph;
    TENSORPC_RETURN_IF_ERROR(reuse ? scheduler_.allocate_again(g) : scheduler_.allocate(g));

    std::vector<int32_t> positions(n);
    for (size_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(position_ + static_cast<int64_t>(i));
    TENSORPC_RETURN_IF_ERROR(step.tokens->buffer->set(*step.tokens, tokens.data() + begin, 0, 4 * n));
    TENSORPC_RETURN_IF_ERROR(step.positions->buffer->set(*step.positions, positions.data(), 0, 4 * n));
    const std::vector<float> mask = causal_mask(positions, n_kv);
    TENSORPC_RETURN_IF_ERROR(step.mask->buffer->set(*step.mask, mask.data(), 0, 4 * mask.size()));
    logits.resize(static_cast<size_t>(hp.n_vocab));
    TENSORPC_RETURN_IF_ERROR(scheduler_.compute_and_read(g, *step.logits, logits.data()));
    position_ += static_cast<int64_t>(n);
    begin += n;
  }
  return logits;
}

}  // namespace tensorpc
