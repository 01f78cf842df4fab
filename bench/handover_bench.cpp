// Hand-over of a 64 MiB tensor between devices, the server-side paths against
// the relayed one measured in the same run:
//   one server, cpu0 -> cpu1:  COPY_TENSOR (on the server)
//                              vs GET_TENSOR to the client, then SET_TENSOR;
//   two servers, A/cpu0 -> B/cpu0: GRANT_WRITE + COPY_TO_PEER (server to server)
//                              vs GET_TENSOR from A to the client, then SET_TENSOR to B.
// Each path ends when the destination holds the bytes. Reported: the median
// time of several repetitions against the relayed path's, and the bytes the
// client sent and received for one hand-over (frame headers included), which
// must stay under 1 KiB on the server-side paths (no tensor bytes through the
// client). The measurements are `tensorpc bench`'s
// (bench/lab/bench_rpc.h); the servers run in this process on 127.0.0.1.
//
// Usage: handover_bench [repetitions (default 7)]
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"
#include "lab/bench_rpc.h"

int main(int argc, char** argv) {
  using namespace tensorpc::tools;
  tensorpc::log::set_level(tensorpc::log::Level::warn);
  const RpcBenchOptions options{.repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7,
                                .handover_bytes = uint64_t{64} << 20};
  auto figures = bench_handover(options);
  if (!figures.ok()) {
    std::fprintf(stderr, "handover_bench: %s\n", figures.status().to_string().c_str());
    return 1;
  }
  std::printf("handover_bench: median of %d\n\n%s", options.repetitions, format_table(figures.value()).c_str());
  return 0;
}
