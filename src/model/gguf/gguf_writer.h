// GgufWriter: builds a GGUF v3 file from metadata and tensors, for tests and
// for tools that produce models (a training or conversion script).
//
// Metadata is written in the order added, then the tensor infos, then the
// data section: every tensor starts at a multiple of the alignment (the gaps
// are zero bytes) and the file ends with the last tensor's bytes. The
// alignment is written as `general.alignment` (uint32) unless it is the
// default 32, so default files carry no key a reader must know
// (always_write_alignment() writes it anyway).
//
// Ownership: add_tensor copies the bytes; add_tensor_ref borrows them, and
// they must stay valid until the last write()/encode() that uses them;
// add_tensor_producer keeps a function that makes them when the file is
// written, so a converter holds one tensor's bytes at a time.
// Every add_* validates its input, so a writer never produces a file that
// GgufFile would refuse.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "tensorpc/dtype.h"
#include "tensorpc/status.h"

namespace tensorpc {

class GgufByteSink;  // gguf_writer.cpp: where encoded bytes go

class GgufWriter {
 public:
  // alignment: a power of two (32 is the format's default).
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}

  // Writes `general.alignment` even when it is the default 32, so that a copy
  // of a file that states it keeps the key.
  void always_write_alignment() { always_write_alignment_ = true; }

  // A key of any type. Fails for an empty or duplicate key, for an array
  // whose elements do not all have its element type, for arrays nested
  // deeper than the reader accepts, and for `general.alignment` (set it
  // through the constructor).
  Status add(std::string key, GgufValue value);

  Status add_u8(std::string key, uint8_t v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_i8(std::string key, int8_t v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_u16(std::string key, uint16_t v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_i16(std::string key, int16_t v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_u32(std::string key, uint32_t v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_i32(std::string key, int32_t v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_u64(std::string key, uint64_t v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_i64(std::string key, int64_t v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_f32(std::string key, float v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_f64(std::string key, double v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_bool(std::string key, bool v) { return add(std::move(key), GgufValue::of(v)); }
  Status add_string(std::string key, std::string v) { return add(std::move(key), GgufValue::of(std::move(v))); }
  Status add_string_array(std::string key, const std::vector<std::string>& v);
  Status add_f32_array(std::string key, const std::vector<float>& v);
  Status add_i32_array(std::string key, const std::vector<int32_t>& v);

  // A tensor of `type` and shape `ne` (1 to 4 dims, ne[0] a multiple of the
  // type's block size) whose dense bytes are exactly `bytes`. Names must be
  // unique and non-empty.
  Status add_tensor(std::string name, DType type, std::span<const int64_t> ne, std::span<const uint8_t> bytes);
  Status add_tensor_ref(std::string name, DType type, std::span<const int64_t> ne, std::span<const uint8_t> bytes);
  // A tensor whose bytes `produce` returns when the file is encoded (once
  // per write()/encode(), in tensor order). Bytes of another size than the
  // shape needs, or an error from `produce`, fail that write.
  using TensorProducer = std::function<StatusOr<std::vector<uint8_t>>()>;
  Status add_tensor_producer(std::string name, DType type, std::span<const int64_t> ne, TensorProducer produce);

  // The whole file, in memory.
  StatusOr<std::vector<uint8_t>> encode() const;
  // The whole file, written to `path` atomically (temporary file + rename):
  // on failure `path` is left as it was.
  Status write(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    GgufValue value;
  };
  struct TensorEntry {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;      // empty for add_tensor_ref
    std::span<const uint8_t> bytes;  // into `owned`, or borrowed
    uint64_t offset = 0;             // in the data section
    uint64_t nbytes = 0;
    TensorProducer produce = {};  // set for add_tensor_producer: `bytes` is empty
  };
  // The dense byte size of a tensor of `type` and shape `ne`, once name, type and shape are checked.
  StatusOr<uint64_t> check_tensor(const std::string& name, DType type, std::span<const int64_t> ne) const;
  Status add_entry(TensorEntry entry);
  Status emit(GgufByteSink& sink) const;

  uint32_t alignment_;
  bool always_write_alignment_ = false;
  std::vector<Kv> kvs_;
  std::vector<TensorEntry> tensors_;
  uint64_t data_size_ = 0;  // the data section so far, padding included
};

}  // namespace tensorpc
