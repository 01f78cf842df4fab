// The model figures of `tensorpc bench`: prefill and decode tokens/s of a
// llama model on the local CPU against one server and two servers × two
// devices on loopback, the same two servers behind an emulated LAN link
// (LinkProxy), with the client's bytes and round trips per generated token;
// and a model's load time cold (the server has never seen its weights)
// against warm (its weights cache has them).
#pragma once

#include <string>
#include <vector>

#include "lab/bench_report.h"
#include "lab/link_proxy.h"
#include "model/arch/llama_model.h"
#include "tensorpc/dtype.h"
#include "tensorpc/server.h"
#include "tensorpc/status.h"

namespace tensorpc::tools {

struct BenchModel {
  std::string key{};    // for figure ids: "kjv_tiny", "q8_0"
  std::string label{};  // for people: "kjv-tiny"
  std::string path{};   // a GGUF model file
};

struct ModelBenchOptions {
  int repetitions = 3;  // measured generations per layout; tokens/s is their median
  int n_predict = 33;   // tokens per generation (the first comes from the prefill)
  int threads = 2;      // cores: the local CPU's threads, and each server device's
  LinkShape link{};     // of the emulated LAN
  // Every layout's CPU devices, local and on the servers, pin their threads
  // to cores (CpuDeviceOptions::pin_threads): the layouts then differ in
  // where the layers are, not in where the scheduler put the threads.
  bool pin_threads = true;
  std::string prompt{};  // empty: a two-sentence prompt that fits every model's context
  bool lookup = false;   // speculative decoding by prompt lookup (GenerateOptions::lookup)
  // Speculative decoding by this draft model (a GGUF file of the same
  // vocabulary) on a local CPU of its own, one thread; empty: none.
  std::string draft_model{};
  bool special = false;  // the prompt spells control tokens (a rendered chat)
};

// Per decode step, what one layout's generations measured.
struct GenerationSpeed {
  double decode_tps = 0, prefill_tps = 0;    // medians over the measured generations
  std::vector<double> decode_runs, prefill_runs;  // each measured generation's, in order
  double round_trips = 0, client_bytes = 0;  // per generated token, in the last
  double tokens_per_step = 1;                // in the last: more than 1 with lookup
  uint64_t weight_bytes = 0;                 // on the devices, as placed
  // Per decode step of the last generation, summed over the profiled
  // servers: computing on their devices, and plans waiting for a tensor
  // from another server.
  double server_compute_ms = 0, peer_wait_ms = 0;
};

// `model` placed on the local CPU (`endpoints` empty; options.threads
// threads) or on every device of the servers at `endpoints` (layers split
// evenly), after one greedy generation that is not measured (plans stored,
// grants given, buffers grown: load time, not decode); each measure() then
// runs one more and adds it to speed(). Layouts kept side by side can be
// measured in turns, so that a machine that slows down or speeds up during
// a run does so for the baseline too. `profiled`: servers of this process
// behind `endpoints`, whose ServerStats say where a decode step's time went.
class GenerationLayout {
 public:
  static StatusOr<std::unique_ptr<GenerationLayout>> prepare(const LlamaModel& model,
                                                             const std::vector<std::string>& endpoints,
                                                             const ModelBenchOptions& options,
                                                             std::vector<const Server*> profiled = {});
  ~GenerationLayout();
  Status measure();
  GenerationSpeed speed() const;

 private:
  GenerationLayout() = default;
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

// prepare(), then options.repetitions × measure(): the layout alone.
StatusOr<GenerationSpeed> measure_generation(const LlamaModel& model, const std::vector<std::string>& endpoints,
                                             const ModelBenchOptions& options,
                                             const std::vector<const Server*>& profiled = {});

// Decode and prefill figures of `model`, ids "model.<key>.*".
StatusOr<std::vector<Figure>> bench_model_decode(const BenchModel& model, const ModelBenchOptions& options);

// Load of `model` onto a fresh one-device server behind the emulated link,
// with an empty digest store (the client hashes every weight), then again
// onto the same server from the file opened anew, as a second `tensorpc run`
// would (its digests come from the store, so the client hashes nothing and
// the server's weights cache fills every weight): "load.<key>.time" (warm
// against cold, target ≤ 0.1×) and "load.<key>.bytes" (bytes sent each
// time). The store is a temporary directory, removed afterwards.
StatusOr<std::vector<Figure>> bench_model_load(const BenchModel& model, const ModelBenchOptions& options);

// A random ~100 M-parameter llama model (n_embd 768, 12 layers, n_ff 2048,
// vocabulary 32,000) with matrices of `type`, written under the system's
// temporary directory unless already there. Returns its path.
StatusOr<std::string> random_100m_model(DType type);

// `name` under the temporary directory. The random models are written there
// atomically (write_random_llama_once): an interrupted run leaves no half file.
std::string temp_model_path(const std::string& name);

// About 128 tokens of the random models' vocabulary (byte pieces and
// made-up words): the prompt of the prefill figures.
std::string prefill_prompt(const LlamaModel& model);

// A random ~24 M-parameter f32 llama model (n_embd 256, 8 layers, n_ff 896,
// vocabulary 32,000; two thirds of it the embedding and output), written as
// random_100m_model's: a model whose decode step is short next to a link's
// round trip, as the pipeline's figures over the link want.
StatusOr<std::string> random_24m_f32_model();

}  // namespace tensorpc::tools
