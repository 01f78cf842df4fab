// Block-quantized weight formats shared with GGUF files, their portable reference quantizers and
// dequantizers, and whole-row conversions between float and f16/bf16.
//
// Each struct is the byte layout GGUF stores (the static_asserts pin the sizes). Two families:
// blocks of 32 values with one f16 scale (q4_0 … q8_0, iq4_nl; mxfp4 has a power-of-two
// exponent byte instead), and "K" super-blocks of 256
// values cut into sub-blocks of 16 or 32 with their own small integer scales (q2_K … q6_K,
// iq4_xs). q8_K is not a weight format: it is what activations are quantized to for the
// super-block kernels (an f32 scale, and the sums of each 16 quants for the min terms).
//
// The reference quantizers define the bytes: SIMD versions elsewhere must reproduce them
// (up to rounding ties, see tensorpc::cpu::KernelTable). Every function that takes blocks
// requires n to be a multiple of its block size (kQK or kQK_K).
#pragma once

#include <bit>
#include <cstdint>

namespace tensorpc {

inline constexpr int64_t kQK = 32;     // values per block of the 32-value formats
inline constexpr int64_t kQK_K = 256;  // values per super-block of the K formats

// value[i] = fp16(d) * qs[i]
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34, "BlockQ8_0 must match the GGUF byte layout");

// Byte j holds value j in its low nibble and value j+16 in its high nibble;
// value = fp16(d) * (nibble - 8).
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "BlockQ4_0 must match the GGUF byte layout");

// Nibbles as q4_0; value = fp16(d) * nibble + fp16(m).
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "BlockQ4_1 must match the GGUF byte layout");

// Nibbles as q4_0, and bit j of qh (little-endian u32) is bit 4 of value j;
// value = fp16(d) * (q - 16).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "BlockQ5_0 must match the GGUF byte layout");

// 5-bit q as q5_0; value = fp16(d) * q + fp16(m).
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "BlockQ5_1 must match the GGUF byte layout");

// Nibbles as q4_0, each an index into kIQ4NLValues; value = fp16(d) * kIQ4NLValues[nibble].
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "BlockIQ4_NL must match the GGUF byte layout");

// The 16 levels of iq4_nl and iq4_xs (a non-uniform grid, denser near zero).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// y[0..31] = d * levels[nibble] for 32 values whose nibbles lie in qs[0..15] as q4_0's.
inline void dequantize_levels32(const uint8_t* qs, const int8_t* levels, float d, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * levels[qs[j] & 0x0f];
    y[j + 16] = d * levels[qs[j] >> 4];
  }
}

// MXFP4 (the OCP microscaling format): an E8M0 exponent byte shared by 32 E2M1 codes, nibbles as
// q4_0. value = 2^(e - 127) * E2M1(nibble); kMXFP4Values holds twice the E2M1 values as integers,
// so value = e8m0_half_to_fp32(e) * kMXFP4Values[nibble]. No f16 field: the block is byte-aligned.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockMXFP4) == 17, "BlockMXFP4 must match the GGUF byte layout");

// 2 x E2M1 of each code: bit 3 the sign, bits 0-2 the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128), half the E8M0 scale 2^(e - 127), to go with kMXFP4Values: the float whose exponent
// field is e - 1 for e >= 2, and the subnormals 2^-128 and 2^-127 for e = 0 and 1. e = 255 (NaN in
// the OCP format) decodes as 2^127, as GGUF readers do; the quantizer never writes it.
inline float e8m0_half_to_fp32(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
  return std::bit_cast<float>(bits);
}

// 16 sub-blocks of 16. scales[j]: low nibble the scale, high nibble the min of sub-block j.
// qs: four 2-bit planes; in each half of 128 values, value 32*s + l is bits 2s..2s+1 of
// qs[32*half + l]. value = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "BlockQ2_K must match the GGUF byte layout");

// 16 sub-blocks of 16. Low 2 bits as q2_K; the third bit of value 32*p + l (p = 0..7, l < 32)
// is bit p of hmask[l]; value = d * (scale_j - 32) * (q - 4), q in 0..7. The 6-bit scale_j has
// its low nibble in scales[j] (j < 8) or scales[j - 8] >> 4, and its top two bits at
// scales[8 + j % 4] >> (2 * (j / 4)).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "BlockQ3_K must match the GGUF byte layout");

// 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes (see k_scale_min). In each
// 64 values, the first 32 are the low nibbles of 32 bytes of qs and the next 32 their high
// nibbles. value = d * scale_j * q - dmin * min_j.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "BlockQ4_K must match the GGUF byte layout");

// As q4_K with a fifth bit: bit 2p (first 32 of the 64) and 2p+1 (second 32) of qh[l] for the
// p-th group of 64. value = d * scale_j * q - dmin * min_j, q in 0..31.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "BlockQ5_K must match the GGUF byte layout");

// 16 sub-blocks of 16 with int8 scales. In each half of 128 values (ql 64 bytes, qh 32 bytes),
// value l + 32 s (l < 32, s = 0..3) takes its low nibble from ql[l + 32 (s & 1)] (low nibble for
// s < 2, high for s >= 2) and its top two bits from qh[l] >> 2s. value = d * scales[j] * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "BlockQ6_K must match the GGUF byte layout");

// 8 sub-blocks of 32 with 6-bit scales: low nibble (scales_l[j / 2] >> 4 (j % 2)), top two bits
// (scales_h >> 2j). Nibbles as iq4_nl per sub-block of 16 bytes.
// value = d * (scale_j - 32) * kIQ4NLValues[nibble].
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136, "BlockIQ4_XS must match the GGUF byte layout");

// Activations for the super-block kernels: value = d * qs[i]; bsums[j] = sum of qs[16j .. 16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "BlockQ8_K must match the GGUF byte layout");

// The 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block's 12 packed bytes.
inline void k_scale_min(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The 6-bit scale j (0..15, before the -32 offset) of a q3_K block's 12 packed bytes.
inline int q3_K_scale(int j, const uint8_t* s) {
  const int low = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return low | (high << 4);
}

// Per block: d = max|x| / 127, q = round(x * (1/d)) (half away from zero), 0 when d == 0.
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t n);
// Per block: m = the value of largest magnitude, with its sign; d = m / -8; q = clamp(trunc(x/d + 8.5), 0, 15).
void quantize_row_q4_0_ref(const float* x, BlockQ4_0* y, int64_t n);

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);

// The other formats (quant_legacy.cpp, quant_k.cpp, quant_iq4.cpp). Quantizers search for
// scales that minimise the squared error (no importance weights); see each file's header.
void quantize_row_q4_1_ref(const float* x, BlockQ4_1* y, int64_t n);
void quantize_row_q5_0_ref(const float* x, BlockQ5_0* y, int64_t n);
void quantize_row_q5_1_ref(const float* x, BlockQ5_1* y, int64_t n);
void quantize_row_iq4_nl_ref(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_row_q2_K_ref(const float* x, BlockQ2_K* y, int64_t n);
void quantize_row_q3_K_ref(const float* x, BlockQ3_K* y, int64_t n);
void quantize_row_q4_K_ref(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_K_ref(const float* x, BlockQ5_K* y, int64_t n);
void quantize_row_q6_K_ref(const float* x, BlockQ6_K* y, int64_t n);
void quantize_row_iq4_xs_ref(const float* x, BlockIQ4_XS* y, int64_t n);
// The GGUF reference rounding (quant_mxfp4.cpp): e from the block's largest finite magnitude,
// each value to the nearest code.
void quantize_row_mxfp4_ref(const float* x, BlockMXFP4* y, int64_t n);
// Activations: d = max|x| / 127, q = round(x / d) (half away from zero), and bsums.
void quantize_row_q8_K_ref(const float* x, BlockQ8_K* y, int64_t n);

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n);
void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n);
void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n);

void convert_row_f32_to_f16(const float* x, uint16_t* y, int64_t n);
void convert_row_f16_to_f32(const uint16_t* x, float* y, int64_t n);
void convert_row_f32_to_bf16(const float* x, uint16_t* y, int64_t n);
void convert_row_bf16_to_f32(const uint16_t* x, float* y, int64_t n);

}  // namespace tensorpc
