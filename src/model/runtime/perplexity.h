// Perplexity of a model on a text, measured the way llama.cpp's
// llama-perplexity measures it, so that figures compare with its figures:
//
//   - the whole text is tokenized as a prompt is (BOS first when the
//     tokenizer adds one) and cut into chunks of n_ctx tokens; a tail shorter
//     than a chunk is dropped;
//   - each chunk is evaluated on its own, from an empty KV cache, with its
//     first token replaced by BOS when the tokenizer adds one;
//   - in each chunk, token j+1 is scored from the logits after token j for
//     j = n_ctx/2 … n_ctx-2 (the second half, where every token has at least
//     n_ctx/2 tokens of context): its negative log-likelihood
//     -log softmax(logits)[token];
//   - perplexity = exp(mean NLL over every scored token of every chunk), and
//     its standard error ppl · sqrt(var(NLL) / (N - 1)), the error of the
//     mean carried through exp.
//
// Given a base model too (e.g. the f32 model a quantized one was made from),
// it also measures, on the same scored tokens, the KL divergence of the
// model's next-token distribution from the base's, sum p_base log(p_base /
// p_model), its mean and that mean's standard error, and how often both
// rank the same token first.
//
// Quiet: progress goes to the caller's callback.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/runtime/generator.h"
#include "tensorpc/status.h"

namespace tensorpc {

// The running mean and variance of per-token NLLs (or KL divergences):
// Welford's update, so millions of tokens lose no precision.
class NllStats {
 public:
  void add(double nll);
  int64_t count() const { return n_; }
  double mean() const { return mean_; }
  // The standard error of the mean, sqrt(var / (N - 1)); 0 with fewer than two.
  double mean_error() const;
  double perplexity() const;
  // ppl · the standard error of the mean NLL; 0 with fewer than two tokens.
  double perplexity_error() const;

 private:
  int64_t n_ = 0;
  double mean_ = 0;
  double m2_ = 0;  // sum of squared differences from the mean
};

// -log softmax(logits)[target], in double precision.
double token_nll(std::span<const float> logits, int32_t target);

// The KL divergence sum p_base log(p_base / p_model) of softmax(logits) from
// softmax(base), in double precision, and whether both put the most weight on
// the same token (the lowest index on a tie).
struct TokenDivergence {
  double kl = 0;
  bool same_top = false;
};
TokenDivergence token_divergence(std::span<const float> base, std::span<const float> logits);

struct PerplexityProgress {
  int64_t chunks_done = 0;
  int64_t chunks = 0;
  const NllStats* stats = nullptr;  // every token scored so far
  double seconds = 0;               // evaluating, so far
};

struct PerplexityOptions {
  int64_t n_ctx = 512;                                           // tokens per chunk; at most the placement's context
  int64_t max_chunks = 0;                                        // evaluate at most this many chunks; 0: every one
  std::function<void(const PerplexityProgress&)> on_chunk = {};  // after each chunk; may be empty
  // The base model: when set, each chunk is evaluated on it too and the KL
  // divergence measured. It must have the model's vocabulary and a context
  // of a chunk at least.
  Generator* base = nullptr;
};

struct PerplexityResult {
  NllStats stats;
  int64_t chunks = 0;  // evaluated
  int64_t n_ctx = 0;
  double seconds = 0;  // evaluating (placement and tokenizing not included)
  int64_t tokens_evaluated() const { return chunks * n_ctx; }
  // With a base model: the KL divergence per scored token, and how many of
  // them both models rank the same token first.
  NllStats kl;
  int64_t same_top = 0;
};

// Scores `tokens` (the text as Tokenizer::encode gives it, add_special on)
// with `gen`, which starts over for every chunk. A text of fewer than two
// chunks' tokens is an invalid_argument saying how many it has and needs.
StatusOr<PerplexityResult> measure_perplexity(Generator& gen, std::span<const int32_t> tokens,
                                              const PerplexityOptions& options);

}  // namespace tensorpc
