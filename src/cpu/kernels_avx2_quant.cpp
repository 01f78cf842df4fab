// The "avx2" table's entries beyond f32/f16/q8_0/q4_0: the q8_K activation quantizer, gemm_bf16,
// and (through kernels_avx2_q32.cpp and kernels_avx2_qk.cpp) the quantized weight formats.
//
// Every quantized kernel follows the design of kernels_portable_quant.cpp: a weight block is
// unpacked into small integers u with value = scale * (u - offset) - min per sub-block, so the
// dot product with an activation block is maddubs(u, x) (unsigned x signed bytes), then madd
// with the sub-block scales, in int32; the offset and min terms come from sums of the
// activations (BlockQ8_K::bsums, or per-block sums of q8_0 activations) without touching the
// quants again. Floats appear once per block (32 formats) or super-block (K formats).
//
// gemm_bf16 is the float machinery of kernels_avx2_float_tiles.h with a bf16 load: bf16 is the top
// half of an f32, so widening is a 16-bit shift.
#include "cpu/kernels_avx2_quant.h"

#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstring>

#include "core/quant.h"
#include "cpu/kernels_avx2_float_tiles.h"

namespace tensorpc::cpu {
namespace {

// Same d and 1/d as quantize_row_q8_K_ref, so only exact .5 ties round differently (to even).
// NaN inputs give 0 and the quants are clamped to [-127, 127], as in the reference.
void quantize_q8_K(const float* x, void* vy, int64_t n) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(vy);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    // max_ps returns its second operand when either is NaN: keeping the running maximum
    // second skips NaNs, as std::max(amax, fabs(x)) does.
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < kQK_K; i += 8) amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), amax);
    const float d = hmax(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(&y[b].d, &d, sizeof d);  // q8_K rows may be only 2-byte aligned
    const __m256 s = _mm256_set1_ps(id);
    __m256i partial[8];  // per 32 quants: four int32 sums of 4 in each 128-bit lane
    for (int g = 0; g < 8; ++g) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * i), s);
        v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
        q[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
      }
      // packs interleave 128-bit lanes; the permute restores value order.
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i ordered = _mm256_permutevar8x32_epi32(p, order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + 32 * g), ordered);
      partial[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, ordered), ones16);
    }
    // Two rounds of hadd leave lane 0 = sums of groups 0,2,4,6 (of 16) and lane 1 = 1,3,5,7 for
    // each half; packing to int16 and interleaving the lanes puts them in order.
    const __m256i h0 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(partial[0], partial[1]), _mm256_hadd_epi32(partial[2], partial[3]));
    const __m256i h1 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(partial[4], partial[5]), _mm256_hadd_epi32(partial[6], partial[7]));
    const __m256i sums = _mm256_packs_epi32(h0, h1);  // lane 0: even groups, lane 1: odd groups
    const __m128i even = _mm256_castsi256_si128(sums), odd = _mm256_extracti128_si256(sums, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].bsums), _mm_unpacklo_epi16(even, odd));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].bsums + 8), _mm_unpackhi_epi16(even, odd));
  }
}

}  // namespace

void add_avx2_quant_kernels(KernelTable& t) {
  t.quantize_row_q8_K = quantize_q8_K;
  t.gemm_bf16 = gemm_float<LoadBF16>;
  add_avx2_q32_kernels(t);
  add_avx2_qk_kernels(t);
}

}  // namespace tensorpc::cpu

#else  // compiler lacks the instruction set: avx2_kernels() has no table to fill

namespace tensorpc::cpu {
void add_avx2_quant_kernels(KernelTable&) {}
}  // namespace tensorpc::cpu

#endif
