// `tensorpc serve -m MODEL [--rpc …]`: the model behind an OpenAI-compatible
// HTTP API and a web page (src/serve/http_server.h), its requests generated
// together in slots (src/serve/engine.h).
//
// The HTTP server listens first, answering 503 while the model loads; the
// model is then placed as `tensorpc run` places it, with a KV cache of
// --parallel × --ctx positions. SIGINT or SIGTERM stops it: requests in
// flight end, the servers' memory is freed as the connections close.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

#include "model_setup.h"
#include "sampling_flags.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

struct ServeOptions {
  ModelSetup setup;  // the model and where it runs; setup.n_ctx is per slot here
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int64_t n_batch = 64;
  int queue = 16;
  LookupFlags lookup;  // --lookup, --draft-max: each slot speculates (engine.h)
  std::string api_key;
  std::string api_key_file;
  std::string alias;          // the model's name in the API; empty: the file's name without .gguf
  std::string chat_template;  // --chat-template NAME; empty: the model's
  uint64_t max_body = 4u << 20;
  double header_timeout_s = 10;     // a request's headers whole within this from its first byte
  double keep_alive_timeout_s = 5;  // a connection with no request begun closes after this
  int max_connections = 1024;
  std::string http_cert, http_key;  // HTTPS
};

// Serves until `stop` is set (the command line sets it on SIGINT or SIGTERM).
// Prints where it listens to `out` once the model is ready; progress and
// errors to `err`. Returns the exit code: 0 after a stop, 1 when the address
// cannot be bound or the model cannot be loaded.
int serve_command(const ServeOptions& options, std::FILE* out, std::FILE* err, std::atomic<bool>* stop);

// Adds the `serve` subcommand; when it runs, its exit code goes to *exit_code.
void add_serve_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
