// Decode speed of llama models on the local CPU against the same model on
// tensorpc servers in this process: one server with one device that has all
// the threads, and two servers with two one-thread devices each (so the four
// devices have one thread each, and the local CPU gets two: the same cores).
//
// For each: tokens/s (median of a few runs), the ratio to local, the weight
// bytes read per second during decode against a plain memory-read loop
// measured in the same run (decode reads every weight once per token, so
// this says how far from memory-bound it is), and the round trips and client
// bytes per token. Models: the bundled one when present, and a random
// ~100 M-parameter llama in q8_0 and q4_0 written to /tmp.
//
// Usage: model_bench [--quick]   (--quick: fewer tokens, for smoke runs)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/format.h"
#include "lab/bench_measure.h"
#include "lab/bench_model.h"

namespace {

using namespace tensorpc;
using namespace tensorpc::tools;

constexpr int kThreads = 2;  // per configuration: the cores the local CPU and the servers share out

struct Config {
  const char* name;
  int servers;            // 0: local CPU
  int devices_per_server;
  int threads_per_device = kThreads;
};

struct Row {
  std::string model, config;
  double tps = 0, ratio = 0, weight_gbs = 0, round_trips = 0, client_bytes = 0;
};

// Decode speed and traffic of `c` (measure_generation, which `tensorpc
// bench` uses too); an error leaves the row's figures at 0.
Row measure(const LlamaModel& model, const Config& c, int n_predict, int reps) {
  Row row;
  row.config = c.name;
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::string> endpoints;
  for (int s = 0; s < c.servers; ++s) {
    auto server = start_loopback_server(c.devices_per_server, c.threads_per_device, {}, /*pin_threads=*/true);
    if (!server.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, server.status().to_string().c_str());
      return row;
    }
    endpoints.push_back(loopback_endpoint(*server.value()));
    servers.push_back(std::move(server).value());
  }
  const ModelBenchOptions options{.repetitions = reps, .n_predict = n_predict, .threads = kThreads};
  auto speed = measure_generation(model, endpoints, options);
  if (!speed.ok()) {
    std::fprintf(stderr, "%s: %s\n", c.name, speed.status().to_string().c_str());
    return row;
  }
  row.tps = speed->decode_tps;
  row.round_trips = speed->round_trips;
  row.client_bytes = speed->client_bytes;
  // Decode reads every weight once per token, except the embedding: one row.
  const double read = static_cast<double>(speed->weight_bytes - model.embedding_bytes());
  row.weight_gbs = read * row.tps / 1e9;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int n_predict = quick ? 9 : 33, reps = quick ? 1 : 3;
  const Config configs[] = {
      {"local cpu (2 threads)", 0, 0},
      {"1 server x 1 device (2 threads)", 1, 1},
      {"2 servers x 2 devices (1 thread each)", 2, 2, 1},
      {"2 servers x 2 devices (2 threads each)", 2, 2, 2},
  };
  const double mem = memory_read_gbs(kThreads);

  std::vector<std::pair<std::string, std::string>> models;  // label, path
  if (std::filesystem::exists(TENSORPC_BUNDLED_MODEL)) models.push_back({"kjv-tiny (bundled)", TENSORPC_BUNDLED_MODEL});
  for (DType type : {DType::q8_0, DType::q4_0}) {
    auto path = random_100m_model(type);  // the same file `tensorpc bench` uses
    if (!path.ok()) {
      std::fprintf(stderr, "random model: %s\n", path.status().to_string().c_str());
      return 1;
    }
    models.push_back({"random 100M " + std::string(name_of(type)), path.value()});
  }

  std::vector<Row> rows;
  for (const auto& [label, path] : models) {
    auto model = LlamaModel::open(path);
    if (!model.ok()) {
      std::fprintf(stderr, "cannot open %s: %s\n", path.c_str(), model.status().to_string().c_str());
      return 1;
    }
    double local = 0;
    for (const Config& c : configs) {
      Row r = measure(*model.value(), c, n_predict, reps);
      r.model = label + " (" + std::to_string(model.value()->parameter_count() / 1000000) + " M)";
      if (c.servers == 0) local = r.tps;
      r.ratio = local > 0 ? r.tps / local : 0;
      std::fprintf(stderr, "%-28s %-40s %8.1f tok/s\n", r.model.c_str(), r.config.c_str(), r.tps);
      rows.push_back(r);
    }
  }

  std::printf("\nmemory read loop (%d threads): %.2f GB/s\n", kThreads, mem);
  std::printf("decode, greedy, %d tokens, median of %d\n\n", n_predict, reps);
  std::printf("%-28s %-40s %9s %8s %12s %9s %10s %12s\n", "model", "devices", "tok/s", "vs local", "weights GB/s",
              "of mem", "RT/token", "bytes/token");
  for (const Row& r : rows) {
    std::printf("%-28s %-40s %9.1f %8.2f %12.2f %8.0f%% %10.1f %12s\n", r.model.c_str(), r.config.c_str(), r.tps,
                r.ratio, r.weight_gbs, 100.0 * r.weight_gbs / mem, r.round_trips, format_bytes(r.client_bytes).c_str());
  }
  return 0;
}
