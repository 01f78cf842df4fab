// AVX2 kernels of the 32-value block formats q4_1, q5_0, q5_1, iq4_nl and mxfp4 against q8_0
// activations.
//
// One block is one ymm of 32 weight bytes. For q4_1/q5_0/q5_1 they are the unsigned integers
// u of the format, value = d * u + c (c = m, or -16 d for q5_0), so
//   dot = d * xd * sum(u * x) + c * xd * sum(x),
// with sum(u * x) from maddubs and xd * sum(x) computed once per activation block per call
// (the column sums below), not once per weight row. iq4_nl's values are signed table entries
// (kIQ4NLValues, via vpshufb; mxfp4's kMXFP4Values the same way); maddubs needs one unsigned operand, so it multiplies
// |w| by x * sign(w), which cannot saturate: 2 * 127 * 127 < 32767.
//
// Decode (N = 1) walks one weight row at a time in address order, with two accumulators to
// hide the FMA latency. Prefill reuses each unpacked block across 2 rows x 4 columns.
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "core/float16.h"
#include "core/quant.h"
#include "cpu/aligned.h"
#include "cpu/kernels_avx2_float_tiles.h"
#include "cpu/kernels_avx2_quant.h"
#include "cpu/kernels_table_setup.h"
#include "cpu/kernels_tile_loops.h"

namespace tensorpc::cpu {
namespace {

// Byte j of the 16 in `qs` holds value j (low nibble) and j + 16 (high nibble).
__m256i nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

// 0x10 in byte j where bit j of the 32-bit little-endian qh is set: each byte takes the qh byte
// holding its bit, sets every other bit, and compares with all ones.
__m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i all = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(all, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

// Each format: values(block) as bytes, scale(block) = d above, and, when kHasSum, coef(block) = c.
struct HalfScaled {
  template <typename Block>
  static float scale(const Block& b) {
    return fp16_to_fp32(b.d);
  }
};
struct Q4_1 : HalfScaled {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false, kHasSum = true;
  static __m256i values(const Block& b) { return nibbles(b.qs); }
  static float coef(const Block& b) { return fp16_to_fp32(b.m); }
};
struct Q5_0 : HalfScaled {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = false, kHasSum = true;
  static __m256i values(const Block& b) { return _mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh)); }
  static float coef(const Block& b) { return -16.0f * fp16_to_fp32(b.d); }
};
struct Q5_1 : HalfScaled {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false, kHasSum = true;
  static __m256i values(const Block& b) { return _mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh)); }
  static float coef(const Block& b) { return fp16_to_fp32(b.m); }
};
// Nibbles that index 16 signed levels, with no sum term.
template <const int8_t (&kLevels)[16]>
struct SignedLevels {
  static constexpr bool kSigned = true, kHasSum = false;
  template <typename Block>
  static __m256i values(const Block& b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kLevels)));
    return _mm256_shuffle_epi8(table, nibbles(b.qs));
  }
  template <typename Block>
  static float coef(const Block&) {
    return 0.0f;
  }
};
struct IQ4_NL : SignedLevels<kIQ4NLValues>, HalfScaled {
  using Block = BlockIQ4_NL;
};
struct MXFP4 : SignedLevels<kMXFP4Values> {
  using Block = BlockMXFP4;
  static float scale(const Block& b) { return e8m0_half_to_fp32(b.e); }
};

// Per activation column, per block: xd = its scale, xs = xd * sum of its quants.
struct ColumnScales {
  const float* xd;
  const float* xs;
};

void column_scales(const BlockQ8_0* b, int64_t nb, bool with_sums, float* xd, float* xs) {
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t q = 0; q < nb; ++q) {
    xd[q] = fp16_to_fp32(b[q].d);
    if (!with_sums) continue;
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[q].qs));
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, x), ones16);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    xs[q] = xd[q] * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
}

// out[c * RA + r] = dot(weight row a[r], activation column b[c]).
template <typename F, int RA, int CB>
void quant_tile(int64_t nb, const typename F::Block* const* a, const BlockQ8_0* const* b, const ColumnScales* cs,
                float* out) {
  // A lone dot product alternates two accumulators: one FMA chain would bound it at one
  // block per FMA latency.
  constexpr int kChains = RA * CB == 1 ? 2 : 1;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kChains][RA][CB];
  float off[kChains][RA][CB];
  for (int h = 0; h < kChains; ++h)
    for (int r = 0; r < RA; ++r)
      for (int c = 0; c < CB; ++c) {
        acc[h][r][c] = _mm256_setzero_ps();
        off[h][r][c] = 0.0f;
      }
  const auto step = [&](int64_t q, int h) {
    __m256i w[RA], wabs[RA];
    float wd[RA], wc[RA];
    for (int r = 0; r < RA; ++r) {
      w[r] = F::values(a[r][q]);
      if constexpr (F::kSigned) wabs[r] = _mm256_abs_epi8(w[r]);
      wd[r] = F::scale(a[r][q]);
      if constexpr (F::kHasSum) wc[r] = F::coef(a[r][q]);
    }
    for (int c = 0; c < CB; ++c) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[c][q].qs));
      const float xd = cs[c].xd[q];
      for (int r = 0; r < RA; ++r) {
        const __m256i p16 =
            F::kSigned ? _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(x, w[r])) : _mm256_maddubs_epi16(w[r], x);
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[h][r][c] = _mm256_fmadd_ps(p, _mm256_set1_ps(wd[r] * xd), acc[h][r][c]);
        if constexpr (F::kHasSum) off[h][r][c] += wc[r] * cs[c].xs[q];
      }
    }
  };
  int64_t q = 0;
  if constexpr (kChains == 2) {
    for (; q + 1 < nb; q += 2) {
      step(q, 0);
      step(q + 1, 1);
    }
  }
  for (; q < nb; ++q) step(q, 0);
  for (int c = 0; c < CB; ++c)
    for (int r = 0; r < RA; ++r) {
      __m256 sum = acc[0][r][c];
      float sum_off = off[0][r][c];
      if constexpr (kChains == 2) {
        sum = _mm256_add_ps(sum, acc[1][r][c]);
        sum_off += off[1][r][c];
      }
      out[c * RA + r] = hsum(sum) + sum_off;
    }
}

struct ColumnScratchTag {};

template <typename F>
void gemm_q32(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
              size_t ldc) {
  using Block = typename F::Block;
  if (M <= 0 || N <= 0) return;
  const int64_t nb = K / kQK;
  AlignedArray<float> owned;
  // At least one element: call_scratch may return null for 0 (K = 0 still has to write C = 0).
  float* scratch = call_scratch<float, ColumnScratchTag>(std::max<size_t>(1, static_cast<size_t>(2 * N * nb)), owned);
  if (!scratch) throw std::bad_alloc();  // the device fails the compute with a Status
  for (int64_t j = 0; j < N; ++j)
    column_scales(row_at<BlockQ8_0>(B, j, ldb), nb, F::kHasSum, scratch + j * nb, scratch + (N + j) * nb);
  const auto scales_of = [&](int64_t j) { return ColumnScales{scratch + j * nb, scratch + (N + j) * nb}; };

  if (N == 1) {
    const BlockQ8_0* b = row_at<BlockQ8_0>(B, 0, ldb);
    const ColumnScales cs = scales_of(0);
    for_each_streamed_row(A, lda, M, [&](int64_t i) {
      const Block* a = row_at<Block>(A, i, lda);
      quant_tile<F, 1, 1>(nb, &a, &b, &cs, C + i);
    });
    return;
  }
  constexpr int RA = 2, CB = 4;
  gemm_tiles<RA, CB, Block, BlockQ8_0>(
      M, N, A, lda, B, ldb, C, ldc,
      [&](auto n, const Block* const* a, const BlockQ8_0* const* b, int64_t j, float* out) {
        ColumnScales cs[n];
        for (int c = 0; c < n; ++c) cs[c] = scales_of(std::min<int64_t>(j + c, N - 1));
        quant_tile<F, RA, n>(nb, a, b, cs, out);
      });
}

}  // namespace

void add_avx2_q32_kernels(KernelTable& t) {
  set_blocks32_gemms<Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4>(
      t, [](auto f) -> GemmFn { return gemm_q32<typename decltype(f)::type>; });
}

}  // namespace tensorpc::cpu

#endif  // without AVX2 the table does not exist and kernels_avx2_quant.cpp does not call this
