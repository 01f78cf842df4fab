// libFuzzer target: arbitrary bytes as a GGUF file. Opening must never
// crash, read outside the bytes or allocate beyond a multiple of their size;
// when it succeeds, every accessor must work on every key and tensor, and
// what was read must re-encode through GgufWriter into a file that opens
// again with the same keys, values and tensor bytes (so the reader cannot
// accept something it misreads, and the writer cannot emit what the reader
// refuses).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <variant>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_tensors.h"
#include "model/gguf/gguf_writer.h"
#include "tensorpc/context.h"

namespace {

using namespace tensorpc;

// Every typed getter on one key; each may fail, none may crash.
void touch_getters(const GgufFile& f, const std::string& key) {
  (void)f.get_u32(key);
  (void)f.get_i32(key);
  (void)f.get_u64(key);
  (void)f.get_i64(key);
  (void)f.get_f32(key);
  (void)f.get_f64(key);
  (void)f.get_bool(key);
  (void)f.get_string(key);
  (void)f.get_string_array(key);
  (void)f.get_f32_array(key);
  (void)f.get_i32_array(key);
  (void)f.get_u32(key, 1);
  (void)f.get_string(key, "x");
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type() != b.type()) return false;
  if (a.type() == GgufType::array) {
    const auto& x = std::get<GgufValue::Array>(a.v);
    const auto& y = std::get<GgufValue::Array>(b.v);
    if (a.array_type != b.array_type || x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!same_value(x[i], y[i])) return false;
    }
    return true;
  }
  // Bitwise for floats, so NaNs compare equal to themselves.
  return std::visit(
      [&](const auto& va) {
        using T = std::decay_t<decltype(va)>;
        const T& vb = std::get<T>(b.v);
        if constexpr (std::is_same_v<T, std::string>) {
          return va == vb;
        } else if constexpr (std::is_arithmetic_v<T>) {
          return std::memcmp(&va, &vb, sizeof(T)) == 0;
        } else {
          return false;
        }
      },
      a.v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto opened = GgufFile::open_memory(std::span<const uint8_t>(data, size));
  if (!opened.ok()) {
    if (opened.status().message().empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  const GgufFile& f = **opened;
  if (f.alignment() == 0 || (f.alignment() & (f.alignment() - 1)) != 0) __builtin_trap();

  GgufWriter w(static_cast<uint32_t>(f.alignment()));
  for (const GgufKeyInfo& k : f.keys()) {
    if (f.find_key(k.name) != &k) __builtin_trap();
    touch_getters(f, k.name);
    auto v = f.value(k.name);
    if (!v.ok()) __builtin_trap();  // open() validated every value
    if (k.name != "general.alignment" && !w.add(k.name, std::move(*v)).ok()) __builtin_trap();
  }
  touch_getters(f, "no such key");

  Context ctx;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (f.tensor(t.name) != &t) __builtin_trap();
    const uint8_t* base = data + f.data_offset();
    if (t.bytes.data() != base + t.offset || t.bytes.size() != t.nbytes || t.offset % f.alignment() != 0) {
      __builtin_trap();
    }
    if (t.nbytes > 0 && (t.bytes.data() < data || t.bytes.data() + t.nbytes > data + size)) __builtin_trap();
    auto desc = new_gguf_tensor(ctx, t);
    if (!desc.ok() || (*desc)->nbytes() != t.nbytes) __builtin_trap();
    const std::span<const int64_t> ne(t.ne.data(), static_cast<size_t>(t.n_dims));
    if (!w.add_tensor_ref(t.name, t.type, ne, t.bytes).ok()) __builtin_trap();
  }

  auto again_bytes = w.encode();
  if (!again_bytes.ok()) __builtin_trap();
  auto again = GgufFile::open_memory(*again_bytes);
  if (!again.ok()) __builtin_trap();
  const GgufFile& g = **again;
  // The writer records the alignment itself, and only when it is not 32.
  const size_t keys = f.keys().size() - (f.has("general.alignment") ? 1 : 0) + (f.alignment() != 32 ? 1 : 0);
  if (g.keys().size() != keys || g.tensors().size() != f.tensors().size()) __builtin_trap();
  if (g.alignment() != f.alignment()) __builtin_trap();
  for (const GgufKeyInfo& k : f.keys()) {
    if (k.name == "general.alignment") continue;
    if (!same_value(f.value(k.name).value(), g.value(k.name).value())) __builtin_trap();
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    const GgufTensorInfo* u = g.tensor(t.name);
    if (u == nullptr || u->type != t.type || u->ne != t.ne || u->nbytes != t.nbytes) __builtin_trap();
    if (t.nbytes > 0 && std::memcmp(u->bytes.data(), t.bytes.data(), t.nbytes) != 0) __builtin_trap();
  }
  return 0;
}
