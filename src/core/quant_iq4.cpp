// The non-linear 4-bit formats iq4_nl (blocks of 32) and iq4_xs (super-blocks of 256 with
// 6-bit sub-block scales); layouts in quant.h.
//
// Quantizers (the searches are in quant_search.cpp): the codes index kIQ4NLValues, so the
// search maps the block's signed extreme to -127 or to 113, shifted by up to ±12 grid units
// (about ±10% of the scale) in steps of 2, takes the nearest grid level per value, fits the
// scale by least squares, and refines the best by alternating levels and scale. iq4_nl rounds
// that scale to f16. iq4_xs does it per sub-block of 32, fits the eight scales as 6-bit signed
// integers (-32..31) times an f16 d, refits d, and chooses the codes again with the stored scales.
#include "core/float16.h"
#include "core/quant.h"
#include "core/quant_search.h"

namespace tensorpc {
namespace {

using quant_search::Levels;

constexpr quant_search::ScaleSearch kGridSearch{2.0f, 6};

Levels iq4_levels() { return Levels::of_table(kIQ4NLValues, 16); }

// Byte j of 16 holds code j low and code j + 16 high.
void pack_nibbles(const uint8_t* code, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(code[j] | (code[j + 16] << 4));
}

}  // namespace

void quantize_row_iq4_nl_ref(const float* x, BlockIQ4_NL* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    quant_search::ScaledBlock q;
    quant_search::quantize_scaled_block(x, iq4_levels(), kGridSearch, q);
    y[b].d = q.d;
    pack_nibbles(q.code, y[b].qs);
  }
}

void quantize_row_iq4_xs_ref(const float* x, BlockIQ4_XS* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quant_search::ScaledSuperBlock q;
    quant_search::quantize_scaled_super_block(x, 32, iq4_levels(), kGridSearch, Levels::range(-32, 31), q);
    y[b].d = q.d;
    y[b].scales_h = 0;
    for (int j = 0; j < kQK_K / 64; ++j) y[b].scales_l[j] = 0;
    for (int j = 0; j < kQK_K / 32; ++j) {
      const int s = q.scale[j] + 32;  // stored with a +32 offset, 6 bits: low nibble and top two bits
      y[b].scales_l[j / 2] = static_cast<uint8_t>(y[b].scales_l[j / 2] | ((s & 0x0f) << (4 * (j % 2))));
      y[b].scales_h = static_cast<uint16_t>(y[b].scales_h | ((s >> 4) << (2 * j)));
      pack_nibbles(q.code + 32 * j, y[b].qs + 16 * j);
    }
  }
}

void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) dequantize_levels32(x[b].qs, kIQ4NLValues, fp16_to_fp32(x[b].d), y);
}

void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int s = 0; s < kQK_K / 32; ++s, y += 32) {
      const int scale = ((x[b].scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | (((x[b].scales_h >> (2 * s)) & 3) << 4);
      dequantize_levels32(x[b].qs + 16 * s, kIQ4NLValues, d * static_cast<float>(scale - 32), y);
    }
  }
}

}  // namespace tensorpc
