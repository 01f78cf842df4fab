// Quantized-model figures of `tensorpc bench` (bench_quant.h).
#include "lab/bench_quant.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "lab/bench_measure.h"
#include "lab/random_model.h"
#include "model/gguf/gguf.h"
#include "model/quantize/quantize_model.h"

namespace tensorpc::tools {
namespace {

// Multiply-adds (times 2) of one prompt token's matrix products: every layer
// weight once. The embedding is a row lookup, and the output projection runs
// for the last token of a prompt only.
double prefill_flops_per_token(const LlamaModel& model) {
  const LlamaWeights& w = model.weights();
  uint64_t params = model.parameter_count() - static_cast<uint64_t>(w.tok_embd->nelements());
  if (w.output != nullptr && w.output != w.tok_embd) params -= static_cast<uint64_t>(w.output->nelements());
  return 2.0 * static_cast<double>(params);
}

Status quantize_for_bench(const std::string& source, const std::string& path, const std::string& mix,
                          std::FILE* progress) {
  const std::optional<QuantMix> m = parse_quant_mix(mix);
  if (!m) return invalid_argument("unknown quantization mix " + mix + " (" + quant_mix_names() + ")");
  TENSORPC_ASSIGN_OR_RETURN(auto file, GgufFile::open(source));
  if (progress != nullptr) {
    std::fprintf(progress, "tensorpc bench: quantizing the random 250M model to %s (once; kept in %s)\n",
                 mix.c_str(), path.c_str());
    std::fflush(progress);
  }
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  TENSORPC_ASSIGN_OR_RETURN(auto summary, quantize_gguf(*file, path, *m, {.threads = threads}));
  (void)summary;
  return Status();
}

}  // namespace

StatusOr<std::string> random_250m_model(const std::string& mix, std::FILE* progress) {
  TENSORPC_ASSIGN_OR_RETURN(
      const std::string source,
      write_random_llama_once(temp_model_path("tensorpc_bench_250m_q8_0.gguf"), {.n_vocab = 32000,
                                                                                 .n_embd = 1024,
                                                                                 .n_layer = 14,
                                                                                 .n_head = 16,
                                                                                 .n_head_kv = 4,
                                                                                 .n_ff = 2816,
                                                                                 .n_ctx = 512,
                                                                                 .type = DType::q8_0,
                                                                                 .seed = 11}));
  if (mix == "Q8_0") return source;
  const std::string path = temp_model_path("tensorpc_bench_250m_" + mix + ".gguf");
  if (std::filesystem::exists(path)) return path;
  TENSORPC_RETURN_IF_ERROR(quantize_for_bench(source, path, mix, progress));
  return path;
}

StatusOr<std::vector<Figure>> bench_quantized_models(const std::vector<std::string>& mixes,
                                                     const ModelBenchOptions& options, std::FILE* progress) {
  ModelBenchOptions o = options;
  o.n_predict = std::max(o.n_predict, 17);  // decode long enough to time
  TENSORPC_ASSIGN_OR_RETURN(auto base_path, random_250m_model("Q8_0", progress));
  TENSORPC_ASSIGN_OR_RETURN(auto base, LlamaModel::open(base_path, {.digest_dir = "off"}));
  o.prompt = prefill_prompt(*base);
  TENSORPC_ASSIGN_OR_RETURN(auto on_base, GenerationLayout::prepare(*base, {}, o));
  const double mem = memory_read_gbs(o.threads);
  const double peak = fma_peak_gflops(o.threads);

  std::vector<Figure> figures;
  for (const std::string& mix : mixes) {
    TENSORPC_ASSIGN_OR_RETURN(auto path, random_250m_model(mix, progress));
    TENSORPC_ASSIGN_OR_RETURN(auto model, LlamaModel::open(path, {.digest_dir = "off"}));
    TENSORPC_ASSIGN_OR_RETURN(auto layout, GenerationLayout::prepare(*model, {}, o));
    // In turns with q8_0, so a machine that changes speed meanwhile moves both.
    for (int i = 0; i < std::max(1, o.repetitions); ++i) {
      TENSORPC_RETURN_IF_ERROR(on_base->measure());
      TENSORPC_RETURN_IF_ERROR(layout->measure());
    }
    const GenerationSpeed s = layout->speed();
    const GenerationSpeed b = on_base->speed();
    // Decode reads every weight once per token but the embedding, of which it reads one row.
    const double decode_bytes = static_cast<double>(s.weight_bytes - model->embedding_bytes());
    const std::string id = "quant." + mix + ".";
    figures.push_back({.id = id + "decode",
                       .name = "random 250M " + mix + ": decode weight bytes/s (" +
                               std::to_string(static_cast<int>(s.decode_tps * 10) / 10.0).substr(0, 5) +
                               " tok/s)",
                       .value = decode_bytes * s.decode_tps / 1e9,
                       .unit = "GB/s",
                       .baseline = mem,
                       .baseline_name = "memory read loop, " + std::to_string(o.threads) + " threads",
                       .target = Target{.bound = Target::Bound::at_least, .limit = 0.6}});
    figures.push_back({.id = id + "prefill_gflops",
                       .name = "random 250M " + mix + ": prefill matrix GFLOP/s (128 tokens)",
                       .value = s.prefill_tps * prefill_flops_per_token(*model) / 1e9,
                       .unit = "GFLOP/s",
                       .baseline = peak,
                       .baseline_name = "FMA peak, " + std::to_string(o.threads) + " threads"});
    if (mix == "Q8_0") continue;  // the baseline of the next figure
    // The bar holds for the formats beyond q8_0/q4_0/f16/bf16/f32; those show where they stand.
    const bool held_to_bar = mix != "Q4_0" && mix != "F16" && mix != "BF16" && mix != "F32";
    std::vector<double> values, baselines;
    for (double tps : s.prefill_runs) values.push_back(tps * static_cast<double>(s.weight_bytes) / 1e9);
    for (double tps : b.prefill_runs) baselines.push_back(tps * static_cast<double>(b.weight_bytes) / 1e9);
    const auto [low, high] = ratio_range(values, baselines);
    // The ratio at q8_0's matrix GFLOP/s (the same parameters, other bytes): the most a format
    // whose kernel runs q8_0's dot products can reach (docs/performance.md, "Quantized formats").
    char at_equal[48];
    std::snprintf(at_equal, sizeof at_equal, "%.2fx at equal GFLOP/s",
                  static_cast<double>(s.weight_bytes) / static_cast<double>(b.weight_bytes));
    figures.push_back({.id = id + "prefill",
                       .name = "random 250M " + mix + ": prefill weight bytes/s (128 tokens; " + at_equal + ")",
                       .value = s.prefill_tps * static_cast<double>(s.weight_bytes) / 1e9,
                       .unit = "GB/s",
                       .baseline = b.prefill_tps * static_cast<double>(b.weight_bytes) / 1e9,
                       .baseline_name = "q8_0 prefill",
                       .target = held_to_bar ? std::optional<Target>(Target{.bound = Target::Bound::at_least,
                                                                             .limit = 1.0})
                                             : std::nullopt,
                       .ratio_low = low,
                       .ratio_high = high});
  }
  return figures;
}

}  // namespace tensorpc::tools
