// Element types of tensors and their traits.
//
// The numeric values are the GGUF/ggml type ids, so a type read from a GGUF
// file maps to a DType one to one. Quantized types are stored in blocks along
// ne[0], exactly as GGUF stores them (see src/core/quant.h for the layouts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tensorpc {

enum class DType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q2_K = 10,
  q3_K = 11,
  q4_K = 12,
  q5_K = 13,
  q6_K = 14,
  q8_K = 15,  // activations of the K kernels only: not accepted as a weight type
  iq4_nl = 20,
  iq4_xs = 23,
  i32 = 26,
  bf16 = 30,
  mxfp4 = 39,  // 32 E2M1 values sharing a power-of-two scale (gpt-oss's expert weights)
};

// Converts `n` elements of a type to f32. `n` is a multiple of block_size.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
// Converts (quantizes) `n` f32 values into a type. `n` is a multiple of block_size.
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);

struct DTypeTraits {
  DType type;
  const char* name;       // "f32", "q4_0", …
  int64_t block_size;     // elements per block (1 for plain types)
  size_t block_bytes;     // bytes per block
  bool is_quantized;
  ToFloatFn to_float;     // null for i32
  FromFloatFn from_float; // null for i32
};

// The traits of `type`. Every enumerator of DType has an entry.
const DTypeTraits& traits(DType type);

// Parses a raw type id (from a file or the wire); nullopt for unknown ids.
std::optional<DType> dtype_from_id(uint32_t id);
// Parses a name such as "q8_0"; nullopt for unknown names.
std::optional<DType> dtype_from_name(std::string_view name);
// The GGUF name of a raw type id, whether tensorpc runs it or not ("q6_K", "iq2_xxs"), or
// "type id N (unknown)" for an id GGUF does not define.
std::string gguf_type_name(uint32_t id);

inline const char* name_of(DType type) { return traits(type).name; }
inline int64_t block_size(DType type) { return traits(type).block_size; }
inline size_t block_bytes(DType type) { return traits(type).block_bytes; }
inline bool is_quantized(DType type) { return traits(type).is_quantized; }
// The alignment kernels assume for a tensor's start and strides: the element
// size for plain types, 2 for quantized blocks (their fp16 scale), 4 for
// q8_K (its f32 scale) and 1 for mxfp4 (17-byte blocks of bytes).
inline size_t storage_alignment(DType type) {
  if (type == DType::q8_K) return 4;
  if (type == DType::mxfp4) return 1;
  return is_quantized(type) ? 2 : block_bytes(type);
}

// Bytes of one row of `n` elements; `n` must be a multiple of block_size.
inline uint64_t row_bytes(DType type, int64_t n) {
  return static_cast<uint64_t>(n / block_size(type)) * block_bytes(type);
}

}  // namespace tensorpc
