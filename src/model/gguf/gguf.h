// GGUF files: the value types shared by reader and writer, and the reader.
//
// A GGUF file (versions 2 and 3 share one layout; only little-endian files
// are read) is a header, metadata key/value pairs, tensor infos, and an
// aligned data section holding the tensors' bytes. GgufFile maps the file,
// validates all of it once in open() — every length, count, type, shape and
// offset against the bytes actually there — and then answers questions
// about it without copying the tensor bytes.
//
// Ownership: a GgufFile owns its mapping (open) or its bytes (open_owned),
// or borrows the caller's bytes (open_memory: they must outlive it). Every GgufTensorInfo::bytes
// span points into those bytes and is valid as long as the GgufFile is.
// A GgufFile is immutable after open, so const use from several threads is
// safe. A file truncated by another process while mapped can still raise
// SIGBUS; nothing in user space prevents that.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tensorpc/dtype.h"
#include "tensorpc/status.h"

namespace tensorpc {

class MappedFile;
struct FileIdentity;

// Metadata value types; the numbers are the format's type ids.
enum class GgufType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
const char* to_string(GgufType type);

// One metadata value, decoded. The variant's alternatives are in type-id
// order, so `type()` is the index of the alternative held. An array keeps its
// element type in `array_type`, so that an empty array still has one; every
// element of `v`'s vector has that type (arrays may nest).
struct GgufValue {
  using Array = std::vector<GgufValue>;
  std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, Array, uint64_t,
               int64_t, double>
      v;
  GgufType array_type = GgufType::u8;

  GgufType type() const { return static_cast<GgufType>(v.index()); }

  // Convenience constructors, one per type; an array needs its element type.
  template <typename T>
  static GgufValue of(T x) {
    GgufValue g;
    g.v = std::move(x);
    return g;
  }
  // Without this a string literal would decay to a pointer and become a bool.
  static GgufValue of(const char* s) { return of(std::string(s)); }
  static GgufValue array(GgufType element_type, Array items) {
    GgufValue g;
    g.v = std::move(items);
    g.array_type = element_type;
    return g;
  }
};

// What the metadata section says about one key, in file order.
struct GgufKeyInfo {
  std::string name;
  GgufType type = GgufType::u8;
  GgufType array_type = GgufType::u8;  // arrays only
  uint64_t array_count = 0;            // arrays only
  uint64_t value_offset = 0;           // file offset of the value (after its type id)
};

// One tensor of the file, validated: a supported type, 1 to 4 dims whose
// product fits int64, ne[0] a multiple of the type's block size, and bytes
// that lie inside the data section, aligned, overlapping no other tensor's.
struct GgufTensorInfo {
  std::string name;
  DType type = DType::f32;
  int n_dims = 1;                         // as written in the file (1..4)
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // unused dims are 1
  uint64_t offset = 0;                    // relative to the data section
  uint64_t nbytes = 0;                    // dense size of the tensor
  std::span<const uint8_t> bytes;         // the tensor's bytes in the file

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
 public:
  // Maps and validates the file at `path`.
  static StatusOr<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Validates `bytes` as a GGUF file; they are borrowed and must outlive the
  // result. open() maps the file and calls this.
  static StatusOr<std::unique_ptr<GgufFile>> open_memory(std::span<const uint8_t> bytes);
  // The same for bytes the result keeps (GgufWriter::encode's output, say).
  static StatusOr<std::unique_ptr<GgufFile>> open_owned(std::vector<uint8_t> bytes);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // File offset of the data section (aligned); tensor offsets count from it.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t size() const { return bytes_.size(); }
  // The version of the file mapped (open() only; null for bytes in memory).
  const FileIdentity* identity() const;

  // ---- metadata ------------------------------------------------------------
  // Every key in file order, with its type; iterate this to list metadata.
  std::span<const GgufKeyInfo> keys() const { return keys_; }
  bool has(std::string_view key) const { return find_key(key) != nullptr; }
  // Null when absent.
  const GgufKeyInfo* find_key(std::string_view key) const;

  // The value of any type. Missing keys are not_found.
  StatusOr<GgufValue> value(std::string_view key) const;

  // Typed getters. Missing keys are not_found; a value of another type is
  // invalid_argument, except that integer getters take any integer type whose
  // value fits, and float getters take f32 or f64 values that fit.
  StatusOr<uint32_t> get_u32(std::string_view key) const;
  StatusOr<int32_t> get_i32(std::string_view key) const;
  StatusOr<uint64_t> get_u64(std::string_view key) const;
  StatusOr<int64_t> get_i64(std::string_view key) const;
  StatusOr<float> get_f32(std::string_view key) const;
  StatusOr<double> get_f64(std::string_view key) const;
  StatusOr<bool> get_bool(std::string_view key) const;
  StatusOr<std::string> get_string(std::string_view key) const;
  StatusOr<std::vector<std::string>> get_string_array(std::string_view key) const;
  StatusOr<std::vector<float>> get_f32_array(std::string_view key) const;
  StatusOr<std::vector<int32_t>> get_i32_array(std::string_view key) const;

  // The same, returning `fallback` when the key is absent (a present key of
  // the wrong type is still an error, so a typo in a file is not hidden).
  StatusOr<uint32_t> get_u32(std::string_view key, uint32_t fallback) const;
  StatusOr<int32_t> get_i32(std::string_view key, int32_t fallback) const;
  StatusOr<uint64_t> get_u64(std::string_view key, uint64_t fallback) const;
  StatusOr<float> get_f32(std::string_view key, float fallback) const;
  StatusOr<bool> get_bool(std::string_view key, bool fallback) const;
  StatusOr<std::string> get_string(std::string_view key, std::string fallback) const;

  // ---- tensors -------------------------------------------------------------
  std::span<const GgufTensorInfo> tensors() const { return tensors_; }
  // Null when there is no tensor of that name.
  const GgufTensorInfo* tensor(std::string_view name) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::unique_ptr<MappedFile> mapping_;  // open() only
  std::vector<uint8_t> owned_;           // open_owned() only
  std::span<const uint8_t> bytes_;       // the whole file
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyInfo> keys_;
  std::vector<GgufTensorInfo> tensors_;
  // Views into keys_/tensors_ names, which do not change after open.
  std::unordered_map<std::string_view, size_t> key_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace tensorpc
