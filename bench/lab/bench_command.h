// `tensorpc bench`: the performance report in one command. Every figure is
// measured next to its baseline in the same run (raw TCP on loopback, the
// local CPU, the path relayed through the client, the cold load), as the
// median of several repetitions; see docs/performance.md for what each one
// means and its target.
//
// The run and its report live here, with the rest of the bench lab
// (tensorpc_bench_lab); the command line that fills BenchOptions, and the
// idle cores held awake for a run, are the tool's (tools/tensorpc/bench.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "lab/bench_model.h"
#include "lab/bench_report.h"
#include "lab/link_proxy.h"

namespace tensorpc::tools {

struct BenchOptions {
  bool quick = false;                                 // a short run: fewer sizes, models, tokens and repetitions
  int repetitions = 0;                                // 0: 5 (quick: 3); the model figures use fewer (3, quick: 1)
  int threads = 0;                                    // cores the model layouts share out; 0: every core
  int n_predict = 0;                                  // tokens per generation; 0: 33 (quick: 9)
  LinkShape link{std::chrono::milliseconds(1), 1e9};  // the emulated LAN link of the model figures
  std::string json_path{};                            // --json: every figure as JSON
  std::string plot_path{};                            // --plot: an SVG chart of the figures against their targets
  // --awake-cores: the caller holds idle cores awake for the run (tools/tensorpc/bench.h); the table and JSON say so.
  bool cores_kept_awake = false;
  // The bundled kjv-tiny model's file (the tool's), first of the default models when it exists; empty: none.
  std::string bundled_model{};
  // The bundled chat model (kjv-bpe) and its draft model (kjv-bpe-draft): the
  // draft-model figure (bench_lookup.h) when both exist; empty: none.
  std::string bundled_chat_model{};
  std::string bundled_draft_model{};
  // Empty: the defaults of the mode (see bench_command.cpp). Tests give small ones.
  std::vector<uint64_t> sizes{};          // set/get sizes, bytes
  uint64_t handover_bytes = 0;            // 0: 64 MiB (quick: 16 MiB)
  int round_trips = 0;                    // per repetition; 0: 5000 (quick: 2000)
  std::vector<BenchModel> models{};       // decode figures for each
  std::vector<BenchModel> load_models{};  // load figures for each
  std::vector<std::string> quant_mixes{};  // quantized random 250M model figures for each (bench_quant.h)
  bool quant_only = false;                 // --quant-only: those figures alone
  bool serve_only = false;                 // --serve-only: the serving figures alone (bench_serve.h)
  bool gpu_only = false;                   // --gpu-only: the local GPUs' figures alone (bench_gpu.h)
  bool moe_only = false;                   // --moe-only: the mixture-of-experts figures alone (bench_moe.h)
  bool lookup_only = false;                // --lookup-only: the speculative-decoding figures alone (bench_lookup.h)
  bool load_only = false;                  // --load-only: the ~1 GB model's load figures alone (bench_load.h)
  // --device: the Vulkan devices (by index, or kEveryVulkanDevice) of the GPU
  // figures. Unset: every one, when the loader reports any (else the section
  // is left out); empty (`--device cpu`): none.
  std::optional<std::vector<int>> gpu_devices{};
  int64_t gpu_dim = 0;          // the GPU figures' weights are gpu_dim × gpu_dim; 0: 4096 (quick: 1024)
  uint64_t gpu_copy_bytes = 0;  // bytes of the GPU's timed copy; 0: 512 MiB (quick: 64 MiB)
};

// The defaults filled in (models written when missing), then every figure.
// Progress lines go to `progress` (nullptr: quiet).
StatusOr<std::vector<Figure>> run_bench(BenchOptions options, std::FILE* progress);

// Runs the whole command: the table to `out`, progress and errors to
// `err`, the JSON and SVG files when asked. Returns the exit code (0, or 1
// on any failure; missed targets are reported, not failures).
int bench_command(const BenchOptions& options, std::FILE* out, std::FILE* err);

}  // namespace tensorpc::tools
