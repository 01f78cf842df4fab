// The "avx2" kernel table (AVX2 + FMA + F16C), for x86-64 CPUs without AVX-512.
//
// Same structure as the AVX-512 table at half the vector width:
// gemm_f32/f16 (N large): 6 weight rows x 16 packed activation columns (12 ymm accumulators)
//   over K slices, accumulated in a row-major tile that is transposed into C.
// gemm_f32/f16 (N small): dot products along K, 4 rows x up to 2 columns.
// gemm_q8_0/q4_0: one block per ymm with maddubs; weights and activations are made
//   unsigned x signed with the sign trick (|w| * (x * sign(w))), which is exact because
//   activation quants never reach -128.
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
#include "cpu/kernels_portable_quant.h"
#include "cpu/kernels_table_setup.h"
#include "cpu/kernels_tile_loops.h"

namespace tensorpc::cpu {
namespace {

// ---------------------------------------------------------------------------------------------
// Activation quantization.

void quantize_q8_0(const float* x, void* vy, int64_t n) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(vy);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 m01 = _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask));
    const __m256 m23 = _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask));
    // Same scalar d and 1/d as the reference, so only exact .5 ties can round differently.
    const float d = hmax(_mm256_max_ps(m01, m23)) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    const __m256 s = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], s));  // nearest-even
    // packs interleave 128-bit lanes; the final permute restores value order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), ordered);
  }
}

// ---------------------------------------------------------------------------------------------
// Quantized kernels: one block per ymm. Weights become signed bytes w, activations x; the
// product uses maddubs(|w|, x * sign(w)), whose 16-bit pair sums cannot saturate for
// |w| <= 128, |x| <= 127 (2 * 128 * 127 < 32767).

struct Q4Weights {
  using Block = BlockQ4_0;
  static __m256i values(const BlockQ4_0& b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), nib), _mm_and_si128(q, nib));
    return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
  }
};
struct Q8Weights {
  using Block = BlockQ8_0;
  static __m256i values(const BlockQ8_0& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
};

template <typename W, int RA, int CB>
void quant_tile(int64_t nb, const typename W::Block* const* a, const BlockQ8_0* const* b, float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[RA][CB];
  for (int r = 0; r < RA; ++r)
    for (int c = 0; c < CB; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t q = 0; q < nb; ++q) {
    __m256i w[RA], wabs[RA];
    float wd[RA];
    for (int r = 0; r < RA; ++r) {
      w[r] = W::values(a[r][q]);
      wabs[r] = _mm256_abs_epi8(w[r]);
      wd[r] = fp16_to_fp32(a[r][q].d);
    }
    for (int c = 0; c < CB; ++c) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[c][q].qs));
      const float xd = fp16_to_fp32(b[c][q].d);
      for (int r = 0; r < RA; ++r) {
        const __m256i p16 = _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(x, w[r]));
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[r][c] = _mm256_fmadd_ps(p, _mm256_set1_ps(wd[r] * xd), acc[r][c]);
      }
    }
  }
  for (int c = 0; c < CB; ++c)
    for (int r = 0; r < RA; ++r) out[c * RA + r] = hsum(acc[r][c]);
}

template <typename W>
void gemm_quant(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                size_t ldc) {
  using Block = typename W::Block;
  const int64_t nb = K / kQK;
  if (N == 1) {
    // Decode: one weight row at a time, so the weights stream from memory in address order,
    // with a row about 2 KiB on prefetched (two rows side by side were two streams, and read
    // at about a third of the speed where measured: docs/performance.md).
    const BlockQ8_0* b = row_at<BlockQ8_0>(B, 0, ldb);
    for_each_streamed_row(A, lda, M, [&](int64_t i) {
      const Block* a = row_at<Block>(A, i, lda);
      quant_tile<W, 1, 1>(nb, &a, &b, C + i);
    });
    return;
  }
  // 2 rows x 2 columns: unpacked weights feed two columns, 4 chains
  gemm_tiles<2, 2, Block, BlockQ8_0>(M, N, A, lda, B, ldb, C, ldc,
                                     [nb](auto n, const Block* const* a, const BlockQ8_0* const* b, int64_t,
                                          float* out) { quant_tile<W, 2, n>(nb, a, b, out); });
}

bool cpu_has_avx2_set() { return cpu_has_f16c() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

}  // namespace

const KernelTable* avx2_kernels() {
  return table_if_supported(
      [] {
        KernelTable t = {.name = "avx2",
                         .quantize_row_q8_0 = quantize_q8_0,
                         .gemm_f32 = gemm_float<LoadF32>,
                         .gemm_f16 = gemm_float<LoadF16>,
                         .gemm_q8_0 = gemm_quant<Q8Weights>,
                         .gemm_q4_0 = gemm_quant<Q4Weights>};
        add_portable_quant_kernels(t);  // the formats this file has no kernels of
        add_avx2_quant_kernels(t);      // then overrides those that have AVX2 kernels
        return t;
      },
      cpu_has_avx2_set);
}

}  // namespace tensorpc::cpu

#else  // compiler lacks the instruction set: the table does not exist

namespace tensorpc::cpu {
const KernelTable* avx2_kernels() { return nullptr; }
}  // namespace tensorpc::cpu

#endif
