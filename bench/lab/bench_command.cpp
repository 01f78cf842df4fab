// `tensorpc bench` (bench_command.h): the defaults of a full and a quick run, the
// sections in order, and the outputs.
#include "lab/bench_command.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "lab/bench_gpu.h"
#include "lab/bench_load.h"
#include "lab/bench_lookup.h"
#include "lab/bench_moe.h"
#include "lab/bench_quant.h"
#include "lab/bench_rpc.h"
#include "lab/bench_serve.h"

namespace tensorpc::tools {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Fills what the caller left empty with the defaults of the mode.
Status fill_defaults(BenchOptions& o) {
  const bool q = o.quick;
  if (o.repetitions <= 0) o.repetitions = q ? 3 : 5;
  if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.n_predict <= 0) o.n_predict = q ? 9 : 33;
  if (o.handover_bytes == 0) o.handover_bytes = (q ? 16 : 64) * kMiB;
  if (o.round_trips <= 0) o.round_trips = q ? 2000 : 5000;
  if (o.gpu_dim <= 0) o.gpu_dim = q ? 1024 : 4096;
  if (o.gpu_copy_bytes == 0) o.gpu_copy_bytes = (q ? 64 : 512) * kMiB;
  if (o.sizes.empty()) {
    o.sizes = q ? std::vector<uint64_t>{kMiB, 64 * kMiB}
                : std::vector<uint64_t>{kMiB, 16 * kMiB, 64 * kMiB, 256 * kMiB, 1024 * kMiB};
  }
  bool fill_quant_mixes = o.quant_only;
  if (o.models.empty() && !o.quant_only && !o.gpu_only && !o.moe_only && !o.lookup_only && !o.load_only) {
    if (!o.bundled_model.empty() && std::filesystem::exists(o.bundled_model)) {
      o.models.push_back({.key = "kjv_tiny", .label = "kjv-tiny", .path = o.bundled_model});
    }
    if (!q) {
      auto path = random_24m_f32_model();
      if (!path.ok()) return path.status().with_context("random model");
      o.models.push_back({.key = "f32_24m", .label = "random 24M f32", .path = path.value()});
    }
    for (DType type : q ? std::vector<DType>{DType::q8_0} : std::vector<DType>{DType::q8_0, DType::q4_0}) {
      auto path = random_100m_model(type);
      if (!path.ok()) return path.status().with_context("random model");
      const std::string name(name_of(type));
      o.models.push_back({.key = name, .label = "random 100M " + name, .path = path.value()});
    }
    fill_quant_mixes = true;
    // The cache matters for big weights: the bundled model's tensors are too small for it.
    if (o.load_models.empty()) o.load_models.push_back(o.models.back());
  }
  if (fill_quant_mixes && o.quant_mixes.empty()) {
    o.quant_mixes = q ? std::vector<std::string>{"Q4_K_M"}
                      : std::vector<std::string>{"Q8_0", "Q4_0", "F16", "F32", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL"};
  }
  return Status();
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string settings_json(const BenchOptions& o) {
  return "\"settings\": {\"quick\": " + std::string(o.quick ? "true" : "false") +
         ", \"repetitions\": " + std::to_string(o.repetitions) + ", \"threads\": " + std::to_string(o.threads) +
         ", \"tokens\": " + std::to_string(o.n_predict) + ", \"link\": \"" + o.link.to_string() +
         "\", \"awake_cores\": " + std::string(o.cores_kept_awake ? "true" : "false") + "}";
}

}  // namespace

StatusOr<std::vector<Figure>> run_bench(BenchOptions o, std::FILE* progress) {
  TENSORPC_RETURN_IF_ERROR(fill_defaults(o));
  auto say = [&](const std::string& what) {
    if (progress == nullptr) return;
    std::fprintf(progress, "tensorpc bench: %s\n", what.c_str());
    std::fflush(progress);
  };
  std::vector<Figure> figures;
  auto add = [&](StatusOr<std::vector<Figure>> section, const std::string& what) -> Status {
    if (!section.ok()) return section.status().with_context(what);
    for (Figure& f : section.value()) figures.push_back(std::move(f));
    return Status();
  };
  const RpcBenchOptions rpc{
      .repetitions = o.repetitions, .round_trips = o.round_trips, .sizes = o.sizes, .handover_bytes = o.handover_bytes};
  ModelBenchOptions model{
      .repetitions = o.quick ? 3 : 5, .n_predict = o.n_predict, .threads = o.threads, .link = o.link};
  if (o.repetitions < model.repetitions) model.repetitions = o.repetitions;
  // The GPU figures: asked for (--gpu-only, --device naming one), or in the whole report when a GPU is there.
  const bool whole = !o.quant_only && !o.serve_only;
  const bool gpu = o.gpu_only || (whole && (o.gpu_devices ? !o.gpu_devices->empty() : gpu_devices_present()));
  auto add_gpu = [&]() -> Status {
    say("local GPUs: decode bytes/s against a device copy, prefill GFLOP/s against an FMA shader");
    const GpuBenchOptions options{.repetitions = o.repetitions,
                                  .dim = o.gpu_dim,
                                  .copy_bytes = o.gpu_copy_bytes,
                                  .devices = o.gpu_devices.value_or(std::vector<int>{})};
    return add(bench_gpu_devices(options, progress), "GPU devices");
  };
  if (o.gpu_only) {
    TENSORPC_RETURN_IF_ERROR(add_gpu());
    return figures;
  }
  auto add_moe = [&]() -> Status {
    say("mixture of experts: a random 8-expert model (2 used) against a dense one of its active size, local CPU");
    return add(bench_moe_model(model, progress), "mixture of experts");
  };
  if (o.moe_only) {
    TENSORPC_RETURN_IF_ERROR(add_moe());
    return figures;
  }
  auto add_large_load = [&]() -> Status {
    say("load of a random 888 MB f32 model: cold and warm on loopback, onto 2 servers over link " + o.link.to_string() +
        ", from a server's --models directory");
    return add(bench_large_load(model), "large load");
  };
  if (o.load_only) {
    TENSORPC_RETURN_IF_ERROR(add_large_load());
    return figures;
  }
  // On the bundled model: a model that goes on quoting its prompt, as real ones do.
  const bool have_bundled = !o.bundled_model.empty() && std::filesystem::exists(o.bundled_model);
  const bool have_draft = !o.bundled_chat_model.empty() && std::filesystem::exists(o.bundled_chat_model) &&
                          !o.bundled_draft_model.empty() && std::filesystem::exists(o.bundled_draft_model);
  auto add_lookup = [&]() -> Status {
    if (have_bundled) {
      say("decode with prompt lookup against without, kjv-tiny, 2x2 over link " + o.link.to_string());
      TENSORPC_RETURN_IF_ERROR(
          add(bench_lookup_decode({.key = "kjv_tiny", .label = "kjv-tiny", .path = o.bundled_model}, model), "lookup"));
    }
    if (!have_draft) return Status();
    say("decode with a draft model against without, kjv-bpe and kjv-bpe-draft, 2x2 over link " + o.link.to_string());
    return add(bench_draft_decode({.key = "kjv_bpe", .label = "kjv-bpe", .path = o.bundled_chat_model},
                                  o.bundled_draft_model, model),
               "draft model");
  };
  if (o.lookup_only) {
    if (!have_bundled) return not_found("--lookup-only: no bundled model (kjv-tiny) to run");
    TENSORPC_RETURN_IF_ERROR(add_lookup());
    return figures;
  }

  if (!o.quant_only && !o.serve_only) {  // --quant-only, --serve-only: those figures below alone
    say("round trip of a tiny command");
    TENSORPC_RETURN_IF_ERROR(add(bench_round_trip(rpc), "round trip"));
    say("set-tensor and get-tensor throughput");
    TENSORPC_RETURN_IF_ERROR(add(bench_set_get(rpc), "set/get"));
    say("round trip and set/get over TLS");
    TENSORPC_RETURN_IF_ERROR(add(bench_tls(rpc), "TLS"));
    say("set-tensor through the weights cache");
    TENSORPC_RETURN_IF_ERROR(add(bench_cache_hit(rpc), "cache hit"));
    say("hand-over between devices and between servers");
    TENSORPC_RETURN_IF_ERROR(add(bench_handover(rpc), "hand-over"));
    for (const BenchModel& m : o.models) {
      say("decode and prefill, " + m.label + " (local, 1x1, 2x2, 2x2 over link " + o.link.to_string() + ")");
      TENSORPC_RETURN_IF_ERROR(add(bench_model_decode(m, model), m.label));
    }
    TENSORPC_RETURN_IF_ERROR(add_lookup());
  }
  if (!o.quant_only) {
    say("serving: 8 requests at once against one alone, random 250M q8_0 over 2 servers");
    TENSORPC_RETURN_IF_ERROR(add(bench_serving(model, progress), "serving"));
  }
  if (o.serve_only) return figures;
  if (!o.quant_mixes.empty()) {
    say("decode and prefill of the random 250M model quantized to " + join(o.quant_mixes) + ", local CPU");
    TENSORPC_RETURN_IF_ERROR(add(bench_quantized_models(o.quant_mixes, model, progress), "quantized models"));
  }
  if (!o.quant_only) TENSORPC_RETURN_IF_ERROR(add_moe());
  if (gpu) TENSORPC_RETURN_IF_ERROR(add_gpu());
  for (const BenchModel& m : o.load_models) {
    say("load cold and warm, " + m.label);
    TENSORPC_RETURN_IF_ERROR(add(bench_model_load(m, model), m.label + " load"));
  }
  if (!o.quick && !o.quant_only) TENSORPC_RETURN_IF_ERROR(add_large_load());
  return figures;
}

int bench_command(const BenchOptions& options, std::FILE* out, std::FILE* err) {
  BenchOptions o = options;
  if (const Status s = fill_defaults(o); !s.ok()) {
    std::fprintf(err, "tensorpc bench: %s\n", s.to_string().c_str());
    return 1;
  }
  auto figures = run_bench(o, err);
  if (!figures.ok()) {
    std::fprintf(err, "tensorpc bench: %s\n", figures.status().to_string().c_str());
    return 1;
  }
  std::fprintf(out, "\n%s", format_table(figures.value()).c_str());
  int met = 0, targets = 0;
  for (const Figure& f : figures.value()) {
    if (!f.target) continue;
    ++targets;
    met += f.met() ? 1 : 0;
  }
  std::fprintf(out, "\n%d of %d targets met (median of %d; %s%s)\n", met, targets, o.repetitions,
               o.quick ? "quick run" : "full run", o.cores_kept_awake ? "; idle cores kept awake" : "");
  if (!o.json_path.empty()) {
    if (const Status s = write_text_file(o.json_path, format_json(figures.value(), {settings_json(o)})); !s.ok()) {
      std::fprintf(err, "tensorpc bench: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  if (!o.plot_path.empty()) {
    const std::string title = "tensorpc bench: figures against their targets (" + o.link.to_string() + " link)";
    if (const Status s = write_text_file(o.plot_path, format_svg(figures.value(), title)); !s.ok()) {
      std::fprintf(err, "tensorpc bench: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace tensorpc::tools
