// What the `tensorpc` commands that run a model share before their work
// starts: the flags that say where a model runs (--device, --rpc and the key
// and TLS flags, --split, --override-tensor, -t, --local-only, --no-local), and one call that opens the
// model through the library's one path (tensorpc::Model), printing what it
// does — the model, the upload's progress, what the servers' weights caches
// spared, the placement — to stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch/llama_model.h"
#include "tensorpc/devices.h"
#include "tensorpc/model.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

struct ModelSetup {
  std::string model;                   // a GGUF model file
  std::vector<std::string> endpoints;  // after split_endpoints
  ClientFlags client;                  // key and TLS files; empty: the environment's
  std::vector<double> split;           // empty: by free memory
  int threads = 0;                     // local CPU threads, 0: every core
  int64_t n_ctx = 0;                   // KV-cache positions; 0: the model's, at most 2048
  int64_t n_seq = 1;                   // sequences sharing them (serve's slots), n_ctx / n_seq each
  bool use_local = true;               // false with --no-local: only the servers' devices
  std::vector<std::string> local_devices{"cpu"};  // --device: cpu, vulkan, vulkan:N, in order
  std::vector<TensorOverride> tensor_overrides;   // --override-tensor, in order
  bool recover = true;                            // false with --no-recover
  double reconnect_wait_s = 30;                   // --reconnect-wait
  std::vector<std::string> standby;               // --standby, after split_endpoints
  std::string draft_model;                        // --draft-model; empty: none
  std::string draft_device = "cpu";               // --draft-device
};

// The library's options for `setup`, without the printing: the servers' key
// and TLS files read, the split, threads, context and local use.
StatusOr<ModelOptions> model_options(const ModelSetup& setup);

// Opens setup.model and places it on its devices (tensorpc::Model::open),
// printing the model's size, the upload's progress, what the servers' weights
// caches spared and the placement table to `err`. A failure is one line,
// without the command's name.
StatusOr<Model> open_model(const ModelSetup& setup, std::FILE* err);
// The same for a model the caller opened (to read it before choosing setup.n_ctx, say).
StatusOr<Model> open_model(std::unique_ptr<LlamaModel> model, const ModelSetup& setup, std::FILE* err);

// The upload's progress bar: "loading weights: done / total (percent),
// speed, device" redrawn on one line of `err` (nullptr: silent) at most ten
// times a second, for ModelOptions::on_progress; while several servers take
// weights at once, each server's bytes and speed instead of the device.
class UploadProgress {
 public:
  explicit UploadProgress(std::FILE* err);
  // What ModelOptions::on_progress calls; the bar must outlive the open.
  std::function<void(uint64_t, uint64_t, const std::string&)> callback();
  // Ends the bar's line, once it has been drawn.
  void end();

 private:
  void draw(uint64_t done, uint64_t total, const std::string& device);

  std::FILE* err_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  uint64_t last_done_ = 0;
  // Bytes each server ("host:port", or "local") took so far; their uploads
  // all start with the load (ModelPlacement::create runs them at once).
  std::map<std::string, uint64_t> shares_;
  bool drawn_ = false;
};

// "1,1,2": one ratio per device, each finite and ≥ 0, not all 0. Anything
// else is an invalid_argument quoting the text.
StatusOr<std::vector<double>> parse_split(std::string_view text);

// "REGEX=DEVICE" (split at the last '='): a tensor override. No '=', an
// empty side, or a REGEX std::regex refuses is an invalid_argument naming
// --override-tensor, quoting the text (and std::regex's complaint).
StatusOr<TensorOverride> parse_tensor_override(std::string_view text);

// The whole of a text file (a prompt, a text to score); not_found or
// io_error naming the path.
StatusOr<std::string> read_text_file(const std::string& path);

// The placement flags, added to a command. The values are held here until
// the command's callback calls apply(); keep the object (a shared_ptr the
// callback captures) as long as the app.
class ModelSetupFlags {
 public:
  static std::shared_ptr<ModelSetupFlags> add_to(CLI::App& cmd);
  // The parsed flags into `setup` (local devices, endpoints, ratios, tensor
  // overrides, threads, local use, key and TLS files).
  void apply(ModelSetup& setup) const;

 private:
  std::vector<std::string> rpc_;
  std::string devices_ = "cpu";
  std::string split_;
  std::vector<std::string> overrides_;
  std::vector<std::string> standby_;
  double reconnect_wait_s_ = 30;
  bool no_recover_ = false;
  ClientFlags client_;
  int threads_ = 0;
  bool local_only_ = false;
  bool no_local_ = false;
};

}  // namespace tensorpc::tools
