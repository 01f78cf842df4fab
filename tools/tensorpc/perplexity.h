// `tensorpc perplexity -m MODEL -f TEXT`: how well a model predicts a text,
// measured as llama.cpp's llama-perplexity measures it (src/model/runtime/perplexity.h),
// on the local CPU and the devices of any servers given with --rpc, placed
// as `tensorpc run` places them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "model_setup.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

struct PerplexityCommandOptions {
  ModelSetup setup;       // the model and where it runs; setup.n_ctx is set from n_ctx
  std::string text_file;  // the text to score
  int64_t n_ctx = 0;      // tokens per chunk; 0: 512, or the model's context when smaller
  int64_t chunks = 0;     // at most this many chunks; 0: every chunk of the text
  // A base model (e.g. the f32 file a quantized model came from): when set,
  // also the KL divergence of the model's next-token distributions from the
  // base's. The base runs where the model runs.
  std::string kl_base;
};

// Runs the whole command: the result line (perplexity, its error, tokens,
// chunks), with kl_base the divergence line, and the speed to `out`; the placement, progress (a running
// estimate redrawn on a terminal, else a line per chunk) and errors to
// `err`. Returns the exit code: 0, or 1 on any failure, including a text
// shorter than two chunks.
int perplexity_command(const PerplexityCommandOptions& options, std::FILE* out, std::FILE* err);

// Adds the `perplexity` subcommand; when it runs, its exit code goes to *exit_code.
void add_perplexity_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
