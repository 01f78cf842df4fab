// mul_mat on the CPU device at decode (N=1) and prefill (N=64) shapes, with
// its baselines measured in the same run: OpenBLAS cblas_sgemm for the f32
// shapes, and a plain multi-threaded memory-read loop for weight bandwidth.
// Ends with a table of ratios (ours / baseline). One more shape, 4096 x 14336
// at N=1 and N=512 (a 7-8 B model's feed-forward, the shape ggml's
// `test-backend-ops perf -o MUL_MAT` times, one weight tensor over and over),
// is for comparing with other runtimes' kernels (docs/performance.md); it has
// no ratio of its own.
//
//   ./build/bench/mul_mat_bench [--benchmark_min_time=0.5] [--benchmark_filter=…]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/graph_allocator.h"
#include "openblas_core.h"

namespace {

using namespace tensorpc;

int bench_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

struct Shape {
  int64_t k, m;
};
constexpr Shape kShapes[] = {{4096, 4096}, {1024, 2816}};
constexpr Shape kWideShape = {14336, 4096};
constexpr DType kWideTypes[] = {DType::f32, DType::f16, DType::q8_0, DType::q4_0, DType::q4_K, DType::q6_K};
constexpr DType kTypes[] = {DType::f32, DType::f16, DType::q8_0, DType::q4_0};

// mul_mat graphs on a CPU device with random weights and activations. At
// decode (N=1) the weights are spread over enough copies (512 MiB in all) that
// they come from memory, not from the last-level cache, as in a real model;
// each iteration multiplies by the next copy. The comparison shape keeps one
// copy, as ggml's perf mode does, so that both sides run alike.
struct MulMatSetup {
  static constexpr uint64_t kDecodeWorkingSet = uint64_t{512} << 20;

  CpuDevice device{{.threads = bench_threads()}};
  Context ctx;
  std::unique_ptr<Buffer> weights;
  std::unique_ptr<Buffer> io;
  std::unique_ptr<Stream> stream;
  std::vector<Graph> graphs;
  uint64_t weight_bytes = 0;

  MulMatSetup(DType type, Shape s, int64_t n, bool spread) {
    Tensor* first = ctx.new_tensor(type, {s.k, s.m});
    weight_bytes = first->nbytes();
    const uint64_t stride = (weight_bytes + 63) / 64 * 64;
    const uint64_t copies = n == 1 && spread ? std::max<uint64_t>(1, kDecodeWorkingSet / stride) : 1;
    weights = device.allocate(stride * copies).value();
    Tensor* b = ctx.new_tensor(DType::f32, {s.k, n});
    Tensor* out = ctx.new_tensor(DType::f32, {s.m, n});
    io = device.allocate((b->nbytes() + 63) / 64 * 64 + out->nbytes()).value();
    check(io->place(*b, 0));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (Tensor* t : {first, b}) {
      if (t == first) check(weights->place(*t, 0));
      std::vector<float> v(static_cast<size_t>(t->nelements()));
      for (float& x : v) x = dist(rng);
      check(write_from_f32(*t, v));
    }
    for (uint64_t i = 0; i < copies; ++i) {
      Tensor* a = first;
      if (i > 0) {
        a = ctx.like(first);
        check(weights->place(*a, i * stride));
        check(weights->copy(*first, *a));
      }
      Tensor* dst = ctx.mul_mat(a, b);
      check(io->place(*dst, (b->nbytes() + 63) / 64 * 64));
      graphs.push_back(Graph::build({dst}));
    }
    stream = device.create_stream().value();
  }

  static void check(const Status& s) {
    if (!s.ok()) throw Error(s);
  }
};

void BM_MulMat(benchmark::State& state, DType type, Shape s, int64_t n, bool spread) {
  MulMatSetup setup(type, s, n, spread);
  size_t next = 0;
  for (auto _ : state) {
    if (!setup.stream->compute(setup.graphs[next]).ok()) state.SkipWithError("compute failed");
    next = (next + 1) % setup.graphs.size();
  }
  const double flops = 2.0 * static_cast<double>(s.k * s.m * n);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weights_GB/s"] =
      benchmark::Counter(static_cast<double>(setup.weight_bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// C[n][m] = sum_k B[n][k] A[m][k]: the same product, row-major, as mul_mat computes.
void BM_OpenBLAS(benchmark::State& state, Shape s, int64_t n) {
  openblas_set_num_threads(bench_threads());
  std::vector<float> a(static_cast<size_t>(s.k * s.m)), b(static_cast<size_t>(s.k * n)), c(static_cast<size_t>(s.m * n));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(s.m),
                static_cast<int>(s.k), 1.0f, b.data(), static_cast<int>(s.k), a.data(), static_cast<int>(s.k), 0.0f,
                c.data(), static_cast<int>(s.m));
    benchmark::DoNotOptimize(c.data());
  }
  const double flops = 2.0 * static_cast<double>(s.k * s.m * n);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Every thread sums its share of a 1 GiB buffer: the machine's read
// bandwidth. One stream per core under-states what the memory system gives
// (too few misses in flight), so it also runs with more streams and the
// ratios use the best.
void BM_MemoryRead(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  const int nth = static_cast<int>(state.range(0));
  std::vector<uint64_t> buf(bytes / 8, 1);
  std::vector<uint64_t> sums(static_cast<size_t>(nth) * 8);
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int t = 0; t < nth; ++t) {
      threads.emplace_back([&, t] {
        const size_t per = buf.size() / static_cast<size_t>(nth);
        const uint64_t* p = buf.data() + per * static_cast<size_t>(t);
        uint64_t s = 0;
        for (size_t i = 0; i < per; ++i) s += p[i];
        sums[static_cast<size_t>(t) * 8] = s;
      });
    }
    for (auto& th : threads) th.join();
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

std::string shape_name(Shape s, int64_t n) {
  return std::to_string(s.m) + "x" + std::to_string(s.k) + "/N" + std::to_string(n);
}

// Collects counters so main() can print ratios after the run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  // Keeps the median of repeated runs, or the single run when not repeated.
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (r.run_type == Run::RT_Aggregate && !median) continue;
      for (const auto& [key, counter] : r.counters) {
        const std::string k = r.run_name.str() + "|" + key;
        if (median || !values.count(k)) values[k] = counter.value;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> values;
};

}  // namespace

int main(int argc, char** argv) {
  ensure_openblas_coretype(argv);
  std::printf("OpenBLAS core: %s, config: %s\n", openblas_get_corename(), openblas_get_config());
  benchmark::RegisterBenchmark("memory_read/1GiB", BM_MemoryRead)
      ->Arg(bench_threads())
      ->Arg(4 * bench_threads())
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  const auto add_mul_mat = [](DType t, Shape s, int64_t n, bool spread) {
    benchmark::RegisterBenchmark(("mul_mat/" + std::string(name_of(t)) + "/" + shape_name(s, n)).c_str(), BM_MulMat,
                                 t, s, n, spread)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  };
  for (Shape s : kShapes) {
    for (int64_t n : {int64_t{1}, int64_t{64}}) {
      for (DType t : kTypes) add_mul_mat(t, s, n, /*spread=*/true);
      if (n == 64) {
        benchmark::RegisterBenchmark(("openblas_sgemm/" + shape_name(s, n)).c_str(), BM_OpenBLAS, s, n)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
  for (int64_t n : {int64_t{1}, int64_t{512}}) {
    for (DType t : kWideTypes) add_mul_mat(t, kWideShape, n, /*spread=*/false);
  }
  // Three repetitions and their median by default, so one noisy run does not decide a ratio.
  std::vector<char*> args = tensorpc::bench::with_default_repetitions(argc, argv);
  int n_args = static_cast<int>(args.size());
  benchmark::Initialize(&n_args, args.data());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  const auto get = [&](const std::string& key) {
    auto it = reporter.values.find(key);
    return it == reporter.values.end() ? 0.0 : it->second;
  };
  const double mem = std::max(get("memory_read/1GiB/" + std::to_string(bench_threads()) + "/real_time|GB/s"),
                              get("memory_read/1GiB/" + std::to_string(4 * bench_threads()) + "/real_time|GB/s"));
  std::printf("\nratios (%d threads)                     value    baseline   ratio   target\n", bench_threads());
  for (Shape s : kShapes) {
    const double ours = get("mul_mat/f32/" + shape_name(s, 64) + "/real_time|GFLOP/s");
    const double blas = get("openblas_sgemm/" + shape_name(s, 64) + "/real_time|GFLOP/s");
    if (ours > 0 && blas > 0) {
      std::printf("f32 prefill %-16s GFLOP/s %8.1f %10.1f %7.2f   >= 0.80\n", shape_name(s, 64).c_str(), ours, blas,
                  ours / blas);
    }
    for (DType t : {DType::q8_0, DType::q4_0}) {
      const double gbs = get("mul_mat/" + std::string(name_of(t)) + "/" + shape_name(s, 1) + "/real_time|weights_GB/s");
      if (gbs > 0 && mem > 0) {
        std::printf("%-4s decode %-16s GB/s    %8.1f %10.1f %7.2f   >= 0.50\n", name_of(t), shape_name(s, 1).c_str(),
                    gbs, mem, gbs / mem);
      }
    }
  }
  benchmark::Shutdown();
  return 0;
}
