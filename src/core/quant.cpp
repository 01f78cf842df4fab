// Portable reference implementations of the GGUF q8_0/q4_0 block codecs and f16/bf16 rows.
// Plain scalar C++ on purpose: these define the expected bytes for the SIMD kernels.
#include "core/quant.h"

#include <algorithm>
#include <cmath>

#include "core/float16.h"

namespace tensorpc {
namespace {

// (int)v for v clamped to [lo, hi], and `nan_value` for NaN. Inputs come from
// anywhere (a client's activations), and converting an out-of-range float to
// int is undefined behaviour, so the clamp comes first. Infinite or subnormal
// blocks reach here (1/d overflows), and must give valid bytes, not UB.
int clamped_int(float v, int lo, int hi, int nan_value) {
  if (std::isnan(v)) return nan_value;
  return static_cast<int>(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi)));
}

// std::round(v) (halves away from zero) clamped to [-127, 127], and 0 for NaN. The clamp comes
// first, after which truncating to int and looking at the fraction rounds exactly; unlike
// std::round (a library call) the loop that uses it becomes vector code.
inline int round_q8(float v) {
  v = std::isnan(v) ? 0.0f : std::min(std::max(v, -127.0f), 127.0f);
  const int t = static_cast<int>(v);
  const float fraction = v - static_cast<float>(t);
  return t + (fraction >= 0.5f) - (fraction <= -0.5f);
}

}  // namespace

void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.0f;
    for (int64_t i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int64_t i = 0; i < kQK; ++i) y[b].qs[i] = static_cast<int8_t>(round_q8(xb[i] * id));
  }
}

void quantize_row_q4_0_ref(const float* x, BlockQ4_0* y, int64_t n) {
  const int64_t nb = n / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQK;
    // The signed extreme maps to exactly -8, using the full asymmetric range [-8, 7].
    float amax = 0.0f, max = 0.0f;
    for (int64_t i = 0; i < kQK; ++i) {
      if (std::fabs(xb[i]) > amax) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int64_t j = 0; j < kQK / 2; ++j) {
      const int lo = clamped_int(xb[j] * id + 8.5f, 0, 15, 8);
      const int hi = clamped_int(xb[j + kQK / 2] * id + 8.5f, 0, 15, 8);
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  const int64_t nb = n / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int64_t i = 0; i < kQK; ++i) y[b * kQK + i] = d * static_cast<float>(x[b].qs[i]);
  }
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  const int64_t nb = n / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int64_t j = 0; j < kQK / 2; ++j) {
      y[b * kQK + j] = d * static_cast<float>((x[b].qs[j] & 0x0f) - 8);
      y[b * kQK + j + kQK / 2] = d * static_cast<float>((x[b].qs[j] >> 4) - 8);
    }
  }
}

void convert_row_f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void convert_row_f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void convert_row_f32_to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

void convert_row_bf16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

}  // namespace tensorpc
