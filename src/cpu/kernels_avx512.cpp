// The "avx512" kernel table (AVX-512 F/BW/VL/DQ + VNNI, F16C, FMA), for Sapphire Rapids-class CPUs.
//
// gemm_f32/f16 (N large): a register-tiled product that broadcasts weights and loads packed
//   activations. B is packed once per call into K x 64 column panels; each micro-kernel call
//   multiplies 6 weight rows by a 64-column panel slice of kKC k-steps (24 zmm accumulators)
//   and accumulates into a small row-major tile that is transposed into C at the end. Weights
//   are read straight from their rows (no packing: with N = 64 each weight is used only a few
//   dozen times, so transposing them would cost as much as the FMAs it feeds).
// gemm_f32/f16 (N small): dot products along K, four rows at once.
// gemm_q8_0/q4_0: VNNI dot products on 4 blocks per step; decode (N = 1) one weight row at a
//   time (one read stream), otherwise q4_0 three rows x four columns and q8_0 the tiles of the
//   VNNI driver of the other block formats (gemm_q8_0_tiles). Activation blocks are re-laid out
//   once per call so that each weight group needs only loads, a permute and nibble masks; the
//   signed x signed problem becomes unsigned x signed with a per-block bias (see PreparedQ8).
// Scratch memory (aligned.h) is allocated once per gemm call: calls run on many threads at
//   once, so nothing is shared.
#include "cpu/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include <cpuid.h>
#include "cpu/immintrin_quiet.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/float16.h"
#include "core/quant.h"
#include "cpu/aligned.h"
#include "cpu/kernels_avx512_quant.h"
#include "cpu/kernels_avx512_sums.h"
#include "cpu/kernels_portable_quant.h"

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
// Dot-product kernels for small N: vectors run along K, RM weight rows x RN activation rows.

__mmask16 tail_mask(int64_t remaining) { return static_cast<__mmask16>((1u << remaining) - 1u); }

struct LoadF32 {
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_masked(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct LoadF16 {
  static __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_masked(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};

template <int RM, int RN, typename Load, typename T>
void dot_tile(int64_t K, const T* const* a, const float* const* b, float* out /*[RN][RM]*/) {
  __m512 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) acc[r][c] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 bv[RN];
    for (int c = 0; c < RN; ++c) bv[c] = _mm512_loadu_ps(b[c] + k);
    for (int r = 0; r < RM; ++r) {
      const __m512 av = Load::load(a[r] + k);
      for (int c = 0; c < RN; ++c) acc[r][c] = _mm512_fmadd_ps(av, bv[c], acc[r][c]);
    }
  }
  if (k < K) {
    const __mmask16 m = tail_mask(K - k);
    __m512 bv[RN];
    for (int c = 0; c < RN; ++c) bv[c] = _mm512_maskz_loadu_ps(m, b[c] + k);
    for (int r = 0; r < RM; ++r) {
      const __m512 av = Load::load_masked(a[r] + k, m);
      for (int c = 0; c < RN; ++c) acc[r][c] = _mm512_fmadd_ps(av, bv[c], acc[r][c]);
    }
  }
  for (int c = 0; c < RN; ++c)
    for (int r = 0; r < RM; ++r) out[c * RM + r] = hsum_ps(acc[r][c]);
}

template <typename Load, typename T>
void gemm_small_n(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                  size_t ldc) {
  constexpr int RM = 4;
  float out[4 * RM];
  for (int64_t i = 0; i < M; i += RM) {
    const int64_t mr = std::min<int64_t>(RM, M - i);
    const T* a[RM];
    for (int r = 0; r < RM; ++r) a[r] = row_at<T>(A, i + std::min<int64_t>(r, mr - 1), lda);
    for (int64_t j = 0; j < N; j += 4) {
      const int64_t nr = std::min<int64_t>(4, N - j);
      const float* b[4];
      for (int c = 0; c < 4; ++c) b[c] = row_at<float>(B, j + std::min<int64_t>(c, nr - 1), ldb);
      switch (nr) {
        case 1: dot_tile<RM, 1, Load>(K, a, b, out); break;
        case 2: dot_tile<RM, 2, Load>(K, a, b, out); break;
        case 3: dot_tile<RM, 3, Load>(K, a, b, out); break;
        default: dot_tile<RM, 4, Load>(K, a, b, out); break;
      }
      for (int64_t c = 0; c < nr; ++c)
        for (int64_t r = 0; r < mr; ++r) C[(j + c) * ldc + i + r] = out[c * RM + r];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Register-tiled kernels for larger N.

constexpr int kMR = 6;             // weight rows per micro-kernel (6 x 4 zmm = 24 accumulators)
constexpr int kPanel = 64;         // activation columns per packed panel (4 zmm)
constexpr int64_t kKC = 128;       // k-steps per panel slice: 128 x 64 floats = 32 KiB in L1
constexpr int64_t kMC = 16 * kMR;  // weight rows sharing one panel slice
constexpr int64_t kSmallN = 8;     // below this, the dot-product kernels win

// tile[r][0..16*NV) (+)= sum_{k<kc} a[r][k] * panel[k][...]
template <int NV>
void micro_f32(int64_t kc, const float* const* a, const float* panel, float* tile, bool accumulate) {
  __m512 acc[kMR][NV];
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm512_load_ps(tile + r * kPanel + 16 * v) : _mm512_setzero_ps();
  const float* a0 = a[0];
  const float* a1 = a[1];
  const float* a2 = a[2];
  const float* a3 = a[3];
  const float* a4 = a[4];
  const float* a5 = a[5];
  for (int64_t k = 0; k < kc; ++k, panel += kPanel) {
    if ((k & 15) == 0) {
      // The same rows' next slice is needed kMC/kMR calls from now; start pulling it into L2
      // (weights stream from DRAM in short per-row runs the hardware prefetcher misses).
      for (int r = 0; r < kMR; ++r) _mm_prefetch(reinterpret_cast<const char*>(a[r] + k + kKC), _MM_HINT_T1);
    }
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(panel + 16 * v);
    const float av[kMR] = {a0[k], a1[k], a2[k], a3[k], a4[k], a5[k]};
    for (int r = 0; r < kMR; ++r) {
      const __m512 ar = _mm512_set1_ps(av[r]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_store_ps(tile + r * kPanel + 16 * v, acc[r][v]);
}

void run_micro_f32(int nv, int64_t kc, const float* const* a, const float* panel, float* tile, bool accumulate) {
  switch (nv) {
    case 1: micro_f32<1>(kc, a, panel, tile, accumulate); break;
    case 2: micro_f32<2>(kc, a, panel, tile, accumulate); break;
    case 3: micro_f32<3>(kc, a, panel, tile, accumulate); break;
    default: micro_f32<4>(kc, a, panel, tile, accumulate); break;
  }
}

// panels[p][k][0..64): column p*64 + c of the panel is activation row j = p*64 + c, zero-padded.
AlignedArray<float> pack_panels(int64_t K, int64_t N, const void* B, size_t ldb) {
  const int64_t npanels = (N + kPanel - 1) / kPanel;
  auto panels = make_aligned<float>(static_cast<size_t>(npanels * K * kPanel));
  if (!panels) throw std::bad_alloc();  // the device fails the compute with a Status
  for (int64_t p = 0; p < npanels; ++p) {
    float* dst = panels.get() + p * K * kPanel;
    const int64_t w = std::min<int64_t>(kPanel, N - p * kPanel);
    if (w < kPanel) std::memset(dst, 0, sizeof(float) * K * kPanel);
    // 16 columns x 16 k at a time through a small transpose buffer keeps both sides sequential.
    for (int64_t c0 = 0; c0 < w; c0 += 16) {
      const int64_t cw = std::min<int64_t>(16, w - c0);
      for (int64_t k = 0; k < K; ++k) {
        float* d = dst + k * kPanel + c0;
        for (int64_t c = 0; c < cw; ++c) d[c] = row_at<float>(B, p * kPanel + c0 + c, ldb)[k];
      }
    }
  }
  return panels;
}

// Supplies kMR weight-row pointers (as f32) for rows [i0, i0 + kMR) and k in [k0, k0 + kc).
struct RowsF32 {
  const void* A;
  size_t lda;
  void rows(int64_t i0, int64_t last, int64_t k0, int64_t /*kc*/, const float** out) {
    for (int r = 0; r < kMR; ++r) out[r] = row_at<float>(A, std::min(i0 + r, last), lda) + k0;
  }
};
struct RowsF16 {
  const void* A;
  size_t lda;
  alignas(64) float buf[kMR][kKC];  // rows widened to f32 just before use
  void rows(int64_t i0, int64_t last, int64_t k0, int64_t kc, const float** out) {
    for (int r = 0; r < kMR; ++r) {
      const uint16_t* src = row_at<uint16_t>(A, std::min(i0 + r, last), lda) + k0;
      int64_t k = 0;
      for (; k + 16 <= kc; k += 16) _mm512_store_ps(buf[r] + k, LoadF16::load(src + k));
      if (k < kc) _mm512_store_ps(buf[r] + k, LoadF16::load_masked(src + k, tail_mask(kc - k)));
      out[r] = buf[r];
    }
  }
};

template <typename Rows>
void gemm_tiled(Rows& src, int64_t K, int64_t M, int64_t N, const void* B, size_t ldb, float* C, size_t ldc) {
  const auto panels = pack_panels(K, N, B, ldb);
  auto tile = make_aligned<float>(kMC * kPanel);
  if (!tile) throw std::bad_alloc();
  const float* a[kMR];
  for (int64_t i0 = 0; i0 < M; i0 += kMC) {
    const int64_t mc = std::min(kMC, M - i0);
    for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
      const int64_t w = std::min<int64_t>(kPanel, N - j0);
      const int nv = static_cast<int>((w + 15) / 16);
      const float* panel = panels.get() + (j0 / kPanel) * K * kPanel;
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kc = std::min(kKC, K - k0);
        for (int64_t ir = 0; ir < mc; ir += kMR) {
          // Rows past M repeat the last row; their results land in unused tile rows.
          src.rows(i0 + ir, M - 1, k0, kc, a);
          run_micro_f32(nv, kc, a, panel + k0 * kPanel, tile.get() + ir * kPanel, k0 > 0);
        }
      }
      for (int64_t c = 0; c < w; ++c)
        for (int64_t r = 0; r < mc; ++r) C[(j0 + c) * ldc + i0 + r] = tile[r * kPanel + c];
    }
  }
}

void gemm_f32(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
              size_t ldc) {
  if (N < kSmallN) return gemm_small_n<LoadF32, float>(K, M, N, A, lda, B, ldb, C, ldc);
  RowsF32 src{A, lda};
  gemm_tiled(src, K, M, N, B, ldb, C, ldc);
}

void gemm_f16(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
              size_t ldc) {
  if (N < kSmallN) return gemm_small_n<LoadF16, uint16_t>(K, M, N, A, lda, B, ldb, C, ldc);
  auto src = std::make_unique<RowsF16>();
  src->A = A;
  src->lda = lda;
  gemm_tiled(*src, K, M, N, B, ldb, C, ldc);
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
  static constexpr bool kTiles = true;
  using Block = BlockQ4_0;
  using Prepared = PreparedQ8ForQ4;
  using Group = Halves;
  static Group load(const uint8_t* g) { return load_q4_group(g); }
  static __m512 dot(const Group& a, const Prepared& b, __m512 acc) { return dot_halves(a, b, acc); }
};

struct Q8Kernel {
  static constexpr bool kTiles = false;  // decode only: gemm_q8_0
  using Block = BlockQ8_0;
  using Prepared = PreparedQ8ForQ8;
  using Group = Halves;
  static Group load(const uint8_t* g) { return load_q8_group(g); }
  static __m512 dot(const Group& a, const Prepared& b, __m512 acc) { return dot_halves(a, b, acc); }
};

// out[c * RA + r] = dot(weight row a[r], prepared activation row b[c]) over nb blocks.
// pf[r] is the matching row of a tile about 2 KiB on (prefetch_row): prefetched alongside, because
// weight rows are short (a few KiB) and the hardware prefetcher alone cannot keep several such
// streams busy.
// Not inlined, like codes_tile (kernels_avx512_codes.h): its spills cost less out of line.
template <typename Kernel, int RA, int CB>
__attribute__((noinline)) void quant_tile(int64_t nb, const uint8_t* const* a, const uint8_t* const* pf,
                const typename Kernel::Prepared* const* b, float* out) {
  constexpr int64_t kGroupBytes = kGroup * sizeof(typename Kernel::Block);
  __m512 acc[RA][CB];
  for (int r = 0; r < RA; ++r)
    for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_setzero_ps();
  auto step = [&](const uint8_t* const* ga, int64_t g) {
    typename Kernel::Group w[RA];
    for (int r = 0; r < RA; ++r) w[r] = Kernel::load(ga[r]);
    for (int c = 0; c < CB; ++c)
      for (int r = 0; r < RA; ++r) acc[r][c] = Kernel::dot(w[r], b[c][g], acc[r][c]);
  };
  const int64_t full = nb / kGroup;
  const uint8_t* ga[RA];
  for (int64_t g = 0; g < full; ++g) {
    for (int r = 0; r < RA; ++r) {
      ga[r] = a[r] + g * kGroupBytes;
      for (int64_t off = 0; off < kGroupBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf[r] + g * kGroupBytes + off), _MM_HINT_T0);
    }
    step(ga, g);
  }
  if (const int64_t rest = nb - full * kGroup; rest > 0) {
    // Copy the last 1-3 blocks into zeroed groups so loads stay in bounds; zero blocks add 0.
    alignas(64) uint8_t tail[RA][kGroupBytes + 64] = {};
    for (int r = 0; r < RA; ++r) {
      std::memcpy(tail[r], a[r] + full * kGroupBytes, rest * sizeof(typename Kernel::Block));
      ga[r] = tail[r];
    }
    step(ga, full);
  }
  __m512 flat[CB * RA];
  for (int c = 0; c < CB; ++c)
    for (int r = 0; r < RA; ++r) flat[c * RA + r] = acc[r][c];
  hsum_each<CB * RA>(flat, out);
}

// quant_tile for the last nr (< CB) activation rows too.
template <typename Kernel, int RA, int CB>
void quant_tile_upto(int64_t nr, int64_t nb, const uint8_t* const* a, const uint8_t* const* pf,
                     const typename Kernel::Prepared* const* b, float* out) {
  if constexpr (CB > 1) {
    if (nr < CB) return quant_tile_upto<Kernel, RA, CB - 1>(nr, nb, a, pf, b, out);
  }
  quant_tile<Kernel, RA, CB>(nb, a, pf, b, out);
}

template <typename Kernel, int RA, int CB>
void quant_rows(int64_t nb, int64_t i, int64_t M, int64_t N, const void* A, size_t lda,
                const typename Kernel::Prepared* prepared, int64_t groups, float* C, size_t ldc) {
  const int64_t mr = std::min<int64_t>(RA, M - i);
  const uint8_t* a[RA];
  const uint8_t* next[RA];
  const int64_t ahead = prefetch_row(i, RA, M, lda);
  for (int r = 0; r < RA; ++r) {
    a[r] = row_at<uint8_t>(A, i + std::min<int64_t>(r, mr - 1), lda);
    next[r] = row_at<uint8_t>(A, std::min(ahead + r, M - 1), lda);
  }
  float out[CB * RA];
  for (int64_t j = 0; j < N; j += CB) {
    const int64_t nr = std::min<int64_t>(CB, N - j);
    const typename Kernel::Prepared* b[CB];
    for (int c = 0; c < CB; ++c) b[c] = prepared + (j + std::min<int64_t>(c, nr - 1)) * groups;
    quant_tile_upto<Kernel, RA, CB>(nr, nb, a, next, b, out);
    store_tile<RA>(out, mr, nr, C + j * ldc + i, ldc);
  }
}

// Prefill tiles: 3 weight rows x 4 activation rows (2 x 4 before: q8_0 +20-27 %, q4_0 +37-40 % in
// kernels_bench at the 250M model's shapes; 3 x 5 and 3 x 6 were no faster).
constexpr int kQuantRows = 3, kQuantCols = 4;

template <typename Kernel>
void gemm_quant(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                size_t ldc) {
  const int64_t nb = K / kQK;
  const int64_t groups = (nb + kGroup - 1) / kGroup;
  using Prepared = typename Kernel::Prepared;
  AlignedArray<Prepared> owned;
  Prepared* prepared = call_scratch<Prepared, Kernel>(static_cast<size_t>(N * groups), owned);
  if (prepared == nullptr) throw std::bad_alloc();
  for (int64_t j = 0; j < N; ++j) prepare(row_at<BlockQ8_0>(B, j, ldb), nb, prepared + j * groups);
  // Decode (N == 1): one weight row at a time, so the weights are read as one stream in
  // address order (rows lie one after another); a row about 2 KiB on is prefetched alongside.
  // Interleaving four rows (four streams) read about half as fast where that was measured
  // (docs/performance.md, "Decode reads one weight row at a time").
  // Otherwise kQuantRows rows x kQuantCols columns, so each unpacked weight group feeds
  // kQuantCols columns.
  for (int64_t i = 0; i < M; i += (N == 1 ? 1 : kQuantRows)) {
    if constexpr (Kernel::kTiles) {
      if (N > 1) {
        quant_rows<Kernel, kQuantRows, kQuantCols>(nb, i, M, N, A, lda, prepared, groups, C, ldc);
        continue;
      }
    }
    quant_rows<Kernel, 1, 1>(nb, i, M, N, A, lda, prepared, groups, C, ldc);
  }
}

// q8_0 decode on gemm_quant, a row at a time; more activation rows on the VNNI driver's tiles,
// which convert sums to float once per 256 values and activation row where Q8Kernel did per
// 64: 1.6-1.8x Q8Kernel's 3 x 4 tiles then (docs/performance.md, "Quantized formats").
void gemm_q8_0(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
               size_t ldc) {
  if (N == 1) return gemm_quant<Q8Kernel>(K, M, N, A, lda, B, ldb, C, ldc);
  gemm_q8_0_tiles(K, M, N, A, lda, B, ldb, C, ldc);
}

bool cpu_has_avx512_set() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  return f16c && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

const KernelTable* avx512_kernels() {
  static const KernelTable table = [] {
    KernelTable t = {.name = "avx512", .quantize_row_q8_0 = quantize_q8_0, .gemm_f32 = gemm_f32, .gemm_f16 = gemm_f16, .gemm_q8_0 = gemm_q8_0, .gemm_q4_0 = gemm_quant<Q4Kernel>};
    add_portable_quant_kernels(t);  // the formats this file has no kernels of
    add_avx512_quant_kernels(t);    // ... and replaces them with this table's own
    return t;
  }();
  static const bool supported = cpu_has_avx512_set();
  return supported ? &table : nullptr;
}

}  // namespace tensorpc::cpu

#else  // compiler lacks the instruction set: the table does not exist

namespace tensorpc::cpu {
const KernelTable* avx512_kernels() { return nullptr; }
}  // namespace tensorpc::cpu

#endif
