// Horizontal reductions of zmm registers for the "avx512" table's kernels, written out because
// GCC 12's _mm512_reduce_* warn under -Wall. Include only from files compiled with the avx512
// flags; everything has internal linkage, as in aligned.h, and is inline so a file may use only
// part of it without unused-function warnings.
#pragma once

#include <immintrin.h>

namespace tensorpc::cpu {
namespace {

inline float hsum_ps(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
}

inline float hmax_ps(__m512 v) {
  const __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

}  // namespace
}  // namespace tensorpc::cpu
