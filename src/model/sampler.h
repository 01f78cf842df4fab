// Sampler: picks the next token from a model's logits.
//
// The chain, in order:
//   1. non-finite logits: NaN counts as -inf; if any logit is +inf, only the
//      +inf tokens remain, equally likely;
//   2. repetition penalty over the last repeat_last_n accepted tokens (each
//      distinct token once): a positive logit is divided by the penalty, a
//      negative one multiplied, so the token always becomes less likely;
//   3. temperature <= 0: greedy, the argmax (ties: the lowest id); else
//   4. top-k (0 = off), softmax of logit / temperature, top-p (the smallest
//      set of most likely tokens whose probability reaches top_p, at least
//      one token), and a draw from what remains.
// The penalty applies to greedy decoding too: that is where repetition loops
// are most common.
//
// Draws come from std::mt19937_64 seeded with `seed`, turned into a uniform
// number by our own code (the standard distributions are not portable), and
// candidates are ordered by a total order (logit, then id); so one seed gives
// the same tokens on every platform whose exp() agrees.
//
// A Sampler is not thread-safe: it holds the random engine and the history.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc {

struct SamplerOptions {
  float temperature = 0.8f;     // >= 0; 0 = greedy
  int top_k = 40;               // >= 0; 0 = off
  float top_p = 0.95f;          // in (0, 1]; 1 = off
  float repeat_penalty = 1.1f;  // > 0; 1 = off
  int repeat_last_n = 64;       // >= 0; 0 = off
  uint64_t seed = 0;            // used as is: the same seed gives the same tokens

  // invalid_argument naming the first option out of range (NaN included).
  Status validate() const;
};

class Sampler {
 public:
  static StatusOr<Sampler> create(const SamplerOptions& options);

  // The next token, in [0, logits.size()); -1 when `logits` is empty or no
  // token is possible (every logit NaN or -inf). Does not add it to the
  // history: call accept() with the token actually used.
  int32_t sample(std::span<const float> logits);

  // Records `token` (a prompt or generated token) for the repetition penalty.
  // Negative ids are ignored.
  void accept(int32_t token);

  // Forgets the history (a new conversation); the random engine continues.
  void reset_history() { history_.clear(); }

  const SamplerOptions& options() const { return options_; }

 private:
  explicit Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {}

  // A uniform double in [0, 1) from the engine's top 53 bits.
  double uniform();

  struct Candidate {
    float logit;
    int32_t id;
    double weight;  // unnormalised probability, exp((logit - max) / temperature)
  };

  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::deque<int32_t> history_;        // the last repeat_last_n accepted tokens, oldest first
  std::vector<Candidate> candidates_;  // scratch, kept to avoid an allocation per token
  std::vector<float> logits_;          // scratch: the penalised logits
};

}  // namespace tensorpc
