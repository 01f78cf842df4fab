// GgufWriter: validation of what is added, and the encoder (see
// gguf_writer.h). The encoder writes through a GgufByteSink so the same code fills
// a memory vector (encode) or streams to a file (write) without first
// building the whole file in memory.
#include "model/gguf/gguf_writer.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <variant>

#include "model/gguf/file_io.h"
#include "model/gguf/gguf_format.h"

namespace tensorpc {

using gguf_format::quoted;

namespace {

// Every element of an array value has its element type, recursively.
Status check_value(const GgufValue& v, int depth, const std::string& key) {
  if (v.type() != GgufType::array) return Status();
  if (depth >= gguf_format::kMaxArrayDepth) {
    return invalid_argument("metadata key " + quoted(key) + ": arrays nested deeper than " +
                            std::to_string(gguf_format::kMaxArrayDepth) + " levels");
  }
  for (const GgufValue& item : std::get<GgufValue::Array>(v.v)) {
    if (item.type() != v.array_type) {
      return invalid_argument("metadata key " + quoted(key) + ": an array of " + to_string(v.array_type) + " holds a " +
                              to_string(item.type()));
    }
    TENSORPC_RETURN_IF_ERROR(check_value(item, depth + 1, key));
  }
  return Status();
}

template <typename T>
GgufValue array_of(GgufType type, const std::vector<T>& xs) {
  GgufValue::Array items;
  items.reserve(xs.size());
  for (const T& x : xs) items.push_back(GgufValue::of(x));
  return GgufValue::array(type, std::move(items));
}

}  // namespace

// Where encoded bytes go; small writes are gathered, tensor bytes pass through.
class GgufByteSink {
 public:
  virtual ~GgufByteSink() = default;
  virtual Status write(std::span<const uint8_t> bytes) = 0;

  template <typename T>
  Status put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    return write(b);
  }
  Status put_string(std::string_view s) {
    TENSORPC_RETURN_IF_ERROR(put<uint64_t>(s.size()));
    return write({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  Status put_zeros(uint64_t n) {
    static constexpr uint8_t kZeros[256] = {};
    while (n > 0) {
      const uint64_t k = std::min<uint64_t>(n, sizeof kZeros);
      TENSORPC_RETURN_IF_ERROR(write({kZeros, k}));
      n -= k;
    }
    return Status();
  }
  Status put_value(const GgufValue& v) {
    return std::visit(
        [&](const auto& x) -> Status {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            return put_string(x);
          } else if constexpr (std::is_same_v<T, GgufValue::Array>) {
            TENSORPC_RETURN_IF_ERROR(put<uint32_t>(static_cast<uint32_t>(v.array_type)));
            TENSORPC_RETURN_IF_ERROR(put<uint64_t>(x.size()));
            for (const GgufValue& item : x) TENSORPC_RETURN_IF_ERROR(put_value(item));
            return Status();
          } else if constexpr (std::is_same_v<T, bool>) {
            return put<uint8_t>(x ? 1 : 0);
          } else {
            return put<T>(x);
          }
        },
        v.v);
  }
};

namespace {

class VectorSink final : public GgufByteSink {
 public:
  explicit VectorSink(std::vector<uint8_t>& out) : out_(out) {}
  Status write(std::span<const uint8_t> bytes) override {
    out_.insert(out_.end(), bytes.begin(), bytes.end());
    return Status();
  }

 private:
  std::vector<uint8_t>& out_;
};

// Buffers small writes so a file of many keys is not a syscall per integer.
class FileSink final : public GgufByteSink {
 public:
  explicit FileSink(AtomicFileWriter& file) : file_(file) {}
  Status write(std::span<const uint8_t> bytes) override {
    if (bytes.size() >= kBufferSize) {
      TENSORPC_RETURN_IF_ERROR(flush());
      return file_.write(bytes);
    }
    if (buffer_.size() + bytes.size() > kBufferSize) TENSORPC_RETURN_IF_ERROR(flush());
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    return Status();
  }
  Status flush() {
    TENSORPC_RETURN_IF_ERROR(file_.write(buffer_));
    buffer_.clear();
    return Status();
  }

 private:
  static constexpr size_t kBufferSize = 1 << 16;
  AtomicFileWriter& file_;
  std::vector<uint8_t> buffer_;
};

}  // namespace

Status GgufWriter::add(std::string key, GgufValue value) {
  if (key.empty()) return invalid_argument("a metadata key must not be empty");
  if (key == gguf_format::kAlignmentKey) {
    return invalid_argument(quoted(key) + " is written from the writer's alignment; pass it to the constructor");
  }
  for (const Kv& kv : kvs_) {
    if (kv.key == key) return invalid_argument("duplicate metadata key " + quoted(key));
  }
  TENSORPC_RETURN_IF_ERROR(check_value(value, 0, key));
  kvs_.push_back({std::move(key), std::move(value)});
  return Status();
}

Status GgufWriter::add_string_array(std::string key, const std::vector<std::string>& v) {
  return add(std::move(key), array_of(GgufType::string, v));
}
Status GgufWriter::add_f32_array(std::string key, const std::vector<float>& v) {
  return add(std::move(key), array_of(GgufType::f32, v));
}
Status GgufWriter::add_i32_array(std::string key, const std::vector<int32_t>& v) {
  return add(std::move(key), array_of(GgufType::i32, v));
}

StatusOr<uint64_t> GgufWriter::check_tensor(const std::string& name, DType type, std::span<const int64_t> ne) const {
  const std::string t = "tensor " + quoted(name);
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {  // offsets are computed from it as tensors are added
    return invalid_argument("GGUF alignment " + std::to_string(alignment_) + " is not a power of two");
  }
  if (name.empty()) return invalid_argument("a tensor name must not be empty");
  for (const TensorEntry& e : tensors_) {
    if (e.name == name) return invalid_argument("duplicate tensor name " + quoted(name));
  }
  if (ne.empty() || ne.size() > 4) {
    return invalid_argument(t + ": " + std::to_string(ne.size()) + " dims (1 to 4 are supported)");
  }
  if (!dtype_from_id(static_cast<uint32_t>(type))) return invalid_argument(t + ": not a supported type");
  uint64_t expected = 1;
  bool overflow = false;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) return invalid_argument(t + ": ne[" + std::to_string(d) + "] is negative");
    const uint64_t n = d == 0 ? static_cast<uint64_t>(ne[0] / block_size(type)) : static_cast<uint64_t>(ne[d]);
    overflow |= __builtin_mul_overflow(expected, n, &expected);
  }
  overflow |= __builtin_mul_overflow(expected, block_bytes(type), &expected);
  if (overflow) return invalid_argument(t + ": the byte size overflows");
  if (ne[0] % block_size(type) != 0) {
    return invalid_argument(t + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of " +
                            std::to_string(block_size(type)) + ", the block size of " + name_of(type));
  }
  return expected;
}

Status GgufWriter::add_entry(TensorEntry entry) {
  const uint64_t a = alignment_;
  entry.offset = (data_size_ + a - 1) / a * a;
  data_size_ = entry.offset + entry.nbytes;
  tensors_.push_back(std::move(entry));
  return Status();
}

Status GgufWriter::add_tensor_ref(std::string name, DType type, std::span<const int64_t> ne,
                                  std::span<const uint8_t> bytes) {
  TENSORPC_ASSIGN_OR_RETURN(const uint64_t expected, check_tensor(name, type, ne));
  if (bytes.size() != expected) {
    return invalid_argument("tensor " + quoted(name) + ": " + std::to_string(bytes.size()) +
                            " bytes given, its shape needs " + std::to_string(expected));
  }
  return add_entry({std::move(name), type, std::vector<int64_t>(ne.begin(), ne.end()), {}, bytes, 0, bytes.size()});
}

Status GgufWriter::add_tensor(std::string name, DType type, std::span<const int64_t> ne,
                              std::span<const uint8_t> bytes) {
  TENSORPC_RETURN_IF_ERROR(add_tensor_ref(std::move(name), type, ne, bytes));
  TensorEntry& e = tensors_.back();
  e.owned.assign(bytes.begin(), bytes.end());
  e.bytes = e.owned;  // the vector's buffer stays put when tensors_ grows
  return Status();
}

Status GgufWriter::add_tensor_producer(std::string name, DType type, std::span<const int64_t> ne,
                                       TensorProducer produce) {
  TENSORPC_ASSIGN_OR_RETURN(const uint64_t expected, check_tensor(name, type, ne));
  if (!produce) return invalid_argument("tensor " + quoted(name) + ": no producer of its bytes");
  return add_entry(
      {std::move(name), type, std::vector<int64_t>(ne.begin(), ne.end()), {}, {}, 0, expected, std::move(produce)});
}

Status GgufWriter::emit(GgufByteSink& s) const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    return invalid_argument("GGUF alignment " + std::to_string(alignment_) + " is not a power of two");
  }
  const bool write_alignment = always_write_alignment_ || alignment_ != gguf_format::kDefaultAlignment;
  uint64_t pos = 0;  // bytes written so far, to know the padding before the data section
  struct Counting final : GgufByteSink {
    GgufByteSink& inner;
    uint64_t& pos;
    Counting(GgufByteSink& i, uint64_t& p) : inner(i), pos(p) {}
    Status write(std::span<const uint8_t> b) override {
      pos += b.size();
      return inner.write(b);
    }
  } c(s, pos);

  TENSORPC_RETURN_IF_ERROR(c.write(gguf_format::kMagic));
  TENSORPC_RETURN_IF_ERROR(c.put<uint32_t>(gguf_format::kVersion));
  TENSORPC_RETURN_IF_ERROR(c.put<uint64_t>(tensors_.size()));
  TENSORPC_RETURN_IF_ERROR(c.put<uint64_t>(kvs_.size() + (write_alignment ? 1 : 0)));
  if (write_alignment) {
    TENSORPC_RETURN_IF_ERROR(c.put_string(gguf_format::kAlignmentKey));
    TENSORPC_RETURN_IF_ERROR(c.put<uint32_t>(static_cast<uint32_t>(GgufType::u32)));
    TENSORPC_RETURN_IF_ERROR(c.put<uint32_t>(alignment_));
  }
  for (const Kv& kv : kvs_) {
    TENSORPC_RETURN_IF_ERROR(c.put_string(kv.key));
    TENSORPC_RETURN_IF_ERROR(c.put<uint32_t>(static_cast<uint32_t>(kv.value.type())));
    TENSORPC_RETURN_IF_ERROR(c.put_value(kv.value));
  }
  for (const TensorEntry& t : tensors_) {
    TENSORPC_RETURN_IF_ERROR(c.put_string(t.name));
    TENSORPC_RETURN_IF_ERROR(c.put<uint32_t>(static_cast<uint32_t>(t.ne.size())));
    for (int64_t n : t.ne) TENSORPC_RETURN_IF_ERROR(c.put<uint64_t>(static_cast<uint64_t>(n)));
    TENSORPC_RETURN_IF_ERROR(c.put<uint32_t>(static_cast<uint32_t>(t.type)));
    TENSORPC_RETURN_IF_ERROR(c.put<uint64_t>(t.offset));
  }
  if (tensors_.empty()) return Status();  // no data section, so no padding before it
  const uint64_t a = alignment_;
  TENSORPC_RETURN_IF_ERROR(c.put_zeros((a - pos % a) % a));
  uint64_t data_pos = 0;
  for (const TensorEntry& t : tensors_) {
    TENSORPC_RETURN_IF_ERROR(c.put_zeros(t.offset - data_pos));
    if (t.produce) {
      StatusOr<std::vector<uint8_t>> bytes = t.produce();
      if (!bytes.ok()) return bytes.status().with_context("tensor " + quoted(t.name));
      if (bytes.value().size() != t.nbytes) {
        return internal_error("tensor " + quoted(t.name) + ": its producer made " +
                              std::to_string(bytes.value().size()) + " bytes, its shape needs " +
                              std::to_string(t.nbytes));
      }
      TENSORPC_RETURN_IF_ERROR(c.write(bytes.value()));
    } else {
      TENSORPC_RETURN_IF_ERROR(c.write(t.bytes));
    }
    data_pos = t.offset + t.nbytes;
  }
  return Status();
}

StatusOr<std::vector<uint8_t>> GgufWriter::encode() const {
  std::vector<uint8_t> out;
  VectorSink sink(out);
  TENSORPC_RETURN_IF_ERROR(emit(sink));
  return out;
}

Status GgufWriter::write(const std::string& path) const {
  TENSORPC_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> file, AtomicFileWriter::create(path));
  FileSink sink(*file);
  TENSORPC_RETURN_IF_ERROR(emit(sink));
  TENSORPC_RETURN_IF_ERROR(sink.flush());
  return file->commit();
}

}  // namespace tensorpc
