// GGUF format constants and a bounds-checked byte cursor, shared by the
// reader (gguf_reader.cpp, gguf_values.cpp) and the writer. Internal to
// src/model; users include gguf.h.
//
// Layout (all integers little-endian):
//   header   "GGUF", u32 version, u64 tensor_count, u64 kv_count
//   kv       string key, u32 value type, value
//   tensor   string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset
//   padding  to general.alignment (default 32), then the data section
// A string is u64 length + bytes (no terminator); an array is u32 element
// type + u64 count + the elements.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "model/gguf/gguf.h"
#include "tensorpc/status.h"

namespace tensorpc::gguf_format {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

inline constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr std::string_view kAlignmentKey = "general.alignment";
inline constexpr uint64_t kHeaderSize = 4 + 4 + 8 + 8;
// Deeper nesting is refused: it only serves to exhaust the stack.
inline constexpr int kMaxArrayDepth = 8;
// The smallest tensor info: empty name, one dim, type, offset.
inline constexpr uint64_t kMinTensorInfoSize = 8 + 4 + 8 + 4 + 8;
// The smallest key/value pair: empty key, type, a one-byte value.
inline constexpr uint64_t kMinKvSize = 8 + 4 + 1;

// 'name', for error messages. (Built by appending: GCC 12 warns falsely
// about "'" + std::string(s) + "'".)
inline std::string quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '\'';
  q += s;
  q += '\'';
  return q;
}

inline bool is_valid_type(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::f64); }

// Bytes of one value of a fixed-size type; 0 for string and array.
inline uint64_t fixed_size(GgufType t) {
  switch (t) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::boolean: return 1;
    case GgufType::u16:
    case GgufType::i16: return 2;
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::f32: return 4;
    case GgufType::u64:
    case GgufType::i64:
    case GgufType::f64: return 8;
    case GgufType::string:
    case GgufType::array: return 0;
  }
  return 0;
}

// The fewest bytes one value of type t can take: bounds a count against the
// bytes left before anything is allocated for it.
inline uint64_t min_size(GgufType t) {
  if (t == GgufType::string) return 8;
  if (t == GgufType::array) return 4 + 8;
  return fixed_size(t);
}

// Reads little-endian values from a span, refusing to step past its end.
// Errors name what was being read and the offset, counted from the start of
// the span (the start of the file).
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes, uint64_t pos = 0) : bytes_(bytes), pos_(pos) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return pos_ <= bytes_.size() ? bytes_.size() - pos_ : 0; }

  template <typename T>
  Status read(T& out, std::string_view what) {
    TENSORPC_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(&out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status();
  }

  // A string's bytes, viewed in place.
  Status read_string(std::string_view& out, std::string_view what) {
    uint64_t len = 0;
    TENSORPC_RETURN_IF_ERROR(read(len, what));
    if (len > remaining()) {
      return invalid_argument(std::string(what) + ": string length " + std::to_string(len) + " at offset " +
                              std::to_string(pos_ - 8) + " runs past the end of the file (" +
                              std::to_string(remaining()) + " bytes left)");
    }
    out = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return Status();
  }

  Status skip(uint64_t n, std::string_view what) {
    TENSORPC_RETURN_IF_ERROR(need(n, what));
    pos_ += n;
    return Status();
  }

 private:
  Status need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return invalid_argument("truncated: " + std::string(what) + " at offset " + std::to_string(pos_) + " needs " +
                              std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left in the file");
    }
    return Status();
  }

  std::span<const uint8_t> bytes_;
  uint64_t pos_;
};

}  // namespace tensorpc::gguf_format
