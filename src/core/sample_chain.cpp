// The sampling chain (sample_chain.h; its steps are described in src/model/runtime/sampler.h).
#include "core/sample_chain.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tensorpc {

Status SampleSettings::validate(const std::string& who) const {
  // Written as !(in range) so that NaN fails every check.
  if (!(std::isfinite(temperature) && temperature >= 0.0f))
    return invalid_argument(who + ": temperature must be finite and >= 0, not " + std::to_string(temperature));
  if (top_k < 0) return invalid_argument(who + ": top_k must be >= 0 (0 = off), not " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return invalid_argument(who + ": top_p must be in (0, 1], not " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return invalid_argument(who + ": min_p must be in [0, 1] (0 = off), not " + std::to_string(min_p));
  if (!(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f))
    return invalid_argument(who + ": repeat_penalty must be finite and > 0, not " + std::to_string(repeat_penalty));
  return Status();
}

SampleSettings sample_settings_of(const Tensor& node) {
  return SampleSettings{.temperature = node.param<float>(kSampleParamTemperature),
                        .top_k = node.param<int32_t>(kSampleParamTopK),
                        .top_p = node.param<float>(kSampleParamTopP),
                        .min_p = node.param<float>(kSampleParamMinP),
                        .repeat_penalty = node.param<float>(kSampleParamRepeatPenalty)};
}

Status SampleChain::pool_from_candidates(std::span<const float> top, int64_t n_vocab, std::vector<SampleToken>& pool,
                                         bool& undecided) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const size_t k = top.size() / 2;
  if (k == 0 || top.size() % 2 != 0) {
    return invalid_argument("sampler: " + std::to_string(top.size()) + " values are not k candidates and their ids");
  }
  pool.clear();
  bool all_positive_inf = true;
  for (size_t j = 0; j < k; ++j) {
    const float id = top[k + j];
    if (!(id >= 0.0f && id < static_cast<float>(n_vocab) && id == std::floor(id))) {
      return invalid_argument("sampler: candidate " + std::to_string(j) + " names token " + std::to_string(id) +
                              ", not one of the " + std::to_string(n_vocab) + " in the vocabulary");
    }
    pool.push_back({top[j], static_cast<int32_t>(id)});
    all_positive_inf = all_positive_inf && top[j] == kInf;
  }
  std::sort(pool.begin(), pool.end(), [](const SampleToken& a, const SampleToken& b) { return a.id < b.id; });
  for (size_t j = 1; j < pool.size(); ++j) {
    if (pool[j].id == pool[j - 1].id) {
      return invalid_argument("sampler: token " + std::to_string(pool[j].id) + " is a candidate twice");
    }
  }
  undecided = all_positive_inf && static_cast<int64_t>(k) < n_vocab;
  return Status();
}

int32_t SampleChain::choose(std::vector<SampleToken>& pool, const SampleSettings& s, std::span<const int32_t> recent,
                            uint64_t draw) {
  constexpr float kInf = std::numeric_limits<float>::infinity();

  // 1. Non-finite logits. +inf tokens would make the softmax NaN; they win,
  // equally, over every finite one.
  bool any_positive_inf = false;
  for (SampleToken& t : pool) {
    if (std::isnan(t.logit)) t.logit = -kInf;
    if (t.logit == kInf) any_positive_inf = true;
  }
  if (any_positive_inf) {
    for (SampleToken& t : pool) t.logit = t.logit == kInf ? 0.0f : -kInf;
  }

  // 2. Repetition penalty, once per distinct recent token (pool is in id
  // order, so a binary search finds each).
  if (s.repeat_penalty != 1.0f && !recent.empty()) {
    recent_.assign(recent.begin(), recent.end());
    std::sort(recent_.begin(), recent_.end());
    recent_.erase(std::unique(recent_.begin(), recent_.end()), recent_.end());
    for (int32_t id : recent_) {
      if (id < 0) continue;
      auto it = std::lower_bound(pool.begin(), pool.end(), id, [](const SampleToken& t, int32_t v) { return t.id < v; });
      if (it == pool.end() || it->id != id) continue;  // not a candidate, or from another vocabulary
      float& l = it->logit;
      l = l > 0.0f ? l / s.repeat_penalty : l * s.repeat_penalty;
    }
  }

  // 3. Greedy: strict > keeps the lowest id among equals; all -inf gives -1.
  if (s.temperature <= 0.0f) {
    int32_t best = kSampleNoToken;
    float best_logit = -kInf;
    for (const SampleToken& t : pool) {
      if (t.logit > best_logit) {
        best = t.id;
        best_logit = t.logit;
      }
    }
    return best;
  }

  candidates_.clear();
  for (const SampleToken& t : pool) {
    if (t.logit > -kInf) candidates_.push_back({t.logit, t.id, 0.0});
  }
  if (candidates_.empty()) return kSampleNoToken;

  // 4. Top-k. A total order (logit, then id) makes the kept set and its order
  // the same on every standard library. Top-p needs them sorted; without
  // either, id order is as good as any.
  const auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  };
  if (s.top_k > 0 && static_cast<size_t>(s.top_k) < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + s.top_k, candidates_.end(), better);
    candidates_.resize(static_cast<size_t>(s.top_k));
  } else if (s.top_p < 1.0f) {
    std::sort(candidates_.begin(), candidates_.end(), better);
  }

  // Softmax with temperature. Dividing in double keeps the top token's
  // 0 / temperature at 0 even for a subnormal temperature.
  float max_logit = -kInf;
  for (const Candidate& c : candidates_) max_logit = std::max(max_logit, c.logit);
  double total = 0.0;
  for (Candidate& c : candidates_) {
    c.weight = std::exp((static_cast<double>(c.logit) - max_logit) / s.temperature);
    total += c.weight;
  }

  // Top-p: the smallest prefix (most likely first) that reaches top_p.
  if (s.top_p < 1.0f) {
    const double target = s.top_p * total;
    double cumulative = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += candidates_[i].weight;
      if (cumulative >= target) {
        candidates_.resize(i + 1);
        break;
      }
    }
    total = 0.0;
    for (const Candidate& c : candidates_) total += c.weight;
  }

  // Min-p, on the logits themselves (probability at temperature 1): keep
  // logit ≥ max + ln(min_p). The most likely token always stays.
  if (s.min_p > 0.0f) {
    const double cutoff = static_cast<double>(max_logit) + std::log(static_cast<double>(s.min_p));
    total = 0.0;
    for (Candidate& c : candidates_) {
      if (static_cast<double>(c.logit) < cutoff) c.weight = 0.0;
      total += c.weight;
    }
  }

  // Draw: 53 bits fill a double's mantissa exactly. The fallback (rounding
  // at the very end) is the last token that could have been drawn, never one
  // of weight 0.
  const double uniform = static_cast<double>(draw & ((uint64_t{1} << kDrawBits) - 1)) * 0x1.0p-53;
  const double r = uniform * total;
  double cumulative = 0.0;
  int32_t last_possible = candidates_.front().id;
  for (const Candidate& c : candidates_) {
    if (c.weight <= 0.0) continue;
    cumulative += c.weight;
    last_possible = c.id;
    if (r < cumulative) return c.id;
  }
  return last_possible;
}

}  // namespace tensorpc
