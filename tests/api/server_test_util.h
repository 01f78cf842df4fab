// Helpers of the tests that generate over tensorpc-servers and compare with
// the local CPU: a server on an OS-chosen loopback port, a model's options
// (local, or on two servers alone), greedy generation, a row of the placement
// table; and the settings the mixture-of-experts tests share.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server_process.h"
#include "tensorpc/model.h"

namespace tensorpc::test {

// A server of one CPU thread; null (and a failure) when it does not start.
inline std::unique_ptr<tools::ServerProcess> start_cpu_server() {
  auto p = tools::ServerProcess::start(TENSORPC_SERVER_BINARY, {"--device", "cpu:1"}, std::chrono::seconds(30));
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : nullptr;
}

// The model at `path` on the local CPU, one thread.
inline ModelOptions local_options(const std::string& path, int64_t context_size) {
  ModelOptions o;
  o.path = path;
  o.threads = 1;
  o.context_size = context_size;
  o.remote.key = "";  // these servers have none, whatever the environment says
  return o;
}

// `o` on the servers a and b alone, its layers split between them by `split`.
inline ModelOptions on_servers(ModelOptions o, const tools::ServerProcess& a, const tools::ServerProcess& b,
                               std::vector<double> split) {
  o.servers = {a.endpoint(), b.endpoint()};
  o.use_local_cpu = false;
  o.split = std::move(split);
  return o;
}

inline GenerationOptions greedy(int max_tokens) {
  GenerationOptions g;
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0;
  g.stop_at_end = false;  // every step, so the comparison covers all of them
  return g;
}

// The greedy text of `o` from `prompt`; "" (and a failure) when it cannot run.
inline std::string greedy_text(const ModelOptions& o, const std::string& prompt, int max_tokens) {
  auto model = Model::open(o);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  auto r = model.value().generate(prompt, greedy(max_tokens));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value().text : std::string();
}

// The row of a placement table (ModelInfo::placement) that begins with
// `pattern` and a space; "" when there is none.
inline std::string placement_row(const std::string& placement, const std::string& pattern) {
  const size_t row = placement.find("\n" + pattern + " ");
  if (row == std::string::npos) return {};
  return placement.substr(row + 1, placement.find('\n', row + 1) - row - 1);
}

// The mixture-of-experts tests: 16 tokens from "the beginning", a context of 64.
constexpr int kMoeTokens = 16;
inline const std::string kMoePrompt = "the beginning";
inline ModelOptions moe_options(const std::string& path) { return local_options(path, 64); }
inline std::string moe_text(const ModelOptions& o) { return greedy_text(o, kMoePrompt, kMoeTokens); }

}  // namespace tensorpc::test
