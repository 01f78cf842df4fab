// The "avx512" table's entries beyond f32/f16/q8_0/q4_0: the q8_K activation quantizer,
// gemm_bf16, and (through kernels_avx512_q32.cpp and kernels_avx512_qk.cpp) the quantized
// weight formats, which share the VNNI driver of kernels_avx512_codes.h.
//
// gemm_bf16 is the float machinery of kernels_avx512_float_tiles.h with a bf16 load: bf16 is the
// top half of an f32, so widening is a 16-bit shift.
#include "cpu/kernels_avx512_quant.h"

#include "cpu/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include "cpu/immintrin_quiet.h"

#include <cstring>

#include "core/quant.h"
#include "cpu/kernels_avx512_float_tiles.h"

namespace tensorpc::cpu {
namespace {

// Same d and 1/d as quantize_row_q8_K_ref, so only exact .5 ties round differently (to even, the
// MXCSR default). NaN inputs give 0 and the quants are clamped to [-127, 127], as in the reference.
void quantize_q8_K(const float* x, void* vy, int64_t n) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(vy);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  // packs interleave 128-bit lanes: dword t of lane c holds 4 quants of register t's lane c.
  // This permute puts each register's 16 quants back into one 16-byte chunk (and is its own
  // inverse, so it also orders the sums below).
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    // max_ps returns its second operand when either is NaN: keeping the running maximum second
    // skips NaNs, as std::max(amax, fabs(x)) does.
    __m512 amax = _mm512_setzero_ps();
    for (int i = 0; i < kQK_K; i += 16) amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), amax);
    const float d = hmax_ps(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(&y[b].d, &d, sizeof d);  // q8_K rows may be only 2-byte aligned
    const __m512 s = _mm512_set1_ps(id);
    __m512i sums = _mm512_setzero_si512();
    for (int r = 0; r < 4; ++r) {
      __m512i q[4];  // q[t]: sub-block 4 r + t as int32
      for (int t = 0; t < 4; ++t) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 64 * r + 16 * t), s);
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);  // NaN -> 0
        q[t] = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
      }
      const __m512i bytes = _mm512_permutexvar_epi32(
          order, _mm512_packs_epi16(_mm512_packs_epi32(q[0], q[1]), _mm512_packs_epi32(q[2], q[3])));
      _mm512_storeu_si512(y[b].qs + 64 * r, bytes);
      // Sum of each chunk's 16 quants, +128 each (sad works on unsigned bytes), into dword r of
      // 128-bit lane c for sub-block 4 r + c.
      __m512i sad = _mm512_sad_epu8(_mm512_xor_si512(bytes, flip), _mm512_setzero_si512());
      sad = _mm512_maskz_mov_epi32(0x1111, _mm512_add_epi64(sad, _mm512_bsrli_epi128(sad, 8)));
      switch (r) {
        case 0: sums = sad; break;
        case 1: sums = _mm512_or_si512(sums, _mm512_bslli_epi128(sad, 4)); break;
        case 2: sums = _mm512_or_si512(sums, _mm512_bslli_epi128(sad, 8)); break;
        default: sums = _mm512_or_si512(sums, _mm512_bslli_epi128(sad, 12)); break;
      }
    }
    sums = _mm512_sub_epi32(_mm512_permutexvar_epi32(order, sums), _mm512_set1_epi32(16 * 128));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].bsums), _mm512_cvtepi32_epi16(sums));
  }
}

}  // namespace

void add_avx512_quant_kernels(KernelTable& t) {
  t.quantize_row_q8_K = quantize_q8_K;
  t.gemm_bf16 = gemm_float<LoadBF16>;
  add_avx512_q32_kernels(t);
  add_avx512_qk_kernels(t);
}

}  // namespace tensorpc::cpu

#else  // compiler lacks the instruction set: avx512_kernels() returns no table anyway

namespace tensorpc::cpu {
void add_avx512_quant_kernels(KernelTable&) {}
}  // namespace tensorpc::cpu

#endif
