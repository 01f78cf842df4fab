// The traits table of every DType.
#include "tensorpc/dtype.h"

#include <cstring>

#include "core/quant.h"

namespace tensorpc {
namespace {

void f32_to_float(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void f32_from_float(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

void f16_to_float(const void* src, float* dst, int64_t n) {
  convert_row_f16_to_f32(static_cast<const uint16_t*>(src), dst, n);
}
void f16_from_float(const float* src, void* dst, int64_t n) {
  convert_row_f32_to_f16(src, static_cast<uint16_t*>(dst), n);
}
void bf16_to_float(const void* src, float* dst, int64_t n) {
  convert_row_bf16_to_f32(static_cast<const uint16_t*>(src), dst, n);
}
void bf16_from_float(const float* src, void* dst, int64_t n) {
  convert_row_f32_to_bf16(src, static_cast<uint16_t*>(dst), n);
}
void q8_0_to_float(const void* src, float* dst, int64_t n) {
  dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
}
void q8_0_from_float(const float* src, void* dst, int64_t n) {
  quantize_row_q8_0_ref(src, static_cast<BlockQ8_0*>(dst), n);
}
void q4_0_to_float(const void* src, float* dst, int64_t n) {
  dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
}
void q4_0_from_float(const float* src, void* dst, int64_t n) {
  quantize_row_q4_0_ref(src, static_cast<BlockQ4_0*>(dst), n);
}

constexpr DTypeTraits kTraits[] = {
    {DType::f32, "f32", 1, 4, false, f32_to_float, f32_from_float},
    {DType::f16, "f16", 1, 2, false, f16_to_float, f16_from_float},
    {DType::bf16, "bf16", 1, 2, false, bf16_to_float, bf16_from_float},
    {DType::i32, "i32", 1, 4, false, nullptr, nullptr},
    {DType::q8_0, "q8_0", kQK, sizeof(BlockQ8_0), true, q8_0_to_float, q8_0_from_float},
    {DType::q4_0, "q4_0", kQK, sizeof(BlockQ4_0), true, q4_0_to_float, q4_0_from_float},
};

}  // namespace

const DTypeTraits& traits(DType type) {
  for (const DTypeTraits& t : kTraits) {
    if (t.type == type) return t;
  }
  // Only reachable through a cast of an unchecked integer; ids from outside
  // go through dtype_from_id first.
  return kTraits[0];
}

std::optional<DType> dtype_from_id(uint32_t id) {
  for (const DTypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == id) return t.type;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeTraits& t : kTraits) {
    if (name == t.name) return t.type;
  }
  return std::nullopt;
}

}  // namespace tensorpc
