// Sampler: the sampling chain described in sampler.h.
#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tensorpc {

Status SamplerOptions::validate() const {
  // Written as !(in range) so that NaN fails every check.
  if (!(std::isfinite(temperature) && temperature >= 0.0f))
    return invalid_argument("sampler: temperature must be finite and >= 0, not " + std::to_string(temperature));
  if (top_k < 0) return invalid_argument("sampler: top_k must be >= 0 (0 = off), not " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return invalid_argument("sampler: top_p must be in (0, 1], not " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return invalid_argument("sampler: min_p must be in [0, 1] (0 = off), not " + std::to_string(min_p));
  if (!(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f))
    return invalid_argument("sampler: repeat_penalty must be finite and > 0, not " + std::to_string(repeat_penalty));
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

double Sampler::uniform() {
  // 53 random bits fill a double's mantissa exactly: k / 2^53 for k in [0, 2^53).
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int64_t Sampler::candidates_needed(int64_t n_vocab) const {
  const bool penalising = options_.repeat_penalty != 1.0f && options_.repeat_last_n > 0;
  if (penalising && options_.repeat_penalty < 1.0f) return 0;
  const int64_t penalised = penalising ? options_.repeat_last_n : 0;
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
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const size_t k = top.size() / 2;
  if (k == 0 || top.size() % 2 != 0) {
    return invalid_argument("sampler: " + std::to_string(top.size()) + " values are not k candidates and their ids");
  }
  pool_.clear();
  bool all_positive_inf = true;
  for (size_t j = 0; j < k; ++j) {
    const float id = top[k + j];
    if (!(id >= 0.0f && id < static_cast<float>(n_vocab) && id == std::floor(id))) {
      return invalid_argument("sampler: candidate " + std::to_string(j) + " names token " + std::to_string(id) +
                              ", not one of the " + std::to_string(n_vocab) + " in the vocabulary");
    }
    pool_.push_back({top[j], static_cast<int32_t>(id)});
    all_positive_inf = all_positive_inf && top[j] == kInf;
  }
  std::sort(pool_.begin(), pool_.end(), [](const Token& a, const Token& b) { return a.id < b.id; });
  for (size_t j = 1; j < pool_.size(); ++j) {
    if (pool_[j].id == pool_[j - 1].id) {
      return invalid_argument("sampler: token " + std::to_string(pool_[j].id) + " is a candidate twice");
    }
  }
  if (all_positive_inf && static_cast<int64_t>(k) < n_vocab) return kUndecided;
  return choose();
}

int32_t Sampler::choose() {
  constexpr float kInf = std::numeric_limits<float>::infinity();

  // 1. Non-finite logits. +inf tokens would make the softmax NaN; they win,
  // equally, over every finite one.
  bool any_positive_inf = false;
  for (Token& t : pool_) {
    if (std::isnan(t.logit)) t.logit = -kInf;
    if (t.logit == kInf) any_positive_inf = true;
  }
  if (any_positive_inf) {
    for (Token& t : pool_) t.logit = t.logit == kInf ? 0.0f : -kInf;
  }

  // 2. Repetition penalty, once per distinct recent token (pool_ is in id
  // order, so a binary search finds each).
  if (options_.repeat_penalty != 1.0f && !history_.empty()) {
    std::vector<int32_t> recent(history_.begin(), history_.end());
    std::sort(recent.begin(), recent.end());
    recent.erase(std::unique(recent.begin(), recent.end()), recent.end());
    for (int32_t id : recent) {
      auto it = std::lower_bound(pool_.begin(), pool_.end(), id, [](const Token& t, int32_t v) { return t.id < v; });
      if (it == pool_.end() || it->id != id) continue;  // not a candidate, or from another vocabulary
      float& l = it->logit;
      l = l > 0.0f ? l / options_.repeat_penalty : l * options_.repeat_penalty;
    }
  }

  // 3. Greedy: strict > keeps the lowest id among equals; all -inf gives -1.
  if (options_.temperature <= 0.0f) {
    int32_t best = -1;
    float best_logit = -kInf;
    for (const Token& t : pool_) {
      if (t.logit > best_logit) {
        best = t.id;
        best_logit = t.logit;
      }
    }
    return best;
  }

  candidates_.clear();
  for (const Token& t : pool_) {
    if (t.logit > -kInf) candidates_.push_back({t.logit, t.id, 0.0});
  }
  if (candidates_.empty()) return -1;

  // 4. Top-k. A total order (logit, then id) makes the kept set and its order
  // the same on every standard library. Top-p needs them sorted; without
  // either, id order is as good as any.
  const auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  };
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + options_.top_k, candidates_.end(), better);
    candidates_.resize(options_.top_k);
  } else if (options_.top_p < 1.0f) {
    std::sort(candidates_.begin(), candidates_.end(), better);
  }

  // Softmax with temperature. Dividing in double keeps the top token's
  // 0 / temperature at 0 even for a subnormal temperature.
  float max_logit = -kInf;
  for (const Candidate& c : candidates_) max_logit = std::max(max_logit, c.logit);
  double total = 0.0;
  for (Candidate& c : candidates_) {
    c.weight = std::exp((static_cast<double>(c.logit) - max_logit) / options_.temperature);
    total += c.weight;
  }

  // Top-p: the smallest prefix (most likely first) that reaches top_p.
  if (options_.top_p < 1.0f) {
    const double target = options_.top_p * total;
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
  if (options_.min_p > 0.0f) {
    const double cutoff = static_cast<double>(max_logit) + std::log(static_cast<double>(options_.min_p));
    total = 0.0;
    for (Candidate& c : candidates_) {
      if (static_cast<double>(c.logit) < cutoff) c.weight = 0.0;
      total += c.weight;
    }
  }

  // Draw. The fallback (rounding at the very end) is the last token that
  // could have been drawn, never one of weight 0.
  const double r = uniform() * total;
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
