// f32 math written for the auto-vectoriser: plain arithmetic, bit casts and selects, no libm
// calls and no intrinsics, so a loop that calls these vectorises under g++ -O3 in any build
// (without -ffast-math, which this project does not use) and the portable build computes the
// same values. Used by the activation, norm and softmax kernels.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace tensorpc::cpu {

// e^x within 2e-7 relative (about 2 ulp) where the result is a normal float, and correctly
// scaled into the denormal range below that; e^-inf = 0, e^x = inf for x > ~88.72, NaN stays
// NaN.
inline float vec_exp(float x) {
  // Outside [kLo, kHi] the result is already 0 or inf; clamping keeps the exponent arithmetic
  // below in range. A NaN fails both comparisons and is kept.
  constexpr float kHi = 89.0f;    // e^89 > FLT_MAX
  constexpr float kLo = -105.0f;  // e^-105 < half the smallest denormal
  x = x > kHi ? kHi : x;
  x = x < kLo ? kLo : x;

  // x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2. Adding 1.5 * 2^23 rounds x / ln2 to
  // an integer held in the low mantissa bits of t (no float-to-int conversion, which a NaN
  // would make undefined).
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  constexpr float kLog2e = 1.44269504088896341f;
  const float t = x * kLog2e + kShift;
  const float n = t - kShift;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShift);
  // ln2 split in two (Cody-Waite): kLn2Hi has few bits, so n * kLn2Hi and the subtraction
  // are exact and r keeps its low bits.
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440054690583e-4f;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;

  // e^r = 1 + p, p the Taylor series of e^r - 1 to r^7 (truncation error < 6e-9 for
  // |r| <= ln2 / 2); adding the 1 last keeps p's rounding errors small against it.
  constexpr float c2 = 1.0f / 2, c3 = 1.0f / 6, c4 = 1.0f / 24, c5 = 1.0f / 120, c6 = 1.0f / 720, c7 = 1.0f / 5040;
  const float p = r + r * r * (c2 + r * (c3 + r * (c4 + r * (c5 + r * (c6 + r * c7)))));
  const float er = 1.0f + p;

  // Times 2^n, built in the exponent bits as two factors 2^n1 * 2^n2 (n in [-152, 129] after
  // the clamp): each factor is a normal float, the first product is exact, and a result in
  // the denormal range is rounded once, by the last multiply.
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  return er * s1 * s2;
}

// Sum of n floats in double, over kLanes independent accumulators: the lanes let the loop
// vectorise without reordering one serial sum (which only -ffast-math would allow), and double
// keeps long rows accurate.
inline double sum_f64(const float* x, int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  }
  double s = 0.0;
  for (; i < n; ++i) s += x[i];
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

// The largest of n floats, NaNs ignored; -inf when n == 0 or all are NaN. Lanes as in sum_f64.
inline float max_f32(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = kNegInf;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  }
  float m = kNegInf;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int j = 0; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}

}  // namespace tensorpc::cpu
