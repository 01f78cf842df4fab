// Sampler: the sampling chain described in sampler.h, around the shared
// chain of src/core/sample_chain.h.
#include "model/runtime/sampler.h"

#include <algorithm>
#include <limits>

namespace tensorpc {

Status SamplerOptions::validate() const {
  TENSORPC_RETURN_IF_ERROR(chain_settings().validate("sampler"));
  if (repeat_last_n < 0)
    return invalid_argument("sampler: repeat_last_n must be >= 0 (0 = off), not " + std::to_string(repeat_last_n));
  return Status();
}

StatusOr<Sampler> Sampler::create(const SamplerOptions& options) {
  TENSORPC_RETURN_IF_ERROR(options.validate());
  return Sampler(options);
}

void Sampler::accept(int32_t token) {
  if (token < 0 || options_.repeat_last_n == 0) return;
  history_.push_back(token);
  while (history_.size() > static_cast<size_t>(options_.repeat_last_n)) history_.pop_front();
}

uint64_t Sampler::peek_draw() {
  if (!pending_draw_) {
    draw_ = rng_() >> (64 - kDrawBits);  // the engine's top 53 bits
    pending_draw_ = true;
  }
  return draw_;
}

int64_t Sampler::recent_slots() const { return penalising() ? options_.repeat_last_n : 1; }

std::vector<int32_t> Sampler::recent() const {
  std::vector<int32_t> out(static_cast<size_t>(recent_slots()), -1);
  if (!penalising()) return out;
  std::copy(history_.begin(), history_.end(), out.begin());
  return out;
}

int64_t Sampler::candidates_needed(int64_t n_vocab) const {
  if (penalising() && options_.repeat_penalty < 1.0f) return 0;
  const int64_t penalised = penalising() ? options_.repeat_last_n : 0;
  int64_t kept = 1;  // greedy
  if (options_.temperature > 0.0f) {
    if (options_.top_k == 0) return 0;
    // One more than top-k can keep: if even that many are finite, so are
    // more than top_k of the whole vocabulary, and the chain sorts.
    kept = static_cast<int64_t>(options_.top_k) + 1;
  }
  return std::min(n_vocab, kept + penalised);
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (logits.empty() || logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) return -1;
  pool_.clear();
  for (size_t i = 0; i < logits.size(); ++i) pool_.push_back({logits[i], static_cast<int32_t>(i)});
  return choose();
}

StatusOr<int32_t> Sampler::sample_candidates(std::span<const float> top, int64_t n_vocab) {
  bool undecided = false;
  TENSORPC_RETURN_IF_ERROR(SampleChain::pool_from_candidates(top, n_vocab, pool_, undecided));
  if (undecided) return kUndecided;
  return choose();
}

int32_t Sampler::choose() {
  std::vector<int32_t> recent;
  if (options_.repeat_penalty != 1.0f) recent.assign(history_.begin(), history_.end());
  uint64_t draw = 0;
  if (options_.temperature > 0.0f) {
    draw = peek_draw();
    commit_draw();
  }
  return chain_.choose(pool_, options_, recent, draw);
}

}  // namespace tensorpc
