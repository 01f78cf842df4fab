// libFuzzer target: the frame header, the reply status and every message
// decoder, fed the same arbitrary bytes. None may crash, read out of bounds
// or allocate without bound; and whatever decodes must encode back to the
// bytes it came from (the encoding is canonical), so a decoder cannot
// silently accept what it misreads.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "rpc/wire/messages.h"

namespace {

using namespace tensorpc::rpc;

// Decodes m from data; if that succeeds, the re-encoding must reproduce the
// bytes the decoder consumed (all of them, or the fixed prefix).
template <typename M>
void check(std::span<const uint8_t> data) {
  const bool prefix_only = M::wire.extent == Extent::prefix;
  WireReader r(data);
  M m;
  if (!decode(r, m).ok()) return;
  WireWriter w;
  encode(w, m);
  const size_t consumed = data.size() - r.remaining();
  if (w.size() != consumed || (!prefix_only && consumed != data.size())) __builtin_trap();
  if (std::memcmp(w.bytes().data(), data.data(), consumed) != 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  if (size >= kFrameHeaderSize) {
    auto h = decode_header(bytes.first<kFrameHeaderSize>());
    if (h.ok()) {
      uint8_t out[kFrameHeaderSize];
      encode_header(*h, out);
      if (std::memcmp(out, data, kFrameHeaderSize) != 0) __builtin_trap();
    }
  }
  {
    WireReader r(bytes);
    (void)decode_status(r);
  }
  // Every message messages.h declares.
#define TENSORPC_FUZZ_CHECK(Type) check<Type>(bytes);
  TENSORPC_RPC_MESSAGES(TENSORPC_FUZZ_CHECK)
#undef TENSORPC_FUZZ_CHECK
  return 0;
}
