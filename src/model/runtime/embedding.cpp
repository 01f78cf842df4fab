// Pooled, normalised hidden states (embedding.h).
#include "model/runtime/embedding.h"

#include <algorithm>
#include <cmath>

namespace tensorpc {
namespace {

// One input's hidden states as they come, step by step, folded into what
// its pooling keeps: their sum (mean), the first row (cls) or the latest (last).
class Pooler {
 public:
  Pooler(int64_t n_embd, Pooling pooling) : pooling_(pooling), acc_(static_cast<size_t>(n_embd), 0.0) {}

  void add(std::span<const float> row) {
    const bool take = pooling_ == Pooling::last || (pooling_ == Pooling::cls && rows_ == 0);
    const bool sum = pooling_ == Pooling::mean || pooling_ == Pooling::none;
    for (size_t i = 0; i < acc_.size(); ++i) {
      if (sum) acc_[i] += row[i];
      if (take) acc_[i] = row[i];
    }
    ++rows_;
  }
  std::vector<float> result() const {
    const bool mean = pooling_ == Pooling::mean || pooling_ == Pooling::none;
    const double scale = mean && rows_ > 0 ? 1.0 / static_cast<double>(rows_) : 1.0;
    std::vector<float> out(acc_.size());
    for (size_t i = 0; i < acc_.size(); ++i) out[i] = static_cast<float>(acc_[i] * scale);
    return out;
  }

 private:
  Pooling pooling_;
  std::vector<double> acc_;
  int64_t rows_ = 0;
};

// Refusals that need no step.
Status check_inputs(const Generator& gen, std::span<const std::vector<int32_t>> inputs, std::span<const int64_t> seqs) {
  if (inputs.empty()) return invalid_argument("embedding: no inputs");
  if (seqs.empty()) return invalid_argument("embedding: no sequence to evaluate the inputs on");
  std::vector<bool> seen(static_cast<size_t>(gen.n_seq()), false);
  for (int64_t seq : seqs) {
    if (seq < 0 || seq >= gen.n_seq() || seen[static_cast<size_t>(seq)]) {
      return invalid_argument("embedding: sequence " + std::to_string(seq) + " is not one of the generator's " +
                              std::to_string(gen.n_seq()) + " or is named twice");
    }
    seen[static_cast<size_t>(seq)] = true;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(inputs[i].size());
    if (n == 0) return invalid_argument("embedding: input " + std::to_string(i) + " has no tokens");
    if (n > gen.seq_ctx()) {
      return invalid_argument("embedding: input " + std::to_string(i) + " has " + std::to_string(n) +
                              " tokens; a sequence holds " + std::to_string(gen.seq_ctx()));
    }
  }
  return Status();
}

// Inputs [first, first + seqs.size()) (those there are), one a sequence,
// through steps of at most n_batch tokens; each one's vector appended to `out`.
Status embed_turn(Generator& gen, std::span<const std::vector<int32_t>> inputs, std::span<const int64_t> seqs,
                  const EmbedOptions& options, std::vector<std::vector<float>>& out) {
  const int64_t n_embd = gen.model().hparams().n_embd;
  const size_t n = std::min(inputs.size(), seqs.size());
  std::vector<Pooler> poolers(n, Pooler(n_embd, options.pooling));
  std::vector<size_t> fed(n, 0);
  for (size_t i = 0; i < n; ++i) TENSORPC_RETURN_IF_ERROR(gen.rewind(seqs[i], 0));
  for (;;) {
    // The next chunk of each input in order, the first at least a token.
    std::vector<SequenceTokens> batch;
    std::vector<size_t> owner;
    int64_t budget = std::max<int64_t>(1, options.n_batch);
    for (size_t i = 0; i < n && budget > 0; ++i) {
      const size_t count = std::min(inputs[i].size() - fed[i], static_cast<size_t>(budget));
      if (count == 0) continue;
      batch.push_back({seqs[i], std::span<const int32_t>(inputs[i].data() + fed[i], count)});
      owner.push_back(i);
      budget -= static_cast<int64_t>(count);
    }
    if (batch.empty()) break;
    TENSORPC_ASSIGN_OR_RETURN(const std::vector<float> hidden, gen.eval_hidden(batch));
    size_t row = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      for (size_t t = 0; t < batch[b].tokens.size(); ++t, ++row) {
        poolers[owner[b]].add(
            std::span<const float>(hidden).subspan(row * static_cast<size_t>(n_embd), static_cast<size_t>(n_embd)));
      }
      fed[owner[b]] += batch[b].tokens.size();
    }
  }
  for (Pooler& p : poolers) {
    out.push_back(p.result());
    if (options.normalize) normalize_l2(out.back());
  }
  return Status();
}

}  // namespace

std::vector<float> pool_hidden(std::span<const float> rows, int64_t n_embd, Pooling pooling) {
  Pooler p(n_embd, pooling);
  for (size_t at = 0; at + static_cast<size_t>(n_embd) <= rows.size(); at += static_cast<size_t>(n_embd)) {
    p.add(rows.subspan(at, static_cast<size_t>(n_embd)));
  }
  return p.result();
}

void normalize_l2(std::span<float> v) {
  double sum = 0.0;
  for (float x : v) sum += static_cast<double>(x) * x;
  const double length = std::sqrt(sum);
  if (!(length > 0.0) || !std::isfinite(length)) return;
  for (float& x : v) x = static_cast<float>(x / length);
}

StatusOr<std::vector<std::vector<float>>> embed(Generator& gen, std::span<const std::vector<int32_t>> inputs,
                                                std::span<const int64_t> seqs, const EmbedOptions& options) {
  TENSORPC_RETURN_IF_ERROR(check_inputs(gen, inputs, seqs));
  std::vector<std::vector<float>> out;
  Status s;
  for (size_t first = 0; first < inputs.size() && s.ok(); first += seqs.size()) {
    s = embed_turn(gen, inputs.subspan(first), seqs, options, out);
  }
  // The sequences start over whatever happened: what a failed step left in their cells is unknown.
  for (int64_t seq : seqs) (void)gen.rewind(seq, 0);
  if (!s.ok()) return s;
  return out;
}

}  // namespace tensorpc
