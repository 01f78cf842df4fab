// `tensorpc quantize IN.gguf OUT.gguf TYPE [-t N]`: writes a quantized copy
// of a GGUF model with the per-tensor mix TYPE names (src/model/quantize/quantize_mix.h),
// a standard GGUF file any GGUF runtime loads.
#pragma once

#include <cstdio>
#include <string>

namespace CLI {
class App;
}

namespace tensorpc::tools {

struct QuantizeCommandOptions {
  std::string input;
  std::string output;
  std::string type;  // a mix name, any case: "Q4_K_M"
  int threads = 0;   // 0: every core
};

// Runs the whole command: the summary to `out`; fallbacks, progress and
// errors to `err` (a redrawn bar when `err` is a terminal, else a line per
// tensor). Returns 0; 2 for an unknown TYPE (a usage error); 1 for any
// other failure — a missing or invalid input, OUT naming IN, a failed write —
// which leaves no output file behind.
int quantize_command(const QuantizeCommandOptions& options, std::FILE* out, std::FILE* err);

// Adds the `quantize` subcommand; when it runs, its exit code goes to *exit_code.
void add_quantize_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
