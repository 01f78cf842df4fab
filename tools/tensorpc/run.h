// `tensorpc run`: generates text from a GGUF model on the local CPU
// and the devices of any tensorpc servers given with --rpc.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "model_setup.h"
#include "sampling_flags.h"
#include "tensorpc/model.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

struct RunOptions {
  ModelSetup setup;  // the model and where it runs
  std::string prompt;
  std::string prompt_file;  // -f: the prompt from a file instead of -p
  int n_predict = 64;
  SamplingOptions sampler;     // the library's defaults are the command line's
  LookupFlags lookup;          // --lookup, --draft-max
  bool special = false;        // --special: control-token text in the prompt is that token, and control tokens print
  bool show_schedule = false;  // --show-schedule: the plan (node -> device, splits, copies) after the run
  std::string awake_cores;     // --awake-cores: the CPU latency file to hold while running (awake_cores.h)
  std::string grammar_file;    // --grammar: a GBNF grammar the text follows
  std::string json_schema_file;  // --json-schema: a JSON Schema the text follows
};

// Runs the whole command: text to `out`, placement, progress, speed and
// errors to `err`. Returns the exit code (0, or 1 on any failure).
int run_command(const RunOptions& options, std::FILE* out, std::FILE* err);

// Prompt and generation speed, and the client traffic per generated token
// when servers took part: what `run` and `demo` print after the text.
void print_speed(const Generation& g, std::FILE* out);

// Adds the `run` subcommand; when it runs, its exit code goes to *exit_code.
void add_run_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
