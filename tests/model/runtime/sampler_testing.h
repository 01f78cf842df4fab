// Logits and sampling chains for the tests that compare a sampler fed the
// largest logits (top_k's candidates, on the client or in the sample op) with
// one fed every logit.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "model/runtime/sampler.h"

namespace tensorpc::test {

// The k largest of `logits` as top_k lays them out: values (largest first,
// NaN last, ties by the lower id), then ids as floats.
inline std::vector<float> top_of(const std::vector<float>& logits, int64_t k) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (std::isnan(logits[a]) != std::isnan(logits[b])) return std::isnan(logits[b]);
    return !std::isnan(logits[a]) && logits[a] > logits[b];
  });
  std::vector<float> top(2 * k);
  for (int64_t j = 0; j < k; ++j) {
    top[j] = logits[order[j]];
    top[k + j] = static_cast<float>(order[j]);
  }
  return top;
}

// Logits with many ties and a few non-finite values: the cases where the
// orders of the two paths could part.
inline std::vector<float> rough_logits(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int> level(-40, 40);
  std::uniform_int_distribution<int> odd(0, 99);
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(n);
  for (float& l : logits) {
    const int o = odd(rng);
    l = o == 0 ? kNaN : o == 1 ? -kInf : static_cast<float>(level(rng)) / 8.0f;
  }
  return logits;
}

struct Chain {
  const char* name;
  SamplerOptions options;
};

inline std::vector<Chain> chains() {
  std::vector<Chain> c;
  SamplerOptions greedy;
  greedy.temperature = 0;
  c.push_back({"greedy with the default penalty", greedy});
  greedy.repeat_penalty = 1.0f;
  c.push_back({"greedy without a penalty", greedy});
  SamplerOptions dflt;  // temperature 0.8, top-k 40, top-p 0.95, penalty 1.1 over 64
  c.push_back({"the default chain", dflt});
  SamplerOptions hot = dflt;
  hot.temperature = 1.7f;
  hot.top_k = 5;
  hot.top_p = 1.0f;
  hot.repeat_penalty = 1.5f;
  hot.repeat_last_n = 8;
  c.push_back({"top-k 5, no top-p, a strong penalty over 8", hot});
  SamplerOptions unpenalised = hot;
  unpenalised.repeat_penalty = 1.0f;
  c.push_back({"top-k 5, no top-p, no penalty", unpenalised});
  SamplerOptions wide = dflt;
  wide.top_k = 300;  // more than the finite logits of a small vocabulary
  wide.top_p = 0.5f;
  c.push_back({"top-k above the finite count", wide});
  SamplerOptions openai = hot;
  openai.presence_penalty = 0.7f;
  openai.frequency_penalty = 0.3f;
  openai.logit_bias = {{0, -100.0f}, {2, -1.5f}};  // lowered only: a few candidates still decide
  c.push_back({"top-k 5 with presence and frequency penalties and negative biases", openai});
  return c;
}

}  // namespace tensorpc::test
