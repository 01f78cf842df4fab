// Benchmarks for the CPU kernel tables, single-threaded:
//   - gemm_f32 at the prefill shapes (N = 64) next to OpenBLAS cblas_sgemm on the same problem;
//   - the gemm of every weight type at decode (N = 1), reporting the weight bytes streamed per
//     second (BM_Gemm<TYPE>Decode, the activations quantized inside the timed loop as the op does);
//   - f32 at batched decode's attention shapes, N = 8 or 16: one partial panel (BM_GemmF32PartialPanel);
//   - the same gemms at prefill (N = 64, K = M = 4096; BM_Gemm<TYPE>Prefill), and the ceiling of
//     the VNNI driver most formats' prefill runs on (BM_GemmDriverCeilingPrefill);
//   - a plain 1 GiB memory-read loop, the bandwidth reference for the decode numbers.
// Decode benchmarks rotate through enough copies of the weights (>= 512 MiB) that they come
// from DRAM, as in a real model, not from the last-level cache.
// TENSORPC_KERNELS=portable|avx2|avx512 selects the table, as in the runtime.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/kernels.h"
// The VNNI driver, for its ceiling below, where this file is built for a CPU that has it.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)
#define TENSORPC_BENCH_HAS_DRIVER 1
#include "cpu/immintrin_quiet.h"
#include "cpu/kernels_avx512_codes.h"
#endif
#include "openblas_core.h"
#include "tensorpc/dtype.h"

extern "C" void openblas_set_num_threads(int);

namespace tensorpc {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void set_gemm_counters(benchmark::State& state, double flops, double weight_bytes) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] =
      benchmark::Counter(weight_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---------------------------------------------------------------------------------------------
// Prefill: C[64 x M] = B[64 x K] * A[M x K]^T.

// The table's gemm_f32 on K x M weights and N activation rows, from the cache.
void run_gemm_f32(benchmark::State& state, int64_t K, int64_t M, int64_t N) {
  const auto A = random_floats(M * K, 1);
  const auto B = random_floats(N * K, 2);
  std::vector<float> C(M * N);
  const cpu::KernelTable& t = cpu::best_kernels();
  state.SetLabel(t.name);
  for (auto _ : state) {
    t.gemm_f32(K, M, N, A.data(), K * 4, B.data(), K * 4, C.data(), M);
    benchmark::DoNotOptimize(C.data());
  }
  set_gemm_counters(state, 2.0 * M * N * K, 4.0 * M * K);
}

void BM_GemmF32Prefill(benchmark::State& state) { run_gemm_f32(state, state.range(0), state.range(1), 64); }

void BM_CblasSgemmPrefill(benchmark::State& state) {
  const int64_t K = state.range(0), M = state.range(1), N = 64;
  const auto A = random_floats(M * K, 1);
  const auto B = random_floats(N * K, 2);
  std::vector<float> C(M * N);
  openblas_set_num_threads(1);
  for (auto _ : state) {
    // Column-major C (M x N) = A^T-stored (K x M, transposed) * B (K x N): the same layout.
    cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.0f, A.data(), static_cast<int>(K), B.data(), static_cast<int>(K), 0.0f, C.data(),
                static_cast<int>(M));
    benchmark::DoNotOptimize(C.data());
  }
  set_gemm_counters(state, 2.0 * M * N * K, 4.0 * M * K);
}

// Batched decode's attention: N = 8 or 16 query rows (one partial 64-column panel) against a head
// of the f32 KV cache, K the head dim and M the positions (keys), or the other way (values).
void BM_GemmF32PartialPanel(benchmark::State& state) {
  run_gemm_f32(state, state.range(0), state.range(1), state.range(2));
}
BENCHMARK(BM_GemmF32PartialPanel)
    ->Args({64, 256, 8})
    ->Args({256, 64, 8})
    ->Args({64, 256, 16})
    ->Args({128, 2048, 8})
    ->ArgNames({"K", "M", "N"})
    ->Unit(benchmark::kMicrosecond);

#define PREFILL_SHAPES Args({4096, 4096})->Args({1024, 2816})->Args({2816, 1024})
BENCHMARK(BM_GemmF32Prefill)->PREFILL_SHAPES->ArgNames({"K", "M"})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CblasSgemmPrefill)->PREFILL_SHAPES->ArgNames({"K", "M"})->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------------
// Decode: one activation row against a weight matrix in each format.

// Weight rows of one matrix of `type` (bytes). Quantizing is slow for the K formats, so at most
// kDistinctRows rows are quantized and the rest repeat them: the kernels' speed does not depend
// on the values.
std::vector<uint8_t> make_weights(DType type, int64_t K, int64_t M) {
  constexpr int64_t kDistinctRows = 64;
  const int64_t distinct = std::min(M, kDistinctRows);
  const auto f = random_floats(distinct * K, 3);
  const size_t row = row_bytes(type, K);
  std::vector<uint8_t> out(M * row);
  traits(type).from_float(f.data(), out.data(), distinct * K);
  for (int64_t i = distinct; i < M; ++i) std::memcpy(out.data() + i * row, out.data() + (i % distinct) * row, row);
  return out;
}

template <DType W>
void BM_GemmDecode(benchmark::State& state) {
  const int64_t K = state.range(0), M = state.range(1);
  const std::vector<uint8_t> one = make_weights(W, K, M);
  const size_t row = row_bytes(W, K);
  const size_t copies = std::max<size_t>(2, (size_t{512} << 20) / one.size() + 1);
  std::vector<uint8_t> pool(copies * one.size());
  for (size_t c = 0; c < copies; ++c) std::memcpy(pool.data() + c * one.size(), one.data(), one.size());

  const auto x = random_floats(K, 4);
  const cpu::KernelTable& t = cpu::best_kernels();
  const DType vtype = cpu::vec_dot_type(W);
  std::vector<uint8_t> xq(row_bytes(vtype, K));
  const cpu::GemmFn fn = cpu::gemm_for(t, W);
  std::vector<float> y(M);
  state.SetLabel(t.name);
  size_t c = 0;
  for (auto _ : state) {
    const void* B = x.data();
    if (vtype != DType::f32) {  // activations are quantized per call, as the op does
      cpu::quantize_activations(t, vtype, x.data(), xq.data(), K);
      B = xq.data();
    }
    fn(K, M, 1, pool.data() + c * one.size(), row, B, xq.size(), y.data(), M);
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  set_gemm_counters(state, 2.0 * M * K, static_cast<double>(one.size()));
}

#define DECODE_SHAPES Args({4096, 4096})->Args({1024, 2816})->Args({2816, 1024})
#define DECODE_BENCHMARK(type, name) \
  BENCHMARK(BM_GemmDecode<DType::type>)->Name("BM_Gemm" name "Decode")->DECODE_SHAPES->ArgNames({"K", "M"})
DECODE_BENCHMARK(q4_0, "Q4_0");
DECODE_BENCHMARK(q8_0, "Q8_0");
DECODE_BENCHMARK(f16, "F16");
DECODE_BENCHMARK(f32, "F32");
DECODE_BENCHMARK(bf16, "BF16");
DECODE_BENCHMARK(q4_1, "Q4_1");
DECODE_BENCHMARK(q5_0, "Q5_0");
DECODE_BENCHMARK(q5_1, "Q5_1");
DECODE_BENCHMARK(iq4_nl, "IQ4_NL");
DECODE_BENCHMARK(q2_K, "Q2_K");
DECODE_BENCHMARK(q3_K, "Q3_K");
DECODE_BENCHMARK(q4_K, "Q4_K");
DECODE_BENCHMARK(q5_K, "Q5_K");
DECODE_BENCHMARK(q6_K, "Q6_K");
DECODE_BENCHMARK(iq4_xs, "IQ4_XS");

// Prefill: N = 64 activation rows against the same weights (from cache: prefill is compute-bound).
// Each unpacked weight block feeds several rows, so weight GB/s here is far above decode's.
template <DType W>
void BM_GemmPrefill(benchmark::State& state) {
  const int64_t K = state.range(0), M = state.range(1), N = 64;
  const std::vector<uint8_t> weights = make_weights(W, K, M);
  const auto x = random_floats(N * K, 4);
  const cpu::KernelTable& t = cpu::best_kernels();
  const DType vtype = cpu::vec_dot_type(W);
  const size_t ldb = vtype == DType::f32 ? K * 4 : row_bytes(vtype, K);
  std::vector<uint8_t> xq(N * ldb);
  const cpu::GemmFn fn = cpu::gemm_for(t, W);
  std::vector<float> y(M * N);
  state.SetLabel(t.name);
  for (auto _ : state) {
    const void* B = x.data();
    if (vtype != DType::f32) {  // activations are quantized per call, as the op does
      for (int64_t j = 0; j < N; ++j) cpu::quantize_activations(t, vtype, x.data() + j * K, xq.data() + j * ldb, K);
      B = xq.data();
    }
    fn(K, M, N, weights.data(), row_bytes(W, K), B, ldb, y.data(), M);
    benchmark::DoNotOptimize(y.data());
  }
  set_gemm_counters(state, 2.0 * M * N * K, static_cast<double>(weights.size()));
}

#define PREFILL_BENCHMARK(type, name)    \
  BENCHMARK(BM_GemmPrefill<DType::type>) \
      ->Name("BM_Gemm" name "Prefill")   \
      ->Args({4096, 4096})               \
      ->Args({1024, 2816})               \
      ->Args({2816, 1024})               \
      ->ArgNames({"K", "M"})             \
      ->Unit(benchmark::kMillisecond)
PREFILL_BENCHMARK(q4_0, "Q4_0");
PREFILL_BENCHMARK(q8_0, "Q8_0");
PREFILL_BENCHMARK(bf16, "BF16");
PREFILL_BENCHMARK(q4_1, "Q4_1");
PREFILL_BENCHMARK(q5_0, "Q5_0");
PREFILL_BENCHMARK(q5_1, "Q5_1");
PREFILL_BENCHMARK(iq4_nl, "IQ4_NL");
PREFILL_BENCHMARK(q2_K, "Q2_K");
PREFILL_BENCHMARK(q3_K, "Q3_K");
PREFILL_BENCHMARK(q4_K, "Q4_K");
PREFILL_BENCHMARK(q5_K, "Q5_K");
PREFILL_BENCHMARK(q6_K, "Q6_K");
PREFILL_BENCHMARK(iq4_xs, "IQ4_XS");

// ---------------------------------------------------------------------------------------------
// The ceiling of the VNNI driver's prefill panels (src/cpu/kernels_avx512_codes.h), which every
// block format runs: the same panels from a made-up format whose groups hold 256 codes already
// unpacked and arranged, and their 16 lane scales, so loading a group costs five loads, and with
// neither offset nor min and a scale per 32 values the dot product is the cheapest any format has
// (eight vpdpbusd, a conversion, a multiply and a multiply-add per 32 values, 16 weight rows and
// activation row). A format's prefill against this says what its unpacking costs; a format whose
// groups are fewer bytes than these 320 can pass it by reading less. (The lanes a scale pairs get
// different random scales: the products are not checked.)

#if TENSORPC_BENCH_HAS_DRIVER

struct PreArranged {
  static constexpr cpu::ChunkMap kChunks = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlocks32 = false;
  static constexpr bool kScale32 = true;  // one scale per 32 values
  static constexpr cpu::Arrange kArrange = cpu::Arrange::kNone;
  static constexpr size_t kBlockBytes = 256 + 64;  // codes, then 16 float scales

  static cpu::WeightCodes load(const uint8_t* p) {
    cpu::WeightCodes w;
    for (int r = 0; r < 4; ++r) w.u[r] = _mm512_loadu_si512(p + 64 * r);
    w.scale = _mm512_loadu_ps(p + 256);
    w.min = _mm512_setzero_ps();
    return w;
  }
};

void BM_GemmDriverCeilingPrefill(benchmark::State& state) {
  const int64_t K = state.range(0), M = state.range(1), N = 64;
  const int64_t groups = K / 256;
  std::vector<uint8_t> weights(static_cast<size_t>(M * groups) * PreArranged::kBlockBytes);
  std::mt19937 rng(5);
  for (size_t g = 0; g < weights.size() / PreArranged::kBlockBytes; ++g) {
    uint8_t* p = weights.data() + g * PreArranged::kBlockBytes;
    for (int k = 0; k < 256; ++k) p[k] = static_cast<uint8_t>(rng() % 16);
    for (int l = 0; l < 16; ++l) {
      const float scale = 0.01f * static_cast<float>(rng() % 64);
      std::memcpy(p + 256 + 4 * l, &scale, 4);
    }
  }
  const auto x = random_floats(N * K, 4);
  const cpu::KernelTable& t = cpu::best_kernels();
  const size_t ldb = row_bytes(DType::q8_K, K);
  std::vector<uint8_t> xq(N * ldb);
  std::vector<float> y(M * N);
  for (auto _ : state) {
    for (int64_t j = 0; j < N; ++j) cpu::quantize_activations(t, DType::q8_K, x.data() + j * K, xq.data() + j * ldb, K);
    cpu::gemm_codes<PreArranged>(K, M, N, weights.data(), groups * PreArranged::kBlockBytes, xq.data(), ldb, y.data(),
                                 M);
    benchmark::DoNotOptimize(y.data());
  }
  set_gemm_counters(state, 2.0 * M * N * K, static_cast<double>(weights.size()));
}
BENCHMARK(BM_GemmDriverCeilingPrefill)
    ->PREFILL_SHAPES
    ->ArgNames({"K", "M"})
    ->Unit(benchmark::kMillisecond);
#endif

// ---------------------------------------------------------------------------------------------
// Memory-read reference: sum a 1 GiB buffer. The buffer is split into `streams` equal parts
// read side by side (the decode kernels also read several weight rows at once); one stream
// alone leaves DRAM bandwidth unused on many cores, so the best row is the fair reference.

template <int S>
uint64_t sum_streams(const std::vector<uint64_t>& buf) {
  const size_t per = buf.size() / S;
  uint64_t acc[S][8] = {};
  for (size_t i = 0; i < per; i += 8)
    for (int s = 0; s < S; ++s)
      for (int l = 0; l < 8; ++l) acc[s][l] += buf[s * per + i + l];
  uint64_t sum = 0;
  for (const auto& a : acc)
    for (uint64_t v : a) sum += v;
  return sum;
}

void BM_MemoryRead(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  std::vector<uint64_t> buf(bytes / sizeof(uint64_t), 1);
  for (auto _ : state) {
    uint64_t sum = 0;
    switch (state.range(0)) {
      case 1: sum = sum_streams<1>(buf); break;
      case 4: sum = sum_streams<4>(buf); break;
      default: sum = sum_streams<8>(buf); break;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MemoryRead)->ArgName("streams")->Arg(1)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensorpc

int main(int argc, char** argv) {
  ensure_openblas_coretype(argv);
  std::printf("OpenBLAS core: %s\n", openblas_get_corename());
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
