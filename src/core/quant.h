// Block-quantized weight formats shared with GGUF files (q8_0, q4_0), their portable reference
// quantizers and dequantizers, and whole-row conversions between float and f16/bf16.
//
// The reference quantizers define the bytes: SIMD versions elsewhere must reproduce them
// (up to rounding ties, see tensorpc::cpu::KernelTable). Every function that takes blocks
// requires n to be a multiple of kQK.
#pragma once

#include <cstdint>

namespace tensorpc {

inline constexpr int64_t kQK = 32;  // values per block for q8_0 and q4_0

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

// Per block: d = max|x| / 127, q = round(x * (1/d)) (half away from zero), 0 when d == 0.
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t n);
// Per block: m = the value of largest magnitude, with its sign; d = m / -8; q = clamp(trunc(x/d + 8.5), 0, 15).
void quantize_row_q4_0_ref(const float* x, BlockQ4_0* y, int64_t n);

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);

void convert_row_f32_to_f16(const float* x, uint16_t* y, int64_t n);
void convert_row_f16_to_f32(const uint16_t* x, float* y, int64_t n);
void convert_row_f32_to_bf16(const float* x, uint16_t* y, int64_t n);
void convert_row_bf16_to_f32(const uint16_t* x, float* y, int64_t n);

}  // namespace tensorpc
