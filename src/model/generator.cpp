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

Status Generator::rewind(int64_t position) {
  if (position < 0 || position > position_) {
    return invalid_argument("generator: cannot rewind to position " + std::to_string(position) + " from " +
                            std::to_string(position_));
  }
  position_ = position;
  return Status();
}

StatusOr<std::vector<float>> Generator::eval(std::span<const int32_t> tokens) { return run(tokens, 0); }

StatusOr<std::vector<float>> Generator::eval_all(std::span<const int32_t> tokens) {
  return run(tokens, 0, /*all_logits=*/true);
}

StatusOr<std::vector<float>> Generator::eval_top(std::span<const int32_t> tokens, int64_t k) {
  if (k < 1 || k > model_.hparams().n_vocab) {
    return invalid_argument("generator: " + std::to_string(k) + " candidates asked of a vocabulary of " +
                            std::to_string(model_.hparams().n_vocab));
  }
  return run(tokens, k);
}

bool Generator::can_select_on_device() const {
  if (!options_.select_on_device || placement_.layer_device().empty()) return false;
  Context probe;
  const Tensor* top = probe.top_k(probe.new_tensor(DType::f32, {2}), 1);
  return placement_.devices()[placement_.layer_device().back()]->supports(*top);
}

StatusOr<std::vector<float>> Generator::read_logits() const {
  if (!built_ || built_->top == nullptr)
    return invalid_argument("generator: no step of eval_top() to read the logits of");
  const Tensor& logits = *built_->step.logits;
  std::vector<float> out(static_cast<size_t>(logits.nelements()));
  TENSORPC_RETURN_IF_ERROR(logits.buffer->get(logits, out.data(), 0, logits.nbytes()));
  return out;
}

StatusOr<std::vector<float>> Generator::run(std::span<const int32_t> tokens, int64_t k, bool all_logits) {
  if (tokens.empty()) return invalid_argument("generator: no tokens to evaluate");
  const LlamaHparams& hp = model_.hparams();
  if (position_ + static_cast<int64_t>(tokens.size()) > placement_.n_ctx()) {
    return out_of_memory("generator: " + std::to_string(position_ + static_cast<int64_t>(tokens.size())) +
                         " tokens do not fit the context of " + std::to_string(placement_.n_ctx()));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp.n_vocab)
      return invalid_argument("generator: token " + std::to_string(t) + " is not in the vocabulary");
  }
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(std::max<int64_t>(1, options_.n_batch)));
    const int64_t n_kv = kv_window(position_ + static_cast<int64_t>(n), placement_.n_ctx(), options_.kv_granularity);

    const bool reuse = built_ && built_->step.n_tokens == static_cast<int64_t>(n) && built_->step.n_kv == n_kv &&
                       built_->k == k && built_->all_logits == all_logits;
    if (!reuse) {
      built_.reset();
      auto b = std::make_unique<BuiltStep>();
      b->step =
          build_llama_step(b->ctx, hp, model_.weights(), placement_.cache(), static_cast<int64_t>(n), n_kv, all_logits);
      b->all_logits = all_logits;
      if (k > 0) {
        // The logits stay an output: read_logits() can still read them.
        b->top = b->ctx.top_k(b->step.logits, static_cast<int>(k));
        b->k = k;
        b->graph = Graph::build({b->step.logits, b->top});
      } else {
        b->graph = Graph::build({b->step.logits});
      }
      built_ = std::move(b);
    }
    const LlamaStep& step = built_->step;
    Graph& g = built_->graph;
    TENSORPC_RETURN_IF_ERROR(reuse ? scheduler_.allocate_again(g) : scheduler_.allocate(g));

    std::vector<int32_t> positions(n);
    for (size_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(position_ + static_cast<int64_t>(i));
    TENSORPC_RETURN_IF_ERROR(step.tokens->buffer->set(*step.tokens, tokens.data() + begin, 0, 4 * n));
    TENSORPC_RETURN_IF_ERROR(step.positions->buffer->set(*step.positions, positions.data(), 0, 4 * n));
    if (step.mask != nullptr) {
      const std::vector<float> mask = causal_mask(positions, n_kv);
      TENSORPC_RETURN_IF_ERROR(step.mask->buffer->set(*step.mask, mask.data(), 0, 4 * mask.size()));
    }
    if (step.mask_swa != nullptr) {
      const std::vector<float> window = causal_mask(positions, n_kv, hp.n_swa);
      TENSORPC_RETURN_IF_ERROR(step.mask_swa->buffer->set(*step.mask_swa, window.data(), 0, 4 * window.size()));
    }
    const Tensor& result = built_->top ? *built_->top : *step.logits;
    const size_t offset = all_logits ? logits.size() : 0;  // all: this step's rows after the last step's
    logits.resize(offset + static_cast<size_t>(result.nelements()));
    TENSORPC_RETURN_IF_ERROR(scheduler_.compute_and_read(g, result, logits.data() + offset));
    position_ += static_cast<int64_t>(n);
    begin += n;
  }
  return logits;
}

}  // namespace tensorpc
