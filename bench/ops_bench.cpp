// CPU ops other than mul_mat, next to a plain baseline measured in the same run:
//   - top_k over one row of logits (a decode step's sampling candidates) against
//     std::partial_sort of (value, index) pairs in the same order.
// Every iteration ranks a fresh row (one of 64 random rows): with the same row
// each time, branch predictors learn it and both look faster than on logits.
// Ends with a table of ratios (ours / baseline, times).
//
//   ./build/bench/ops_bench [--benchmark_filter=…]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_args.h"
#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/graph_allocator.h"

namespace {

using namespace tensorpc;

constexpr int kRows = 64;
// (vocabulary, k): a 32,000-token vocabulary, greedy with the default
// repetition penalty (65) and the default sampling chain (105); the bundled
// model's 2,048 tokens.
constexpr std::pair<int64_t, int64_t> kCases[] = {{32000, 65}, {32000, 105}, {2048, 65}, {2048, 105}};

std::vector<std::vector<float>> random_rows(int64_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(static_cast<size_t>(n)));
  for (auto& row : rows)
    for (float& x : row) x = dist(rng);
  return rows;
}

void BM_TopK(benchmark::State& state, int64_t n, int64_t k) {
  CpuDevice dev({.threads = 1});
  Context ctx;
  Tensor* logits = ctx.new_tensor(DType::f32, {n, 1}, "logits");
  logits->flags |= kFlagInput;
  Graph g = Graph::build({ctx.top_k(logits, static_cast<int>(k))});
  GraphAllocator alloc(dev);
  auto stream = dev.create_stream();
  if (!alloc.allocate(g).ok() || !stream.ok()) {
    state.SkipWithError("cannot place the graph");
    return;
  }
  const auto rows = random_rows(n);
  size_t r = 0;
  for (auto _ : state) {
    std::memcpy(logits->data, rows[r++ % kRows].data(), static_cast<size_t>(n) * sizeof(float));
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = stream.value()->compute(g);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
}

void BM_PartialSort(benchmark::State& state, int64_t n, int64_t k) {
  const auto rows = random_rows(n);
  std::vector<std::pair<float, int32_t>> ranked(static_cast<size_t>(n));
  size_t r = 0;
  for (auto _ : state) {
    const std::vector<float>& row = rows[r++ % kRows];
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i)
      ranked[static_cast<size_t>(i)] = {row[static_cast<size_t>(i)], static_cast<int32_t>(i)};
    std::partial_sort(ranked.begin(), ranked.begin() + k, ranked.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    benchmark::DoNotOptimize(ranked.data());
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
}

std::string case_name(int64_t n, int64_t k) { return std::to_string(n) + "/k" + std::to_string(k); }

// Keeps each benchmark's median time (µs) for the ratio table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "median") continue;
      std::string name = run.benchmark_name();
      if (const size_t at = name.find("/manual_time"); at != std::string::npos) name = name.substr(0, at);
      micros[name] = run.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> micros;
};

}  // namespace

int main(int argc, char** argv) {
  for (const auto& [n, k] : kCases) {
    benchmark::RegisterBenchmark(("top_k/" + case_name(n, k)).c_str(), BM_TopK, n, k)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("partial_sort/" + case_name(n, k)).c_str(), BM_PartialSort, n, k)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  // Three repetitions and their median by default, so one noisy run does not decide a ratio.
  std::vector<char*> args = tensorpc::bench::with_default_repetitions(argc, argv);
  int n_args = static_cast<int>(args.size());
  benchmark::Initialize(&n_args, args.data());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  std::printf("\nratios (one thread)           top_k us   partial_sort us   ratio (time)\n");
  for (const auto& [n, k] : kCases) {
    const auto ours = reporter.micros.find("top_k/" + case_name(n, k));
    const auto base = reporter.micros.find("partial_sort/" + case_name(n, k));
    if (ours == reporter.micros.end() || base == reporter.micros.end() || base->second <= 0) continue;
    std::printf("top_k %-20s %10.2f %17.2f %14.2f\n", case_name(n, k).c_str(), ours->second, base->second,
                ours->second / base->second);
  }
  benchmark::Shutdown();
  return 0;
}
