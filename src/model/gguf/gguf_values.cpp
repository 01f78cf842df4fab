// GgufFile's metadata accessors: values are decoded from the mapping on
// demand (open() validated their layout and kept only where each starts), so
// opening a model with a 150k-token vocabulary costs nothing until the
// tokenizer asks for it. Reads still go through the bounds-checked cursor:
// a check is cheaper than a trust argument.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_format.h"

namespace tensorpc {

using gguf_format::ByteReader;
using gguf_format::quoted;

namespace {

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::u16:
    case GgufType::i16:
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::u64:
    case GgufType::i64: return true;
    default: return false;
  }
}

template <typename T>
Status read_as(ByteReader& r, __int128& out, std::string_view what) {
  T v{};
  TENSORPC_RETURN_IF_ERROR(r.read(v, what));
  out = v;
  return Status();
}

// One integer of any integer type, widened so that every value compares.
Status read_integer(ByteReader& r, GgufType t, __int128& out, std::string_view what) {
  switch (t) {
    case GgufType::u8: return read_as<uint8_t>(r, out, what);
    case GgufType::i8: return read_as<int8_t>(r, out, what);
    case GgufType::u16: return read_as<uint16_t>(r, out, what);
    case GgufType::i16: return read_as<int16_t>(r, out, what);
    case GgufType::u32: return read_as<uint32_t>(r, out, what);
    case GgufType::i32: return read_as<int32_t>(r, out, what);
    case GgufType::u64: return read_as<uint64_t>(r, out, what);
    case GgufType::i64: return read_as<int64_t>(r, out, what);
    default: return internal_error(std::string(what) + ": not an integer type");
  }
}

template <typename T>
Status narrow_integer(__int128 v, T& out, std::string_view what) {
  if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
    const bool neg = v < 0;
    const auto mag = static_cast<unsigned __int128>(neg ? -v : v);
    // Every value here came from a 64-bit field, so the magnitude fits.
    return invalid_argument(std::string(what) + ": value " + (neg ? "-" : "") +
                            std::to_string(static_cast<uint64_t>(mag)) + " is out of range");
  }
  out = static_cast<T>(v);
  return Status();
}

// One float of type f32 or f64, as T (float or double).
template <typename T>
Status read_float(ByteReader& r, GgufType t, T& out, std::string_view what) {
  if (t == GgufType::f32) {
    float f = 0;
    TENSORPC_RETURN_IF_ERROR(r.read(f, what));
    out = f;
    return Status();
  }
  double d = 0;
  TENSORPC_RETURN_IF_ERROR(r.read(d, what));
  // A finite double beyond float's range has no float value (converting it is undefined).
  if (std::isfinite(d) && std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max())) {
    return invalid_argument(std::string(what) + ": value " + std::to_string(d) + " is out of range of float32");
  }
  out = static_cast<T>(d);
  return Status();
}

bool is_float(GgufType t) { return t == GgufType::f32 || t == GgufType::f64; }

Status decode(ByteReader& r, GgufType type, int depth, GgufValue& out, std::string_view what);

template <typename T>
Status decode_scalar(ByteReader& r, GgufValue& out, std::string_view what) {
  T v{};
  TENSORPC_RETURN_IF_ERROR(r.read(v, what));
  out.v = v;
  return Status();
}

Status decode(ByteReader& r, GgufType type, int depth, GgufValue& out, std::string_view what) {
  switch (type) {
    case GgufType::u8: return decode_scalar<uint8_t>(r, out, what);
    case GgufType::i8: return decode_scalar<int8_t>(r, out, what);
    case GgufType::u16: return decode_scalar<uint16_t>(r, out, what);
    case GgufType::i16: return decode_scalar<int16_t>(r, out, what);
    case GgufType::u32: return decode_scalar<uint32_t>(r, out, what);
    case GgufType::i32: return decode_scalar<int32_t>(r, out, what);
    case GgufType::f32: return decode_scalar<float>(r, out, what);
    case GgufType::u64: return decode_scalar<uint64_t>(r, out, what);
    case GgufType::i64: return decode_scalar<int64_t>(r, out, what);
    case GgufType::f64: return decode_scalar<double>(r, out, what);
    case GgufType::boolean: {
      uint8_t b = 0;
      TENSORPC_RETURN_IF_ERROR(r.read(b, what));
      out.v = b != 0;
      return Status();
    }
    case GgufType::string: {
      std::string_view s;
      TENSORPC_RETURN_IF_ERROR(r.read_string(s, what));
      out.v = std::string(s);
      return Status();
    }
    case GgufType::array: {
      if (depth >= gguf_format::kMaxArrayDepth) return invalid_argument(std::string(what) + ": nested too deep");
      uint32_t elem = 0;
      uint64_t count = 0;
      TENSORPC_RETURN_IF_ERROR(r.read(elem, what));
      TENSORPC_RETURN_IF_ERROR(r.read(count, what));
      if (!gguf_format::is_valid_type(elem)) return invalid_argument(std::string(what) + ": bad element type");
      out.array_type = static_cast<GgufType>(elem);
      // Re-checked so that the reservation below can never be a lie.
      if (count > r.remaining() / gguf_format::min_size(out.array_type)) {
        return invalid_argument(std::string(what) + ": array count " + std::to_string(count) + " too large");
      }
      GgufValue::Array items(count);
      for (GgufValue& item : items) TENSORPC_RETURN_IF_ERROR(decode(r, out.array_type, depth + 1, item, what));
      out.v = std::move(items);
      return Status();
    }
  }
  return internal_error(std::string(what) + ": unknown type");
}

}  // namespace

// ---- lookup and the generic value ----------------------------------------

namespace {

StatusOr<const GgufKeyInfo*> lookup(const GgufFile& f, std::string_view key) {
  const GgufKeyInfo* k = f.find_key(key);
  if (k == nullptr) return not_found("metadata key " + quoted(key) + " not found");
  return k;
}

Status wrong_type(const GgufKeyInfo& k, const char* wanted) {
  std::string is = to_string(k.type);
  if (k.type == GgufType::array) is += std::string(" of ") + to_string(k.array_type);
  return invalid_argument("metadata key " + quoted(k.name) + " is " + is + ", not " + wanted);
}

}  // namespace

StatusOr<GgufValue> GgufFile::value(std::string_view key) const {
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, lookup(*this, key));
  ByteReader r(bytes_, k->value_offset);
  GgufValue out;
  TENSORPC_RETURN_IF_ERROR(decode(r, k->type, 0, out, "metadata key " + quoted(key)));
  return out;
}

// ---- scalars ---------------------------------------------------------------

namespace {

template <typename T>
StatusOr<T> get_integer(const GgufFile& f, std::string_view key, std::span<const uint8_t> bytes, const char* name) {
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, lookup(f, key));
  if (!is_integer(k->type)) return wrong_type(*k, name);
  const std::string what = "metadata key " + quoted(key);
  ByteReader r(bytes, k->value_offset);
  __int128 wide = 0;
  TENSORPC_RETURN_IF_ERROR(read_integer(r, k->type, wide, what));
  T v{};
  TENSORPC_RETURN_IF_ERROR(narrow_integer(wide, v, what + " (" + to_string(k->type) + " read as " + name + ")"));
  return v;
}

template <typename T>
StatusOr<T> get_floating(const GgufFile& f, std::string_view key, std::span<const uint8_t> bytes, const char* name) {
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, lookup(f, key));
  if (!is_float(k->type)) return wrong_type(*k, name);
  ByteReader r(bytes, k->value_offset);
  T v{};
  TENSORPC_RETURN_IF_ERROR(read_float(r, k->type, v, "metadata key " + quoted(key)));
  return v;
}

}  // namespace

StatusOr<uint32_t> GgufFile::get_u32(std::string_view key) const {
  return get_integer<uint32_t>(*this, key, bytes_, "uint32");
}
StatusOr<int32_t> GgufFile::get_i32(std::string_view key) const {
  return get_integer<int32_t>(*this, key, bytes_, "int32");
}
StatusOr<uint64_t> GgufFile::get_u64(std::string_view key) const {
  return get_integer<uint64_t>(*this, key, bytes_, "uint64");
}
StatusOr<int64_t> GgufFile::get_i64(std::string_view key) const {
  return get_integer<int64_t>(*this, key, bytes_, "int64");
}
StatusOr<float> GgufFile::get_f32(std::string_view key) const {
  return get_floating<float>(*this, key, bytes_, "float32");
}
StatusOr<double> GgufFile::get_f64(std::string_view key) const {
  return get_floating<double>(*this, key, bytes_, "float64");
}

StatusOr<bool> GgufFile::get_bool(std::string_view key) const {
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, lookup(*this, key));
  if (k->type != GgufType::boolean) return wrong_type(*k, "bool");
  ByteReader r(bytes_, k->value_offset);
  uint8_t b = 0;
  TENSORPC_RETURN_IF_ERROR(r.read(b, "metadata key " + quoted(key)));
  return b != 0;
}

StatusOr<std::string> GgufFile::get_string(std::string_view key) const {
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, lookup(*this, key));
  if (k->type != GgufType::string) return wrong_type(*k, "string");
  ByteReader r(bytes_, k->value_offset);
  std::string_view s;
  TENSORPC_RETURN_IF_ERROR(r.read_string(s, "metadata key " + quoted(key)));
  return std::string(s);
}

StatusOr<uint32_t> GgufFile::get_u32(std::string_view key, uint32_t fallback) const {
  return has(key) ? get_u32(key) : fallback;
}
StatusOr<int32_t> GgufFile::get_i32(std::string_view key, int32_t fallback) const {
  return has(key) ? get_i32(key) : fallback;
}
StatusOr<uint64_t> GgufFile::get_u64(std::string_view key, uint64_t fallback) const {
  return has(key) ? get_u64(key) : fallback;
}
StatusOr<float> GgufFile::get_f32(std::string_view key, float fallback) const {
  return has(key) ? get_f32(key) : fallback;
}
StatusOr<bool> GgufFile::get_bool(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}
StatusOr<std::string> GgufFile::get_string(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : StatusOr<std::string>(std::move(fallback));
}

// ---- arrays ----------------------------------------------------------------

namespace {

// Finds an array key, checks its element type with `accepts`, and positions
// a reader at its first element.
template <typename Accepts>
StatusOr<const GgufKeyInfo*> open_array(const GgufFile& f, std::string_view key, Accepts accepts, const char* name,
                                        std::span<const uint8_t> bytes, ByteReader& r) {
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, lookup(f, key));
  if (k->type != GgufType::array || !accepts(k->array_type)) return wrong_type(*k, name);
  r = ByteReader(bytes, k->value_offset + 4 + 8);
  return k;
}

}  // namespace

StatusOr<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  ByteReader r(bytes_);
  const auto is_string = [](GgufType t) { return t == GgufType::string; };
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, open_array(*this, key, is_string, "array of string", bytes_, r));
  const std::string what = "metadata key " + quoted(key);
  std::vector<std::string> out;
  out.reserve(k->array_count);  // bounded by the file: each string takes >= 8 bytes
  for (uint64_t i = 0; i < k->array_count; ++i) {
    std::string_view s;
    TENSORPC_RETURN_IF_ERROR(r.read_string(s, what));
    out.emplace_back(s);
  }
  return out;
}

StatusOr<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
  ByteReader r(bytes_);
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, open_array(*this, key, is_float, "array of float32", bytes_, r));
  const std::string what = "metadata key " + quoted(key);
  std::vector<float> out(k->array_count);
  for (float& v : out) TENSORPC_RETURN_IF_ERROR(read_float(r, k->array_type, v, what));
  return out;
}

StatusOr<std::vector<int32_t>> GgufFile::get_i32_array(std::string_view key) const {
  ByteReader r(bytes_);
  TENSORPC_ASSIGN_OR_RETURN(const GgufKeyInfo* k, open_array(*this, key, is_integer, "array of int32", bytes_, r));
  const std::string what = "metadata key " + quoted(key);
  std::vector<int32_t> out(k->array_count);
  for (int32_t& v : out) {
    __int128 wide = 0;
    TENSORPC_RETURN_IF_ERROR(read_integer(r, k->array_type, wide, what));
    TENSORPC_RETURN_IF_ERROR(narrow_integer(wide, v, what));
  }
  return out;
}

}  // namespace tensorpc
