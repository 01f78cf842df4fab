// Explicit little-endian encoding: the only way bytes are put on or taken
// off the wire.
//
// WireWriter appends fields to a byte vector. WireReader reads fields from a
// span and never reads past its end: a read beyond it marks the reader failed,
// returns zero values, and every later read fails too, so a decoder can read
// all fields and check ok() once at the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tensorpc::rpc {

inline constexpr uint32_t kMaxWireString = 65536;

class WireWriter {
 public:
  void u8(uint8_t v) { bytes_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i32(int32_t v) { put(static_cast<uint32_t>(v), 4); }
  void i64(int64_t v) { put(static_cast<uint64_t>(v), 8); }
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    u32(bits);
  }
  // Strings longer than kMaxWireString are cut there.
  void str(std::string_view s);
  void raw(const void* data, size_t n);

  std::vector<uint8_t>& bytes() { return bytes_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> bytes_;
};

class WireReader {
 public:
  explicit WireReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint16_t u16() { return static_cast<uint16_t>(get(2)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  int32_t i32() { return static_cast<int32_t>(static_cast<uint32_t>(get(4))); }
  int64_t i64() { return static_cast<int64_t>(get(8)); }
  float f32() {
    const uint32_t bits = u32();
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  std::string str();
  // n raw bytes; an empty span (and failure) if fewer remain.
  std::span<const uint8_t> raw(size_t n);

  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? bytes_.size() - pos_ : 0; }
  // True when every byte was consumed and no read failed.
  bool done() const { return ok_ && pos_ == bytes_.size(); }

 private:
  uint64_t get(int n) {
    if (!ok_ || bytes_.size() - pos_ < static_cast<size_t>(n)) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(bytes_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace tensorpc::rpc
