// `tensorpc demo`: the main job end to end. Two tensorpc-server processes on
// loopback ports with two CPU devices each; the bundled model spread over
// those four devices; greedy text streamed from them; then the same on the
// local CPU alone, and a check that both texts are the same. With the bundled
// models, then two turns of a chat with the BPE chat model, on the servers
// and locally, checked the same way.
#pragma once

#include <cstdio>
#include <string>

namespace CLI {
class App;
}

namespace tensorpc::tools {

struct DemoOptions {
  std::string model;  // default: the bundled models/kjv-tiny.gguf
  std::string prompt = "In the beginning";
  int n_predict = 48;
  std::string server_binary;  // default: tensorpc-server next to this executable
};

// The bundled model's path, fixed at build time, and the bundled chat model's beside it.
std::string bundled_model_path();
std::string bundled_chat_model_path();
std::string bundled_draft_model_path();  // kjv-bpe's draft model, beside it

// Runs the demo; returns 0 when the distributed text equals the local one,
// 1 on a mismatch or any failure (each named on `err`).
int demo_command(const DemoOptions& options, std::FILE* out, std::FILE* err);

void add_demo_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
