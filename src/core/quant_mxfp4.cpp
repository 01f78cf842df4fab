// mxfp4 (layout in quant.h): the GGUF reference quantizer's rounding, so `tensorpc quantize`
// writes the bytes other GGUF writers do for the same floats.
//
// The exponent: with m the block's largest finite magnitude, e = floor(log2 m) - 2 + 127, so the
// largest code (6 x 2^(e - 127) = 1.5 x 2^floor(log2 m)) may clip m by up to a quarter: the
// reference trades that for a finer step. A block of zeros gets e = 0. Each value then takes the
// code whose value is nearest, the lowest code on ties (the smaller magnitude, +0 for zero).
//
// Where the reference is undefined we choose: blocks whose m is below 2^-125 (e would be
// negative) get e = 0; NaN and ±inf do not count towards m; NaN becomes code 0 and ±inf the
// largest code of its sign.
#include <cmath>

#include "core/quant.h"

namespace tensorpc {
namespace {

uint8_t block_exponent(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (std::isfinite(x[j])) amax = std::fmax(amax, std::fabs(x[j]));
  }
  if (amax == 0.0f) return 0;
  const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;  // in float, as the reference
  return e < 0.0f ? 0 : static_cast<uint8_t>(e);
}

// The code nearest x at the half scale d (kMXFP4Values' scale).
uint8_t nearest_code(float x, float d) {
  if (std::isinf(x)) return x > 0 ? 7 : 15;
  uint8_t best = 0;
  float best_err = std::fabs(kMXFP4Values[0] * d - x);
  for (uint8_t c = 1; c < 16; ++c) {
    const float err = std::fabs(kMXFP4Values[c] * d - x);
    if (err < best_err) {  // NaN compares false throughout: code 0
      best = c;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void quantize_row_mxfp4_ref(const float* x, BlockMXFP4* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    y[b].e = block_exponent(x);
    const float d = e8m0_half_to_fp32(y[b].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>(nearest_code(x[j], d) | (nearest_code(x[j + kQK / 2], d) << 4));
    }
  }
}

void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK)
    dequantize_levels32(x[b].qs, kMXFP4Values, e8m0_half_to_fp32(x[b].e), y);
}

}  // namespace tensorpc
