// What `tensorpc run` and `tensorpc perplexity` share before their work
// starts: the flags that say where a model runs (--rpc and the key and TLS
// flags, --split, -t, --local-only, --no-local), and one call that opens the
// model, connects the devices and places the model on them, printing what it
// does to stderr.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "api/placed_model.h"
#include "model/arch/llama_model.h"
#include "model/runtime/placement.h"
#include "tensorpc/devices.h"
#include "tensorpc/generation.h"

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
};

// A model placed on its devices (src/api/placed_model.h).
using tensorpc::PlacedModel;

// Opens setup.model, connects the devices, checks --split against them and
// places the model, printing the model's size, the upload's progress and the
// placement table to `err`. A failure is one line, without the command's name.
StatusOr<PlacedModel> place_model(const ModelSetup& setup, std::FILE* err);
// The same for a model the caller opened (to read it before choosing setup.n_ctx, say).
StatusOr<PlacedModel> place_model(std::unique_ptr<LlamaModel> model, const ModelSetup& setup, std::FILE* err);

// The whole of a text file (a prompt, a text to score); not_found or
// io_error naming the path.
StatusOr<std::string> read_text_file(const std::string& path);

// The placement flags, added to a command. The values are held here until
// the command's callback calls apply(); keep the object (a shared_ptr the
// callback captures) as long as the app.
class ModelSetupFlags {
 public:
  static std::shared_ptr<ModelSetupFlags> add_to(CLI::App& cmd);
  // The parsed flags into `setup` (endpoints, ratios, threads, local use, key and TLS files).
  void apply(ModelSetup& setup) const;

 private:
  std::vector<std::string> rpc_;
  std::string split_;
  ClientFlags client_;
  int threads_ = 0;
  bool local_only_ = false;
  bool no_local_ = false;
};

}  // namespace tensorpc::tools
