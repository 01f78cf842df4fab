// The out-of-line parts of WireWriter and WireReader (wire.h): strings and
// raw byte runs, the only variable-length primitives of the protocol.
#include "rpc/wire/wire.h"

namespace tensorpc::rpc {

void WireWriter::str(std::string_view s) {
  // A peer refuses longer strings, so cutting here keeps the frame valid
  // (the cut may split a UTF-8 sequence; strings are messages and names).
  const size_t n = s.size() < kMaxWireString ? s.size() : kMaxWireString;
  u32(static_cast<uint32_t>(n));
  raw(s.data(), n);
}

void WireWriter::raw(const void* data, size_t n) {
  if (n == 0) return;  // data may be null for an empty run
  const auto* p = static_cast<const uint8_t*>(data);
  bytes_.insert(bytes_.end(), p, p + n);
}

std::string WireReader::str() {
  const uint32_t n = u32();
  // An over-long length is a protocol violation, not merely a short read:
  // fail without trying to read (or allocate) that many bytes.
  if (n > kMaxWireString) {
    ok_ = false;
    return {};
  }
  const std::span<const uint8_t> b = raw(n);
  if (!ok_) return {};
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::span<const uint8_t> WireReader::raw(size_t n) {
  if (!ok_ || bytes_.size() - pos_ < n) {
    ok_ = false;
    return {};
  }
  const std::span<const uint8_t> out = bytes_.subspan(pos_, n);
  pos_ += n;
  return out;
}

}  // namespace tensorpc::rpc
