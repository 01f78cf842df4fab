// Builds GGUF files byte by byte for the tests, independently of
// GgufWriter, so the format is pinned by the tests themselves and hostile
// files (lying lengths, bad types, overlapping tensors) can be made at will.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace tensorpc::test {

class GgufBytes {
 public:
  GgufBytes& u8(uint8_t v) { return raw(&v, 1); }
  GgufBytes& u32(uint32_t v) { return raw(&v, 4); }  // the tests run little-endian, as the format is
  GgufBytes& u64(uint64_t v) { return raw(&v, 8); }
  GgufBytes& f32(float v) { return raw(&v, 4); }
  GgufBytes& str(std::string_view s) { return u64(s.size()).raw(s.data(), s.size()); }
  GgufBytes& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), c, c + n);
    return *this;
  }
  GgufBytes& zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
  GgufBytes& pad_to(size_t alignment) { return zeros((alignment - bytes.size() % alignment) % alignment); }

  // "GGUF", version, tensor count, kv count.
  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
  }
  // A key with a uint32 value (type id 4).
  GgufBytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  // A tensor info: name, n_dims, dims, type id, offset.
  GgufBytes& tensor(std::string_view name, std::initializer_list<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }

  std::vector<uint8_t> bytes;
};

}  // namespace tensorpc::test
