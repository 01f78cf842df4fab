// The "avx512" kernel table (AVX-512 F/BW/VL/DQ + VNNI, F16C, FMA), for Sapphire Rapids-class CPUs.
//
// gemm_f32/f16 (kernels_avx512_float_tiles.h, as gemm_bf16), N large: a register-tiled product
//   that broadcasts weights and loads packed activations. B is packed once per call into K x 64
//   column panels; each micro-kernel call multiplies 6 weight rows by a 64-column panel slice of
//   128 k-steps (24 zmm accumulators) and accumulates into a small row-major tile that is
//   transposed into C at the end. Weights are not packed (f32 rows are read in place, f16 rows
//   widened a slice at a time): with N = 64 each weight is used only a few dozen times, so
//   transposing them would cost as much as the FMAs it feeds.
// gemm_f32/f16, N small: dot products along K, four rows at once.
// gemm_q8_0/q4_0: VNNI dot products on 4 blocks per step for decode (N = 1), one weight row at
//   a time (one read stream); more activation rows go to the weight panels of the VNNI driver the
//   other block formats share (gemm_q8_0_tiles, gemm_q4_0_tiles). Activation blocks are re-laid out
//   once per call so that each weight group needs only loads, a permute and nibble masks; the
//   signed x signed problem becomes unsigned x signed with a per-block bias (see PreparedQ8).
// Scratch memory (aligned.h) is allocated once per gemm call: calls run on many threads at
//   once, so nothing is shared.
#include "cpu/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include "cpu/immintrin_quiet.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/float16.h"
#include "core/quant.h"
#include "cpu/aligned.h"
#include "cpu/kernels_avx512_float_tiles.h"
#include "cpu/kernels_avx512_quant.h"
#include "cpu/kernels_avx512_sums.h"
#include "cpu/kernels_portable_quant.h"
#include "cpu/kernels_table_setup.h"
#include "cpu/kernels_tile_loops.h"

namespace tensorpc::cpu {
namespace {

// ---------------------------------------------------------------------------------------------
// Activation quantization.

void quantize_q8_0(const float* x, void* vy, int64_t n) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const __m512 v0 = _mm512_loadu_ps(x);
    const __m512 v1 = _mm512_loadu_ps(x + 16);
    const float amax = hmax_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    // Same scalar d and 1/d as the reference, so only exact .5 ties can round differently.
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    const __m512 s = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, s));  // MXCSR: nearest-even
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, s));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16), _mm512_cvtsepi32_epi8(q1));
  }
}

// ---------------------------------------------------------------------------------------------
// Quantized kernels. Work goes in groups of 4 blocks (128 values).
//
// VNNI multiplies unsigned by signed bytes, so weights are offset to be unsigned:
//   q4_0: nibble n = w + 8,    sum w*x = sum n*x - 8 * sum x
//   q8_0: byte   u = w + 128,  sum w*x = sum u*x - 128 * sum x
// sum x depends only on the activation block, so the prepared activations carry
// -offset * sum x as the starting value of the integer accumulator ("bias").

constexpr int64_t kGroup = 4;

// Activations for both weight formats, in the layout their weight groups load into (Halves):
// lane group L (128 bits) of lo/hi holds values [0,16) and [16,32) of block L.
template <int kOffset>  // what the weights are offset by to be unsigned
struct alignas(64) PreparedHalves {
  int8_t lo[64];
  int8_t hi[64];
  float d[16];       // scale of block L in lanes 4L..4L+3
  int32_t bias[16];  // -kOffset * sum(qs) of block L in lane 4L
};
using PreparedQ8ForQ4 = PreparedHalves<8>;
using PreparedQ8ForQ8 = PreparedHalves<128>;

int32_t sum_qs(const BlockQ8_0& b) {
  int32_t s = 0;
  for (int8_t q : b.qs) s += q;
  return s;
}

template <int kOffset>
void prepare(const BlockQ8_0* x, int64_t nb, PreparedHalves<kOffset>* out) {
  std::memset(static_cast<void*>(out), 0, sizeof(PreparedHalves<kOffset>) * ((nb + kGroup - 1) / kGroup));
  for (int64_t b = 0; b < nb; ++b) {
    PreparedHalves<kOffset>& g = out[b / kGroup];
    const int L = static_cast<int>(b % kGroup);
    std::memcpy(g.lo + 16 * L, x[b].qs, 16);
    std::memcpy(g.hi + 16 * L, x[b].qs + 16, 16);
    for (int u = 0; u < 4; ++u) g.d[4 * L + u] = fp16_to_fp32(x[b].d);
    g.bias[4 * L] = -kOffset * sum_qs(x[b]);
  }
}

// Word indices into [group bytes 0..64) ++ [group bytes 56..72) picking the 4 x 16 qs bytes.
alignas(64) constexpr uint16_t kQ4QsIdx[32] = {1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12, 13, 14, 15, 16, 17,
                                               19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 30, 31, 36, 37, 38, 39};
// Word indices picking each block's f16 scale 4 times (lanes 4L..4L+3).
alignas(64) constexpr uint16_t kQ4ScaleIdx[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27,
                                                  0, 0, 0, 0, 0, 0, 0, 0, 0,  0,  0,  0,  0,  0,  0,  0};
// Word indices into [group bytes 0..64) ++ [group bytes 68..132) picking each q8_0 scale 4 times.
alignas(64) constexpr uint16_t kQ8ScaleIdx[32] = {0, 0, 0, 0, 17, 17, 17, 17, 32, 32, 32, 32, 49, 49, 49, 49,
                                                  0, 0, 0, 0, 0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0};

// A group of 4 weight blocks as unsigned bytes, lane group L = block L: values [0,16) in lo,
// [16,32) in hi, so that one product with PreparedHalves serves all 4 blocks.
struct Halves {
  __m512i lo, hi;
  __m512 d;  // weight scales per lane
};

// g points at 4 consecutive BlockQ4_0 (72 bytes, all readable).
inline Halves load_q4_group(const uint8_t* g) {
  const __m512i x0 = _mm512_loadu_si512(g);
  const __m512i x1 = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 56)));
  const __m512i qs = _mm512_permutex2var_epi16(x0, _mm512_load_si512(kQ4QsIdx), x1);
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const __m512i d16 = _mm512_permutexvar_epi16(_mm512_load_si512(kQ4ScaleIdx), x0);
  return {_mm512_and_si512(qs, nib), _mm512_and_si512(_mm512_srli_epi16(qs, 4), nib),
          _mm512_cvtph_ps(_mm512_castsi512_si256(d16))};
}

// g points at 4 consecutive BlockQ8_0 (136 bytes, all readable). Each block is loaded whole and
// the 128-bit lanes regrouped into halves: one conversion to float and one FMA then serve 4
// blocks instead of 2 (docs/performance.md, "Against the reference's CPU kernels").
inline Halves load_q8_group(const uint8_t* g) {
  auto ld32 = [g](int off) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + off)); };
  const __m512i q01 = _mm512_inserti64x4(_mm512_castsi256_si512(ld32(2)), ld32(36), 1);    // 0 lo, 0 hi, 1 lo, 1 hi
  const __m512i q23 = _mm512_inserti64x4(_mm512_castsi256_si512(ld32(70)), ld32(104), 1);  // 2 lo, 2 hi, 3 lo, 3 hi
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i d16 =
      _mm512_permutex2var_epi16(_mm512_loadu_si512(g), _mm512_load_si512(kQ8ScaleIdx), _mm512_loadu_si512(g + 68));
  return {_mm512_xor_si512(_mm512_shuffle_i64x2(q01, q23, _MM_SHUFFLE(2, 0, 2, 0)), flip),
          _mm512_xor_si512(_mm512_shuffle_i64x2(q01, q23, _MM_SHUFFLE(3, 1, 3, 1)), flip),
          _mm512_cvtph_ps(_mm512_castsi512_si256(d16))};
}

template <int kOffset>
__m512 dot_halves(const Halves& a, const PreparedHalves<kOffset>& b, __m512 acc) {
  __m512i p = _mm512_dpbusd_epi32(_mm512_load_si512(b.bias), a.lo, _mm512_load_si512(b.lo));
  p = _mm512_dpbusd_epi32(p, a.hi, _mm512_load_si512(b.hi));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(a.d, _mm512_load_ps(b.d)), acc);
}

struct Q4Kernel {
  using Block = BlockQ4_0;
  using Prepared = PreparedQ8ForQ4;
  using Group = Halves;
  static Group load(const uint8_t* g) { return load_q4_group(g); }
  static __m512 dot(const Group& a, const Prepared& b, __m512 acc) { return dot_halves(a, b, acc); }
};

struct Q8Kernel {
  using Block = BlockQ8_0;
  using Prepared = PreparedQ8ForQ8;
  using Group = Halves;
  static Group load(const uint8_t* g) { return load_q8_group(g); }
  static __m512 dot(const Group& a, const Prepared& b, __m512 acc) { return dot_halves(a, b, acc); }
};

// dot(weight row a, the prepared activation row b) over nb blocks. pf is the row about 2 KiB on
// (prefetch_row), prefetched alongside, because weight rows are short (a few KiB) and the hardware
// prefetcher alone does not run far enough ahead of one such stream. Not inlined, like codes_dot
// (kernels_avx512_codes.h).
template <typename Kernel>
__attribute__((noinline)) float quant_dot(int64_t nb, const uint8_t* a, const uint8_t* pf,
                                          const typename Kernel::Prepared* b) {
  constexpr int64_t kGroupBytes = kGroup * sizeof(typename Kernel::Block);
  __m512 acc = _mm512_setzero_ps();
  const int64_t full = nb / kGroup;
  for (int64_t g = 0; g < full; ++g) {
    for (int64_t off = 0; off < kGroupBytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(pf + g * kGroupBytes + off), _MM_HINT_T0);
    acc = Kernel::dot(Kernel::load(a + g * kGroupBytes), b[g], acc);
  }
  if (const int64_t rest = nb - full * kGroup; rest > 0) {
    // Copy the last 1-3 blocks into a zeroed group so loads stay in bounds; zero blocks add 0.
    alignas(64) uint8_t tail[kGroupBytes + 64] = {};
    std::memcpy(tail, a + full * kGroupBytes, rest * sizeof(typename Kernel::Block));
    acc = Kernel::dot(Kernel::load(tail), b[full], acc);
  }
  return hsum_ps(acc);
}

// Decode (one activation row; more go to the VNNI driver's panels): one weight row at a time, so
// the weights are read as one stream in address order (rows lie one after another); a row about
// 2 KiB on is prefetched alongside. Interleaving four rows (four streams) read about half as fast
// where that was measured (docs/performance.md, "Decode reads one weight row at a time").
template <typename Kernel>
void quant_decode(int64_t K, int64_t M, const void* A, size_t lda, const void* B, float* C) {
  const int64_t nb = K / kQK;
  using Prepared = typename Kernel::Prepared;
  AlignedArray<Prepared> owned;
  Prepared* prepared = call_scratch<Prepared, Kernel>(static_cast<size_t>((nb + kGroup - 1) / kGroup), owned);
  if (prepared == nullptr) throw std::bad_alloc();
  prepare(static_cast<const BlockQ8_0*>(B), nb, prepared);
  for (int64_t i = 0; i < M; ++i)
    C[i] = quant_dot<Kernel>(nb, row_at<uint8_t>(A, i, lda), row_at<uint8_t>(A, prefetch_row(i, 1, M, lda), lda),
                             prepared);
}

// q8_0 decode on quant_decode, a row at a time; more activation rows on the VNNI driver's panels.
void gemm_q8_0(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
               size_t ldc) {
  if (N == 1) return quant_decode<Q8Kernel>(K, M, A, lda, B, C);
  gemm_q8_0_tiles(K, M, N, A, lda, B, ldb, C, ldc);
}

// q4_0 likewise: decode on quant_decode, more activation rows on the VNNI driver's panels.
void gemm_q4_0(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
               size_t ldc) {
  if (N == 1) return quant_decode<Q4Kernel>(K, M, A, lda, B, C);
  gemm_q4_0_tiles(K, M, N, A, lda, B, ldb, C, ldc);
}

bool cpu_has_avx512_set() {
  return cpu_has_f16c() && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

const KernelTable* avx512_kernels() {
  return table_if_supported(
      [] {
        KernelTable t = {.name = "avx512",
                         .quantize_row_q8_0 = quantize_q8_0,
                         .gemm_f32 = gemm_float<LoadF32>,
                         .gemm_f16 = gemm_float<LoadF16>,
                         .gemm_q8_0 = gemm_q8_0,
                         .gemm_q4_0 = gemm_q4_0};
        add_portable_quant_kernels(t);  // the formats this file has no kernels of
        add_avx512_quant_kernels(t);    // ... and replaces them with this table's own
        return t;
      },
      cpu_has_avx512_set);
}

}  // namespace tensorpc::cpu

#else  // compiler lacks the instruction set: the table does not exist

namespace tensorpc::cpu {
const KernelTable* avx512_kernels() { return nullptr; }
}  // namespace tensorpc::cpu

#endif
