// Perplexity over chunks of a text (see perplexity.h).
#include "model/runtime/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace tensorpc {

void NllStats::add(double nll) {
  ++n_;
  const double delta = nll - mean_;
  mean_ += delta / static_cast<double>(n_);
  m2_ += delta * (nll - mean_);
}

double NllStats::perplexity() const { return std::exp(mean_); }

double NllStats::mean_error() const {
  if (n_ < 2) return 0;
  // llama.cpp's estimate: the population variance over N - 1, i.e. m2 / (N (N - 1)).
  const double n = static_cast<double>(n_);
  return std::sqrt(m2_ / (n * (n - 1)));
}

double NllStats::perplexity_error() const { return perplexity() * mean_error(); }

namespace {

// log sum exp(x), in double precision, and the index of the largest x (the first on a tie).
struct LogSum {
  double value;
  size_t top;
};

LogSum log_sum_exp(std::span<const float> x) {
  size_t top = 0;
  for (size_t i = 1; i < x.size(); ++i) top = x[i] > x[top] ? i : top;
  const double max = x.empty() ? 0.0 : static_cast<double>(x[top]);
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - max);
  return {std::log(sum) + max, top};
}

}  // namespace

double token_nll(std::span<const float> logits, int32_t target) {
  if (target < 0 || static_cast<size_t>(target) >= logits.size()) return std::numeric_limits<double>::quiet_NaN();
  return log_sum_exp(logits).value - static_cast<double>(logits[static_cast<size_t>(target)]);
}

TokenDivergence token_divergence(std::span<const float> base, std::span<const float> logits) {
  if (base.size() != logits.size() || base.empty()) return {std::numeric_limits<double>::quiet_NaN(), false};
  const LogSum b = log_sum_exp(base), m = log_sum_exp(logits);
  double kl = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double log_p = static_cast<double>(base[i]) - b.value, log_q = static_cast<double>(logits[i]) - m.value;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return {std::max(kl, 0.0), b.top == m.top};  // rounding may leave -1e-17 for equal distributions
}

StatusOr<PerplexityResult> measure_perplexity(Generator& gen, std::span<const int32_t> tokens,
                                              const PerplexityOptions& options) {
  const int64_t n_ctx = options.n_ctx;
  if (n_ctx < 4)
    return invalid_argument("perplexity: chunks of " + std::to_string(n_ctx) + " tokens are too short (4 at least)");
  if (n_ctx > gen.n_ctx()) {
    return invalid_argument("perplexity: chunks of " + std::to_string(n_ctx) + " tokens do not fit the context of " +
                            std::to_string(gen.n_ctx()));
  }
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < 2 * n_ctx) {
    return invalid_argument("perplexity: the text has " + std::to_string(n_tokens) + " tokens; chunks of " +
                            std::to_string(n_ctx) + " need at least " + std::to_string(2 * n_ctx) + " (two chunks)");
  }
  if (options.base != nullptr) {
    if (options.base->model().hparams().n_vocab != gen.model().hparams().n_vocab) {
      return invalid_argument("perplexity: the base model has " +
                              std::to_string(options.base->model().hparams().n_vocab) + " logits a token, the model " +
                              std::to_string(gen.model().hparams().n_vocab));
    }
    if (n_ctx > options.base->n_ctx()) {
      return invalid_argument("perplexity: chunks of " + std::to_string(n_ctx) +
                              " tokens do not fit the base model's context of " +
                              std::to_string(options.base->n_ctx()));
    }
  }
  int64_t chunks = n_tokens / n_ctx;
  if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);

  const Tokenizer& tok = gen.model().tokenizer();
  const int64_t n_vocab = gen.model().hparams().n_vocab;
  const int64_t first = n_ctx / 2;
  PerplexityResult r;
  r.n_ctx = n_ctx;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (tok.add_bos()) chunk[0] = tok.bos();
    TENSORPC_RETURN_IF_ERROR(gen.reset());
    auto logits = gen.eval_all(chunk);
    if (!logits.ok()) return logits.status().with_context("perplexity: chunk " + std::to_string(c + 1));
    const std::vector<float>& all = logits.value();
    std::vector<float> base_all;
    if (options.base != nullptr) {
      TENSORPC_RETURN_IF_ERROR(options.base->reset());
      auto base_logits = options.base->eval_all(chunk);
      if (!base_logits.ok()) {
        return base_logits.status().with_context("perplexity: the base model, chunk " + std::to_string(c + 1));
      }
      base_all = std::move(base_logits).value();
    }
    for (int64_t j = first; j < n_ctx - 1; ++j) {
      const std::span<const float> row(all.data() + j * n_vocab, static_cast<size_t>(n_vocab));
      r.stats.add(token_nll(row, chunk[static_cast<size_t>(j + 1)]));
      if (options.base != nullptr) {
        const TokenDivergence d = token_divergence({base_all.data() + j * n_vocab, static_cast<size_t>(n_vocab)}, row);
        r.kl.add(d.kl);
        r.same_top += d.same_top ? 1 : 0;
      }
    }
    r.chunks = c + 1;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options.on_chunk) options.on_chunk({r.chunks, chunks, &r.stats, r.seconds});
  }
  return r;
}

}  // namespace tensorpc
