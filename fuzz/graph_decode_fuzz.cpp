// libFuzzer target: decode_graph on arbitrary bytes, as a server meets them.
// Handle 1 names a real 4 KiB CpuDevice buffer; every other handle is
// unknown. A graph that passes validation is then computed on the CpuDevice,
// so ASan checks the promise validation makes: a decoded graph's kernels read
// and write only inside the buffer.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "rpc/wire/graph_codec.h"
#include "tensorpc/cpu_device.h"

namespace {

struct Server {
  tensorpc::CpuDevice device{tensorpc::CpuDeviceOptions{.threads = 1}};
  std::unique_ptr<tensorpc::Buffer> buffer = device.allocate(4096).value();
  std::unique_ptr<tensorpc::Stream> stream = device.create_stream().value();
};

Server& server() {
  static Server s;  // one device and buffer for the whole fuzzing run
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& s = server();
  tensorpc::rpc::WireReader r(std::span<const uint8_t>(data, size));
  auto decoded = tensorpc::rpc::decode_graph(r, [&s](uint64_t handle) -> tensorpc::StatusOr<tensorpc::Buffer*> {
    if (handle == 1) return s.buffer.get();
    return tensorpc::not_found("unknown handle");
  });
  if (!decoded.ok()) return 0;
  // A fixed pattern, so runs are reproducible: 0x3c bytes read as finite,
  // normal numbers in every float type (f32 0.0115, f16 1.06, bf16 0.0115)
  // and as an out-of-range row index for get_rows. The values are not
  // fuzzed: this target is about descriptors, not arithmetic. (Subnormal,
  // infinite or NaN inputs make the reference q8_0/q4_0 quantizers in
  // src/core/quant.cpp convert an out-of-range float to an integer, which
  // UBSan reports; see the report of this target.)
  std::memset(s.buffer->host_base(), 0x3c, s.buffer->size());
  (void)s.stream->compute(decoded->graph);
  return 0;
}
