// Opening a GGUF file: the one pass that validates everything (see gguf.h).
//
// GgufParser walks the header, the metadata, the tensor infos and the data
// section's layout with a bounds-checked cursor. Every count is checked
// against the bytes left before anything is allocated for it, so a lying
// count fails at once; storage grows only with entries actually present,
// so memory stays proportional to the file. Errors name the key, the tensor,
// the type id or the offset that is wrong. The accessors (gguf_values.cpp)
// can then rely on what was checked here.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "model/gguf/file_io.h"
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_format.h"

namespace tensorpc {

using gguf_format::ByteReader;
using gguf_format::quoted;

namespace {

// Steps over one value of `type`, checking every length and every bool.
Status skip_value(ByteReader& r, GgufType type, int depth, const std::string& what) {
  switch (type) {
    case GgufType::string: {
      std::string_view s;
      return r.read_string(s, what);
    }
    case GgufType::boolean: {
      const uint64_t at = r.pos();
      uint8_t b = 0;
      TENSORPC_RETURN_IF_ERROR(r.read(b, what));
      if (b > 1) {
        return invalid_argument(what + ": bool value " + std::to_string(b) + " at offset " + std::to_string(at) +
                                " is neither 0 nor 1");
      }
      return Status();
    }
    case GgufType::array: {
      if (depth >= gguf_format::kMaxArrayDepth) {
        return invalid_argument(what + ": arrays nested deeper than " + std::to_string(gguf_format::kMaxArrayDepth) +
                                " levels at offset " + std::to_string(r.pos()));
      }
      uint32_t elem_id = 0;
      uint64_t count = 0;
      TENSORPC_RETURN_IF_ERROR(r.read(elem_id, what));
      if (!gguf_format::is_valid_type(elem_id)) {
        return unsupported(what + ": unknown array element type id " + std::to_string(elem_id) + " at offset " +
                           std::to_string(r.pos() - 4));
      }
      const auto elem = static_cast<GgufType>(elem_id);
      TENSORPC_RETURN_IF_ERROR(r.read(count, what));
      const uint64_t min = gguf_format::min_size(elem);
      if (count > r.remaining() / min) {
        return invalid_argument(what + ": array of " + std::to_string(count) + " " + to_string(elem) +
                                " values at offset " + std::to_string(r.pos() - 12) + " cannot fit in the " +
                                std::to_string(r.remaining()) + " bytes left");
      }
      const uint64_t fixed = gguf_format::fixed_size(elem);
      if (fixed != 0 && elem != GgufType::boolean) return r.skip(count * fixed, what);
      for (uint64_t i = 0; i < count; ++i) TENSORPC_RETURN_IF_ERROR(skip_value(r, elem, depth + 1, what));
      return Status();
    }
    default: return r.skip(gguf_format::fixed_size(type), what);
  }
}

}  // namespace

class GgufParser {
 public:
  explicit GgufParser(GgufFile& f) : f_(f), r_(f.bytes_) {}

  Status parse() {
    uint64_t n_tensors = 0, n_kv = 0;
    TENSORPC_RETURN_IF_ERROR(parse_header(n_tensors, n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) TENSORPC_RETURN_IF_ERROR(parse_kv(i));
    for (size_t i = 0; i < f_.keys_.size(); ++i) {
      if (!f_.key_index_.emplace(f_.keys_[i].name, i).second) {
        return invalid_argument("duplicate metadata key " + quoted(f_.keys_[i].name));
      }
    }
    TENSORPC_RETURN_IF_ERROR(parse_alignment());
    for (uint64_t i = 0; i < n_tensors; ++i) TENSORPC_RETURN_IF_ERROR(parse_tensor_info(i));
    TENSORPC_RETURN_IF_ERROR(unsupported_types_error());
    for (size_t i = 0; i < f_.tensors_.size(); ++i) {
      if (!f_.tensor_index_.emplace(f_.tensors_[i].name, i).second) {
        return invalid_argument("duplicate tensor name " + quoted(f_.tensors_[i].name));
      }
    }
    return place_tensors();
  }

 private:
  Status parse_header(uint64_t& n_tensors, uint64_t& n_kv) {
    const std::span<const uint8_t> b = f_.bytes_;
    if (b.size() >= 4 && !std::equal(b.begin(), b.begin() + 4, gguf_format::kMagic)) {
      char hex[40];
      std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", b[0], b[1], b[2], b[3]);
      return invalid_argument(std::string("not a GGUF file: the magic is ") + hex + ", not 47 47 55 46 (\"GGUF\")");
    }
    TENSORPC_RETURN_IF_ERROR(r_.skip(4, "the magic"));
    TENSORPC_RETURN_IF_ERROR(r_.read(f_.version_, "the version"));
    const uint32_t v = f_.version_;
    if (v != 2 && v != 3) {
      if (__builtin_bswap32(v) == 2 || __builtin_bswap32(v) == 3) {
        return unsupported("big-endian GGUF files are not supported (version field " + std::to_string(v) + ")");
      }
      return unsupported("GGUF version " + std::to_string(v) + " is not supported (only 2 and 3)");
    }
    TENSORPC_RETURN_IF_ERROR(r_.read(n_tensors, "the tensor count"));
    TENSORPC_RETURN_IF_ERROR(r_.read(n_kv, "the metadata count"));
    if (n_kv > r_.remaining() / gguf_format::kMinKvSize) {
      return invalid_argument("metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                              std::to_string(r_.remaining()) + " bytes after the header");
    }
    if (n_tensors > r_.remaining() / gguf_format::kMinTensorInfoSize) {
      return invalid_argument("tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                              std::to_string(r_.remaining()) + " bytes after the header");
    }
    return Status();
  }

  Status parse_kv(uint64_t i) {
    const std::string what = "metadata key #" + std::to_string(i);
    std::string_view name;
    TENSORPC_RETURN_IF_ERROR(r_.read_string(name, what));
    if (name.empty()) return invalid_argument(what + " at offset " + std::to_string(r_.pos() - 8) + " is empty");
    const std::string what_named = "metadata key " + quoted(name);
    uint32_t type_id = 0;
    TENSORPC_RETURN_IF_ERROR(r_.read(type_id, what_named));
    if (!gguf_format::is_valid_type(type_id)) {
      return unsupported(what_named + ": unknown value type id " + std::to_string(type_id) + " at offset " +
                         std::to_string(r_.pos() - 4));
    }
    GgufKeyInfo k;
    k.name = std::string(name);
    k.type = static_cast<GgufType>(type_id);
    k.value_offset = r_.pos();
    TENSORPC_RETURN_IF_ERROR(skip_value(r_, k.type, 0, what_named));
    if (k.type == GgufType::array) {
      // Validated by skip_value: the element type and count are there.
      ByteReader head(f_.bytes_, k.value_offset);
      uint32_t elem = 0;
      TENSORPC_RETURN_IF_ERROR(head.read(elem, what_named));
      TENSORPC_RETURN_IF_ERROR(head.read(k.array_count, what_named));
      k.array_type = static_cast<GgufType>(elem);
    }
    f_.keys_.push_back(std::move(k));
    return Status();
  }

  Status parse_alignment() {
    const GgufKeyInfo* k = f_.find_key(gguf_format::kAlignmentKey);
    if (k == nullptr) return Status();
    if (k->type != GgufType::u32) {
      return invalid_argument(quoted(gguf_format::kAlignmentKey) + " is " + to_string(k->type) + ", not uint32");
    }
    TENSORPC_ASSIGN_OR_RETURN(uint32_t a, f_.get_u32(gguf_format::kAlignmentKey));
    if (a == 0 || (a & (a - 1)) != 0) {
      return invalid_argument(quoted(gguf_format::kAlignmentKey) + " is " + std::to_string(a) + ", not a power of two");
    }
    f_.alignment_ = a;
    return Status();
  }

  Status parse_tensor_info(uint64_t i) {
    const std::string what = "tensor info #" + std::to_string(i);
    std::string_view name;
    TENSORPC_RETURN_IF_ERROR(r_.read_string(name, what));
    // A tensor is found by its name: an empty one names nothing (the writer refuses it too).
    if (name.empty())
      return invalid_argument(what + " at offset " + std::to_string(r_.pos() - 8) + " has an empty name");
    const std::string t = "tensor " + quoted(name);
    uint32_t n_dims = 0;
    TENSORPC_RETURN_IF_ERROR(r_.read(n_dims, t + ": n_dims"));
    if (n_dims < 1 || n_dims > 4) {
      return invalid_argument(t + ": " + std::to_string(n_dims) + " dims at offset " + std::to_string(r_.pos() - 4) +
                              " (1 to 4 are supported)");
    }
    GgufTensorInfo info;
    info.name = std::string(name);
    info.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      TENSORPC_RETURN_IF_ERROR(r_.read(ne, t + ": ne[" + std::to_string(d) + "]"));
      if (ne > static_cast<uint64_t>(INT64_MAX)) {
        return invalid_argument(t + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne) + " is too large");
      }
      info.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type_id = 0;
    TENSORPC_RETURN_IF_ERROR(r_.read(type_id, t + ": type"));
    TENSORPC_RETURN_IF_ERROR(r_.read(info.offset, t + ": offset"));

    const std::optional<DType> type = dtype_from_id(type_id);
    if (!type || *type == DType::q8_K) {  // q8_K is an activation format, never stored
      // Every such tensor is named at once after the loop; the rest of this
      // entry does not depend on the type, so parsing goes on.
      unsupported_.push_back(quoted(name) + " (" + gguf_type_name(type_id) + ")");
      return Status();
    }
    info.type = *type;
    int64_t n = 1;
    for (int64_t ne : info.ne) {
      if (__builtin_mul_overflow(n, ne, &n)) return invalid_argument(t + ": the element count overflows int64");
    }
    const int64_t bs = block_size(info.type);
    if (info.ne[0] % bs != 0) {
      return invalid_argument(t + ": ne[0] = " + std::to_string(info.ne[0]) + " is not a multiple of " +
                              std::to_string(bs) + ", the block size of " + name_of(info.type));
    }
    uint64_t bytes = static_cast<uint64_t>(info.ne[0] / bs);
    bool overflow = __builtin_mul_overflow(bytes, block_bytes(info.type), &bytes);
    for (int d = 1; d < 4; ++d) overflow |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(info.ne[d]), &bytes);
    if (overflow) return invalid_argument(t + ": the byte size overflows");
    info.nbytes = bytes;
    if (info.offset % f_.alignment_ != 0) {
      return invalid_argument(t + ": data offset " + std::to_string(info.offset) +
                              " is not a multiple of the alignment " + std::to_string(f_.alignment_));
    }
    f_.tensors_.push_back(std::move(info));
    return Status();
  }

  // One error for every tensor whose type tensorpc does not run.
  Status unsupported_types_error() const {
    if (unsupported_.empty()) return Status();
    std::string list;
    for (const std::string& u : unsupported_) list += (list.empty() ? "" : ", ") + u;
    std::string runnable;
    for (DType d : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0,
                    DType::q5_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K, DType::iq4_nl,
                    DType::iq4_xs, DType::mxfp4, DType::i32}) {
      runnable += (runnable.empty() ? "" : ", ") + std::string(name_of(d));
    }
    return unsupported(std::to_string(unsupported_.size()) + " tensor" + (unsupported_.size() == 1 ? " has a type" : "s have types") +
                       " tensorpc does not run: " + list + " (it runs " + runnable + ")");
  }

  // Finds the data section and gives every tensor its bytes there.
  Status place_tensors() {
    const uint64_t size = f_.bytes_.size();
    const uint64_t a = f_.alignment_;
    f_.data_offset_ = (r_.pos() + a - 1) / a * a;
    if (f_.tensors_.empty()) return Status();
    if (f_.data_offset_ > size) {
      return invalid_argument("truncated: the file ends at " + std::to_string(size) +
                              ", before the data section at offset " + std::to_string(f_.data_offset_));
    }
    const uint64_t data_size = size - f_.data_offset_;
    for (GgufTensorInfo& t : f_.tensors_) {
      if (t.offset > data_size || t.nbytes > data_size - t.offset) {
        return invalid_argument("tensor " + quoted(t.name) + ": its " + std::to_string(t.nbytes) +
                                " bytes at data offset " + std::to_string(t.offset) + " (file offset " +
                                std::to_string(f_.data_offset_ + t.offset) + ") run past the end of the file (" +
                                std::to_string(size) + " bytes)");
      }
      t.bytes = f_.bytes_.subspan(f_.data_offset_ + t.offset, t.nbytes);
    }
    // Overlap: sorted by offset, each tensor must end before the next begins.
    std::vector<const GgufTensorInfo*> order;
    order.reserve(f_.tensors_.size());
    for (const GgufTensorInfo& t : f_.tensors_) {
      if (t.nbytes > 0) order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](auto* x, auto* y) { return x->offset < y->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensorInfo& prev = *order[i - 1];
      if (prev.offset + prev.nbytes > order[i]->offset) {
        return invalid_argument("tensor " + quoted(order[i]->name) + " at data offset " +
                                std::to_string(order[i]->offset) + " overlaps tensor " + quoted(prev.name) + " at " +
                                std::to_string(prev.offset) + " (" + std::to_string(prev.nbytes) + " bytes)");
      }
    }
    return Status();
  }

  GgufFile& f_;
  std::vector<std::string> unsupported_;  // "'name' (type)" of each tensor of a type tensorpc does not run
  ByteReader r_;
};

const char* to_string(GgufType type) {
  switch (type) {
    case GgufType::u8: return "uint8";
    case GgufType::i8: return "int8";
    case GgufType::u16: return "uint16";
    case GgufType::i16: return "int16";
    case GgufType::u32: return "uint32";
    case GgufType::i32: return "int32";
    case GgufType::f32: return "float32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "uint64";
    case GgufType::i64: return "int64";
    case GgufType::f64: return "float64";
  }
  return "unknown";
}

GgufFile::~GgufFile() = default;

StatusOr<std::unique_ptr<GgufFile>> GgufFile::open_memory(std::span<const uint8_t> bytes) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = bytes;
  TENSORPC_RETURN_IF_ERROR(GgufParser(*f).parse());
  return f;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::open_owned(std::vector<uint8_t> bytes) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->owned_ = std::move(bytes);
  f->bytes_ = f->owned_;
  TENSORPC_RETURN_IF_ERROR(GgufParser(*f).parse());
  return f;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  TENSORPC_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> m, MappedFile::open(path));
  StatusOr<std::unique_ptr<GgufFile>> f = open_memory(m->bytes());
  if (!f.ok()) return f.status().with_context(path);
  (*f)->mapping_ = std::move(m);
  return f;
}

const FileIdentity* GgufFile::identity() const { return mapping_ ? &mapping_->identity() : nullptr; }

const GgufKeyInfo* GgufFile::find_key(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &keys_[it->second];
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tensorpc
