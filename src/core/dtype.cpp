// The traits table of every DType.
#include "tensorpc/dtype.h"

#include <cstring>
#include <iterator>
#include <string>

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

// The two converters of a block format whose reference functions follow the naming pattern.
#define TENSORPC_BLOCK_CODECS(type, Block)                                           \
  void type##_to_float(const void* src, float* dst, int64_t n) {                    \
    dequantize_row_##type(static_cast<const Block*>(src), dst, n);                   \
  }                                                                                  \
  void type##_from_float(const float* src, void* dst, int64_t n) {                  \
    quantize_row_##type##_ref(src, static_cast<Block*>(dst), n);                    \
  }
TENSORPC_BLOCK_CODECS(q4_1, BlockQ4_1)
TENSORPC_BLOCK_CODECS(q5_0, BlockQ5_0)
TENSORPC_BLOCK_CODECS(q5_1, BlockQ5_1)
TENSORPC_BLOCK_CODECS(iq4_nl, BlockIQ4_NL)
TENSORPC_BLOCK_CODECS(q2_K, BlockQ2_K)
TENSORPC_BLOCK_CODECS(q3_K, BlockQ3_K)
TENSORPC_BLOCK_CODECS(q4_K, BlockQ4_K)
TENSORPC_BLOCK_CODECS(q5_K, BlockQ5_K)
TENSORPC_BLOCK_CODECS(q6_K, BlockQ6_K)
TENSORPC_BLOCK_CODECS(iq4_xs, BlockIQ4_XS)
TENSORPC_BLOCK_CODECS(mxfp4, BlockMXFP4)
TENSORPC_BLOCK_CODECS(q8_K, BlockQ8_K)
#undef TENSORPC_BLOCK_CODECS

constexpr DTypeTraits kTraits[] = {
    {DType::f32, "f32", 1, 4, false, f32_to_float, f32_from_float},
    {DType::f16, "f16", 1, 2, false, f16_to_float, f16_from_float},
    {DType::bf16, "bf16", 1, 2, false, bf16_to_float, bf16_from_float},
    {DType::i32, "i32", 1, 4, false, nullptr, nullptr},
    {DType::q8_0, "q8_0", kQK, sizeof(BlockQ8_0), true, q8_0_to_float, q8_0_from_float},
    {DType::q4_0, "q4_0", kQK, sizeof(BlockQ4_0), true, q4_0_to_float, q4_0_from_float},
    {DType::q4_1, "q4_1", kQK, sizeof(BlockQ4_1), true, q4_1_to_float, q4_1_from_float},
    {DType::q5_0, "q5_0", kQK, sizeof(BlockQ5_0), true, q5_0_to_float, q5_0_from_float},
    {DType::q5_1, "q5_1", kQK, sizeof(BlockQ5_1), true, q5_1_to_float, q5_1_from_float},
    {DType::iq4_nl, "iq4_nl", kQK, sizeof(BlockIQ4_NL), true, iq4_nl_to_float, iq4_nl_from_float},
    {DType::q2_K, "q2_K", kQK_K, sizeof(BlockQ2_K), true, q2_K_to_float, q2_K_from_float},
    {DType::q3_K, "q3_K", kQK_K, sizeof(BlockQ3_K), true, q3_K_to_float, q3_K_from_float},
    {DType::q4_K, "q4_K", kQK_K, sizeof(BlockQ4_K), true, q4_K_to_float, q4_K_from_float},
    {DType::q5_K, "q5_K", kQK_K, sizeof(BlockQ5_K), true, q5_K_to_float, q5_K_from_float},
    {DType::q6_K, "q6_K", kQK_K, sizeof(BlockQ6_K), true, q6_K_to_float, q6_K_from_float},
    {DType::iq4_xs, "iq4_xs", kQK_K, sizeof(BlockIQ4_XS), true, iq4_xs_to_float, iq4_xs_from_float},
    {DType::q8_K, "q8_K", kQK_K, sizeof(BlockQ8_K), true, q8_K_to_float, q8_K_from_float},
    {DType::mxfp4, "mxfp4", kQK, sizeof(BlockMXFP4), true, mxfp4_to_float, mxfp4_from_float},
};

// GGUF's type names by id; empty where an id was retired.
constexpr const char* kGgufTypeNames[] = {
    "f32",    "f16",   "q4_0",  "q4_1",   "",      "",      "q5_0",    "q5_1",   "q8_0",    "q8_1",
    "q2_K",   "q3_K",  "q4_K",  "q5_K",   "q6_K",  "q8_K",  "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
    "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8",    "i16",   "i32",     "i64",    "f64",     "iq1_m",
    "bf16",   "",      "",      "",       "tq1_0", "tq2_0", "",        "",       "",        "mxfp4",
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

std::string gguf_type_name(uint32_t id) {
  if (id < std::size(kGgufTypeNames) && kGgufTypeNames[id][0] != '\0') return kGgufTypeNames[id];
  return "type id " + std::to_string(id) + " (unknown)";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeTraits& t : kTraits) {
    if (name == t.name) return t.type;
  }
  return std::nullopt;
}

}  // namespace tensorpc
