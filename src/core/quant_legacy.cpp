// The 32-value block formats beyond q8_0/q4_0: q4_1, q5_0 and q5_1 (layouts in quant.h).
//
// Quantizers (the searches are in quant_search.cpp), one candidate each and one refit, since
// these formats are chosen for speed (the first refit takes most of the gain of a search:
// measured on N(0, 1) data, bench/quant_bench):
// - q5_0: symmetric, levels -16..15. The block's signed extreme maps to -16; the scale is then
//   fitted by least squares for the nearest codes, and the codes chosen again for it.
// - q4_1, q5_1: scale and min, codes 0..15 / 0..31. The step (max - min) / 15 or 31; scale
//   and min fitted together by least squares for those codes, and the codes chosen again.
// The scales are rounded to f16 and the codes chosen again with the stored scales.
#include "core/float16.h"
#include "core/quant.h"
#include "core/quant_search.h"

namespace tensorpc {
namespace {

using quant_search::AffineBlock;
using quant_search::Levels;
using quant_search::ScaledBlock;

constexpr quant_search::MinSearch kAffineSearch{0.0f, 0, /*refine=*/1};
constexpr quant_search::ScaleSearch kScaledSearch{0.0f, 0, /*both_ends=*/false, /*refine=*/1};

// Bit j of a q5 block's qh, read as the little-endian u32 GGUF stores.
int high_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

// Codes 0..15 (or the low nibbles of 0..31): byte j holds code j low and code j + 16 high.
void pack_nibbles(const uint8_t* code, uint8_t* qs) {
  for (int j = 0; j < kQK / 2; ++j) qs[j] = static_cast<uint8_t>((code[j] & 0x0f) | ((code[j + kQK / 2] & 0x0f) << 4));
}

// The fifth bits of 32 codes 0..31, bit j of the little-endian u32.
void pack_high_bits(const uint8_t* code, uint8_t* qh) {
  for (int b = 0; b < 4; ++b) qh[b] = 0;
  for (int j = 0; j < kQK; ++j) qh[j / 8] = static_cast<uint8_t>(qh[j / 8] | ((code[j] >> 4) << (j % 8)));
}

}  // namespace

void quantize_row_q4_1_ref(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    AffineBlock q;
    quant_search::quantize_affine_block(x, 15, kAffineSearch, q);
    y[b].d = q.d;
    y[b].m = q.m;
    pack_nibbles(q.code, y[b].qs);
  }
}

void quantize_row_q5_0_ref(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    ScaledBlock q;
    quant_search::quantize_scaled_block(x, Levels::range(-16, 15), kScaledSearch, q);
    y[b].d = q.d;
    pack_nibbles(q.code, y[b].qs);
    pack_high_bits(q.code, y[b].qh);
  }
}

void quantize_row_q5_1_ref(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    AffineBlock q;
    quant_search::quantize_affine_block(x, 31, kAffineSearch, q);
    y[b].d = q.d;
    y[b].m = q.m;
    pack_nibbles(q.code, y[b].qs);
    pack_high_bits(q.code, y[b].qh);
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(x[b].qs[j] & 0x0f) + m;
      y[j + kQK / 2] = d * static_cast<float>(x[b].qs[j] >> 4) + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(((x[b].qs[j] & 0x0f) | (high_bit(x[b].qh, j) << 4)) - 16);
      y[j + kQK / 2] = d * static_cast<float>(((x[b].qs[j] >> 4) | (high_bit(x[b].qh, j + 16) << 4)) - 16);
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>((x[b].qs[j] & 0x0f) | (high_bit(x[b].qh, j) << 4)) + m;
      y[j + kQK / 2] = d * static_cast<float>((x[b].qs[j] >> 4) | (high_bit(x[b].qh, j + 16) << 4)) + m;
    }
  }
}

}  // namespace tensorpc
