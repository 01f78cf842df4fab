// Mixture-of-experts figures of `tensorpc bench` (bench_moe.h).
#include "lab/bench_moe.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "lab/bench_measure.h"
#include "lab/random_model.h"

namespace tensorpc::tools {
namespace {

constexpr int64_t kExperts = 8, kUsed = 2, kExpertWidth = 1408;

RandomModelOptions shape(int64_t n_expert, int64_t n_ff) {
  return {.n_vocab = 32000,
          .n_embd = 1024,
          .n_layer = 8,
          .n_head = 16,
          .n_head_kv = 4,
          .n_ff = n_ff,
          .n_ctx = 512,
          .type = DType::q8_0,
          .seed = 13,
          .n_expert = n_expert,
          .n_expert_used = kUsed};
}

// Bytes a decode step reads: every layer weight, the chosen share of the
// experts', and the output projection; of the embedding, one row.
double active_bytes(const LlamaModel& m) {
  const LlamaWeights& w = m.weights();
  double bytes = static_cast<double>(m.output_bytes());
  for (const LlamaLayerWeights& L : w.layers) {
    for (const Tensor* t : L.tensors()) {
      const bool expert = t == L.gate_exps || t == L.up_exps || t == L.down_exps;
      const double share = expert ? static_cast<double>(m.hparams().n_expert_used) / m.hparams().n_expert : 1.0;
      bytes += share * static_cast<double>(t->nbytes());
    }
  }
  return bytes;
}

}  // namespace

StatusOr<std::vector<Figure>> bench_moe_model(const ModelBenchOptions& options, std::FILE* progress) {
  ModelBenchOptions o = options;
  o.n_predict = std::max(o.n_predict, 17);  // decode long enough to time
  if (progress != nullptr) {
    std::fprintf(progress, "tensorpc bench: writing the random MoE model and its dense twin (once)\n");
    std::fflush(progress);
  }
  TENSORPC_ASSIGN_OR_RETURN(auto moe_path, write_random_llama_once(temp_model_path("tensorpc_bench_moe_8x2_q8_0.gguf"),
                                                                   shape(kExperts, kExpertWidth)));
  TENSORPC_ASSIGN_OR_RETURN(
      auto dense_path,
      write_random_llama_once(temp_model_path("tensorpc_bench_moe_dense_q8_0.gguf"), shape(0, kUsed * kExpertWidth)));
  TENSORPC_ASSIGN_OR_RETURN(auto moe, LlamaModel::open(moe_path, {.digest_dir = "off"}));
  TENSORPC_ASSIGN_OR_RETURN(auto dense, LlamaModel::open(dense_path, {.digest_dir = "off"}));
  o.prompt = prefill_prompt(*moe);
  TENSORPC_ASSIGN_OR_RETURN(auto on_moe, GenerationLayout::prepare(*moe, {}, o));
  TENSORPC_ASSIGN_OR_RETURN(auto on_dense, GenerationLayout::prepare(*dense, {}, o));
  const double mem = memory_read_gbs(o.threads);
  // In turns, so a machine that changes speed meanwhile moves both.
  for (int i = 0; i < std::max(1, o.repetitions); ++i) {
    TENSORPC_RETURN_IF_ERROR(on_moe->measure());
    TENSORPC_RETURN_IF_ERROR(on_dense->measure());
  }
  const GenerationSpeed s = on_moe->speed(), d = on_dense->speed();
  const std::string label = "random MoE 8 experts, 2 used, q8_0";
  std::vector<Figure> figures;
  char tps[32];
  std::snprintf(tps, sizeof tps, "%.1f tok/s", s.decode_tps);
  figures.push_back({.id = "moe.decode",
                     .name = label + ": decode active weight bytes/s (" + tps + ")",
                     .value = active_bytes(*moe) * s.decode_tps / 1e9,
                     .unit = "GB/s",
                     .baseline = mem,
                     .baseline_name = "memory read loop, " + std::to_string(o.threads) + " threads",
                     .target = Target{.bound = Target::Bound::at_least, .limit = 0.6}});
  const auto [low, high] = ratio_range(s.prefill_runs, d.prefill_runs);
  figures.push_back({.id = "moe.prefill",
                     .name = label + ": prefill tokens/s (128 tokens)",
                     .value = s.prefill_tps,
                     .unit = "tok/s",
                     .baseline = d.prefill_tps,
                     .baseline_name = "dense model of the same active parameters",
                     .target = Target{.bound = Target::Bound::at_least, .limit = 0.7},
                     .ratio_low = low,
                     .ratio_high = high});
  return figures;
}

}  // namespace tensorpc::tools
