// The K super-block formats q2_K … q6_K and the q8_K activation blocks (layouts in quant.h).
//
// Quantizers (the searches are in quant_search.cpp), two levels each:
// - q2_K, q4_K, q5_K (scale and min): per sub-block (16 values for q2_K, 32 otherwise) a scale
//   and min fitted by least squares over candidate steps around (max - min) / levels, then
//   refined by alternating codes and fit. The sub-block scales and mins become integers (4 bits
//   for q2_K, 6 for q4_K/q5_K) times f16 d and dmin, each found by a symmetric search weighted
//   by how much the scale multiplies; d and dmin are then refitted together by least squares.
// - q3_K, q6_K (symmetric, levels -4..3 / -32..31): per sub-block of 16 a symmetric scale
//   search (q3_K's eight levels in half-level steps, q6_K's in tenths); the scales become
//   6-bit (-32..31) or 8-bit (-128..127) integers times f16 d, and d is refitted.
// In both, the codes are chosen again for the scales exactly as stored.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/float16.h"
#include "core/quant.h"
#include "core/quant_search.h"

namespace tensorpc {
namespace {

using quant_search::AffineSuperBlock;
using quant_search::Levels;
using quant_search::ScaledSuperBlock;

constexpr quant_search::ScaleSearch kUniformSearch{0.1f, 9};
constexpr quant_search::MinSearch kAffineSearch{0.1f, 10};
// q3_K's eight levels: half-level steps come within 0.3% of the error of tenths (on N(0, 1)
// data) with a third of the candidates.
constexpr quant_search::ScaleSearch kSmallSearch{0.5f, 1, /*both_ends=*/true, /*refine=*/2};

// The low two bits of 256 codes in q2_K/q3_K order: in each half of 128 values, value
// 32 s + l goes to bits 2s..2s+1 of qs[32 half + l].
void pack_two_bit_planes(const uint8_t* code, uint8_t* qs) {
  std::memset(qs, 0, kQK_K / 4);
  for (int i = 0; i < kQK_K; ++i) {
    const int half = i / 128, s = (i % 128) / 32, l = i % 32;
    qs[32 * half + l] = static_cast<uint8_t>(qs[32 * half + l] | ((code[i] & 3) << (2 * s)));
  }
}

// The low nibbles of 256 codes in q4_K/q5_K order: sub-blocks 2p and 2p+1 share 32 bytes, low
// and high nibbles.
void pack_nibble_pairs(const uint8_t* code, uint8_t* qs) {
  std::memset(qs, 0, kQK_K / 2);
  for (int i = 0; i < kQK_K; ++i) {
    const int j = i / 32;
    qs[32 * (j / 2) + i % 32] = static_cast<uint8_t>(qs[32 * (j / 2) + i % 32] | ((code[i] & 0x0f) << (4 * (j % 2))));
  }
}

// Eight 6-bit scales and mins into q4_K/q5_K's 12 bytes (the inverse of k_scale_min): 0..3
// whole in the low 6 bits of bytes 0..7; 4..7 as nibbles in bytes 8..11 with their top two
// bits in the top of bytes 0..7.
void pack_scales_mins(const AffineSuperBlock& q, uint8_t* out) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const int s = q.scale[j], m = q.min[j];
    if (j < 4) {
      out[j] = static_cast<uint8_t>(out[j] | s);
      out[j + 4] = static_cast<uint8_t>(out[j + 4] | m);
    } else {
      out[j + 4] = static_cast<uint8_t>((s & 0x0f) | ((m & 0x0f) << 4));
      out[j - 4] = static_cast<uint8_t>(out[j - 4] | ((s >> 4) << 6));
      out[j] = static_cast<uint8_t>(out[j] | ((m >> 4) << 6));
    }
  }
}

}  // namespace

void quantize_row_q2_K_ref(const float* x, BlockQ2_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    AffineSuperBlock q;
    quant_search::quantize_affine_super_block(x, 16, 3, 15, kAffineSearch, q);
    y[b].d = q.d;
    y[b].dmin = q.dmin;
    for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<uint8_t>(q.scale[j] | (q.min[j] << 4));
    pack_two_bit_planes(q.code, y[b].qs);
  }
}

void quantize_row_q3_K_ref(const float* x, BlockQ3_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    ScaledSuperBlock q;
    quant_search::quantize_scaled_super_block(x, 16, Levels::range(-4, 3), kSmallSearch, Levels::range(-32, 31), q);
    y[b].d = q.d;
    pack_two_bit_planes(q.code, y[b].qs);
    std::memset(y[b].hmask, 0, sizeof y[b].hmask);
    for (int i = 0; i < kQK_K; ++i)
      y[b].hmask[i % 32] = static_cast<uint8_t>(y[b].hmask[i % 32] | ((q.code[i] >> 2) << (i / 32)));
    // 6-bit scales + 32: low nibbles in bytes 0..7 (scales 8..15 in the high halves), top two
    // bits of scale j in byte 8 + j % 4 at bit 2 (j / 4).
    std::memset(y[b].scales, 0, sizeof y[b].scales);
    for (int j = 0; j < 16; ++j) {
      const int s = q.scale[j] + 32;
      y[b].scales[j % 8] = static_cast<uint8_t>(y[b].scales[j % 8] | ((s & 0x0f) << (4 * (j / 8))));
      y[b].scales[8 + j % 4] = static_cast<uint8_t>(y[b].scales[8 + j % 4] | ((s >> 4) << (2 * (j / 4))));
    }
  }
}

void quantize_row_q4_K_ref(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    AffineSuperBlock q;
    quant_search::quantize_affine_super_block(x, 32, 15, 63, kAffineSearch, q);
    y[b].d = q.d;
    y[b].dmin = q.dmin;
    pack_scales_mins(q, y[b].scales);
    pack_nibble_pairs(q.code, y[b].qs);
  }
}

void quantize_row_q5_K_ref(const float* x, BlockQ5_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    AffineSuperBlock q;
    quant_search::quantize_affine_super_block(x, 32, 31, 63, kAffineSearch, q);
    y[b].d = q.d;
    y[b].dmin = q.dmin;
    pack_scales_mins(q, y[b].scales);
    pack_nibble_pairs(q.code, y[b].qs);
    std::memset(y[b].qh, 0, sizeof y[b].qh);
    for (int i = 0; i < kQK_K; ++i)
      y[b].qh[i % 32] = static_cast<uint8_t>(y[b].qh[i % 32] | ((q.code[i] >> 4) << (i / 32)));
  }
}

void quantize_row_q6_K_ref(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    ScaledSuperBlock q;
    quant_search::quantize_scaled_super_block(x, 16, Levels::range(-32, 31), kUniformSearch, Levels::range(-128, 127),
                                              q);
    y[b].d = q.d;
    std::memset(y[b].ql, 0, sizeof y[b].ql);
    std::memset(y[b].qh, 0, sizeof y[b].qh);
    // In each half of 128: value 32 s + l has its low nibble in ql[64 half + l + 32 (s & 1)]
    // (low for s < 2, high otherwise) and its top two bits at qh[32 half + l] >> 2s.
    for (int i = 0; i < kQK_K; ++i) {
      const int half = i / 128, s = (i % 128) / 32, l = i % 32;
      uint8_t& low = y[b].ql[64 * half + l + 32 * (s & 1)];
      low = static_cast<uint8_t>(low | ((q.code[i] & 0x0f) << (4 * (s / 2))));
      uint8_t& high = y[b].qh[32 * half + l];
      high = static_cast<uint8_t>(high | ((q.code[i] >> 4) << (2 * s)));
    }
    for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<int8_t>(q.scale[j]);
  }
}

void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    for (int i = 0; i < kQK_K; ++i) {
      const int half = i / 128, s = (i % 128) / 32, l = i % 32;
      const uint8_t sc = x[b].scales[i / 16];
      const int q = (x[b].qs[32 * half + l] >> (2 * s)) & 3;
      y[i] = d * static_cast<float>(sc & 0x0f) * static_cast<float>(q) - dmin * static_cast<float>(sc >> 4);
    }
  }
}

void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_fp32(x[b].d);
    for (int i = 0; i < kQK_K; ++i) {
      const int half = i / 128, s = (i % 128) / 32, l = i % 32;
      const int low = (x[b].qs[32 * half + l] >> (2 * s)) & 3;
      const int high = (x[b].hmask[l] >> (i / 32)) & 1;
      const int scale = q3_K_scale(i / 16, x[b].scales) - 32;
      y[i] = d * static_cast<float>(scale) * static_cast<float>(low + 4 * high - 4);
    }
  }
}

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    for (int i = 0; i < kQK_K; ++i) {
      const int j = i / 32;  // sub-block; pairs of sub-blocks share 32 bytes of nibbles
      uint8_t scale, min;
      k_scale_min(j, x[b].scales, scale, min);
      const uint8_t byte = x[b].qs[32 * (j / 2) + i % 32];
      const int q = (j % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      y[i] = d * static_cast<float>(scale) * static_cast<float>(q) - dmin * static_cast<float>(min);
    }
  }
}

void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    for (int i = 0; i < kQK_K; ++i) {
      const int j = i / 32;
      uint8_t scale, min;
      k_scale_min(j, x[b].scales, scale, min);
      const uint8_t byte = x[b].qs[32 * (j / 2) + i % 32];
      const int low = (j % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      const int high = (x[b].qh[i % 32] >> j) & 1;
      y[i] = d * static_cast<float>(scale) * static_cast<float>(low | (high << 4)) - dmin * static_cast<float>(min);
    }
  }
}

void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = fp16_to_fp32(x[b].d);
    for (int i = 0; i < kQK_K; ++i) {
      const int half = i / 128, s = (i % 128) / 32, l = i % 32;
      const uint8_t lbyte = x[b].ql[64 * half + l + 32 * (s & 1)];
      const int low = s < 2 ? (lbyte & 0x0f) : (lbyte >> 4);
      const int high = (x[b].qh[32 * half + l] >> (2 * s)) & 3;
      y[i] = d * static_cast<float>(x[b].scales[i / 16]) * static_cast<float>((low | (high << 4)) - 32);
    }
  }
}

void quantize_row_q8_K_ref(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float amax = 0.0f;
    for (int i = 0; i < kQK_K; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(&y[b].d, &d, sizeof d);
    for (int i = 0; i < kQK_K; ++i) {
      const float v = std::round(x[i] * id);  // NaN and infinities clamp as in quantize_row_q8_0_ref
      y[b].qs[i] = static_cast<int8_t>(std::isnan(v) ? 0 : std::clamp(v, -127.0f, 127.0f));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) sum += y[b].qs[i];
      y[b].bsums[j] = static_cast<int16_t>(sum);
    }
  }
}

void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    float d;
    std::memcpy(&d, &x[b].d, sizeof d);  // q8_K tensors are only 2-byte aligned (storage_alignment)
    for (int i = 0; i < kQK_K; ++i) y[i] = d * static_cast<float>(x[b].qs[i]);
  }
}

}  // namespace tensorpc
