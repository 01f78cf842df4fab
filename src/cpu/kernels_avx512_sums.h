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

// The sums of a, b, c and d, in that order: their four 128-bit lanes interleaved and added
// first, so the four reductions share 13 operations where four hsum_ps take 32. A short row's
// register tile spends a good part of its time on its final sums otherwise.
inline __m128 hsum4_ps(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  // Per 128-bit lane: [a, b, c, d] partial sums.
  const __m512 abcd = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
                                    _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
  return _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
}

// out[k] = the sum of v[k], k < n.
template <int n>
inline void hsum_each(const __m512* v, float* out) {
  int k = 0;
  for (; k + 4 <= n; k += 4) _mm_storeu_ps(out + k, hsum4_ps(v[k], v[k + 1], v[k + 2], v[k + 3]));
  for (; k < n; ++k) out[k] = hsum_ps(v[k]);
}

inline float hmax_ps(__m512 v) {
  const __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

}  // namespace
}  // namespace tensorpc::cpu
