// The RPC layer's costs against raw loopback TCP, measured in the same run:
//   (a) the round trip of a tiny command (PING) vs a 24-byte ping-pong over a
//       plain socket pair;
//   (b) setting and getting 1, 16, 64 and 256 MiB into and out of a remote
//       buffer (a set ends when a SYNCHRONIZE says the server has the bytes)
//       vs pumping the same bytes to and from a thread over a socket pair;
//   (c) for information, a 256 MiB set that hits the server's weights cache
//       vs the same set with the cache off.
// Each figure is the median of several repetitions. The server runs in this
// process on 127.0.0.1 (its own threads, a real TCP socket). Targets: round
// trip <= 1.5x raw; set and get >= 0.8x raw throughput from 64 MiB.
// The measurements are `tensorpc bench`'s (bench/lab/bench_rpc.h).
//
// Usage: rpc_bench [repetitions (default 7)]
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"
#include "lab/bench_rpc.h"

int main(int argc, char** argv) {
  using namespace tensorpc::tools;
  tensorpc::log::set_level(tensorpc::log::Level::warn);
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const RpcBenchOptions options{.repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7,
                                .round_trips = 20000,
                                .sizes = {kMiB, 16 * kMiB, 64 * kMiB, 256 * kMiB}};
  std::vector<Figure> figures;
  for (auto section : {bench_round_trip(options), bench_set_get(options), bench_tls(options), bench_cache_hit(options)}) {
    if (!section.ok()) {
      std::fprintf(stderr, "rpc_bench: %s\n", section.status().to_string().c_str());
      return 1;
    }
    figures.insert(figures.end(), section.value().begin(), section.value().end());
  }
  std::printf("rpc_bench: in-process server on 127.0.0.1, median of %d\n\n%s", options.repetitions,
              format_table(figures).c_str());
  return 0;
}
