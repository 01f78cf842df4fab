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
void check(std::span<const uint8_t> data, bool prefix_only) {
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
  check<HelloRequest>(bytes, false);
  check<HelloReply>(bytes, false);
  check<ListDevicesReply>(bytes, false);
  check<DeviceMemoryRequest>(bytes, false);
  check<DeviceMemoryReply>(bytes, false);
  check<BufferAllocRequest>(bytes, false);
  check<BufferAllocReply>(bytes, false);
  check<BufferFreeRequest>(bytes, false);
  check<BufferClearRequest>(bytes, false);
  check<SetTensorRequest>(bytes, true);
  check<SetTensorHashRequest>(bytes, false);
  check<SetTensorHashReply>(bytes, false);
  check<SetTensorHashesRequest>(bytes, false);
  check<SetTensorHashesReply>(bytes, false);
  check<GetTensorRequest>(bytes, false);
  check<CopyTensorRequest>(bytes, false);
  check<GrantWriteRequest>(bytes, false);
  check<GrantWriteReply>(bytes, false);
  check<CopyToPeerRequest>(bytes, false);
  check<WriteGrantedRequest>(bytes, true);
  check<GraphComputeRequest>(bytes, true);
  check<GraphRecomputeRequest>(bytes, false);
  check<AuthRequest>(bytes, false);
  check<AuthReply>(bytes, false);
  return 0;
}
