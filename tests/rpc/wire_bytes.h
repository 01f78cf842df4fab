// A message's encoding as bytes, and decoding from bytes: shared by the
// tests of the message codecs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "rpc/wire/messages.h"

namespace tensorpc::rpc {

template <typename M>
std::vector<uint8_t> bytes_of(const M& m) {
  WireWriter w;
  encode(w, m);
  return w.bytes();
}

template <typename M>
Status decode_bytes(std::span<const uint8_t> bytes, M& m) {
  WireReader r(bytes);
  return decode(r, m);
}

}  // namespace tensorpc::rpc
