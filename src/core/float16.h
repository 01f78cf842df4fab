// Scalar conversions between float and the two 16-bit float formats tensors are stored in:
// IEEE 754 binary16 ("f16", GGUF F16) and bfloat16 ("bf16", the top half of a float).
//
// Both directions round to nearest, ties to even, and keep inf/NaN/subnormals. The portable
// bit-manipulation versions live in `detail` so tests can check them even when the compiler
// substitutes the F16C instructions.
#pragma once

#include <bit>
#include <cstdint>

#ifdef __F16C__
#include <immintrin.h>
#endif

namespace tensorpc {
namespace detail {

inline uint16_t fp32_to_fp16_portable(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag >= 0x7f800000u) {
    // Inf stays inf; NaN keeps its top payload bits and is forced quiet so it cannot become inf.
    if (mag == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
  }
  // 65520 is the halfway point between the largest half (65504) and 2^16; it ties to the
  // "even" neighbour, which is inf.
  if (mag >= 0x477ff000u) return sign | 0x7c00u;
  if (mag < 0x38800000u) {
    // Result is a half subnormal (or zero): its integer mantissa is round(|f| * 2^24).
    // Anything at or below 2^-25 rounds to zero (2^-25 itself ties to the even zero).
    if (mag <= 0x33000000u) return sign;
    const uint32_t exp = mag >> 23;
    const uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24 for exp in [102, 112]
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // a carry into 0x400 is the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round away the low 13 mantissa bits. A carry
  // out of the mantissa correctly bumps the exponent.
  const uint32_t rebiased = mag - (112u << 23);
  uint32_t q = rebiased >> 13;
  const uint32_t rem = rebiased & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

inline float fp16_to_fp32_portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace detail

inline uint16_t fp32_to_fp16(float f) {
#ifdef __F16C__
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return detail::fp32_to_fp16_portable(f);
#endif
}

inline float fp16_to_fp32(uint16_t h) {
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return detail::fp16_to_fp32_portable(h);
#endif
}

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  // NaN: truncating could clear every payload bit and yield inf, so force a quiet-NaN bit.
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Round to nearest even on the 16 dropped bits; overflow correctly carries into inf.
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

}  // namespace tensorpc
