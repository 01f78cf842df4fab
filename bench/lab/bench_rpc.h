// The RPC figures of `tensorpc bench`, each against its baseline measured in
// the same run: the round trip of a tiny command against a raw TCP
// ping-pong, set-tensor and get-tensor throughput against a raw TCP pump,
// and a tensor's hand-over between devices and between servers against the
// path relayed through the client. Servers run in this process on loopback.
#pragma once

#include <cstdint>
#include <vector>

#include "lab/bench_report.h"
#include "tensorpc/status.h"

namespace tensorpc::tools {

struct RpcBenchOptions {
  int repetitions = 5;
  int round_trips = 5000;         // per repetition
  std::vector<uint64_t> sizes{};  // of set and get, in bytes
  uint64_t handover_bytes = uint64_t{64} << 20;
};

// "rpc.round_trip": PING through a real client connection, in µs.
StatusOr<std::vector<Figure>> bench_round_trip(const RpcBenchOptions& options);
// "rpc.set.<N>MiB", "rpc.get.<N>MiB": GB/s; the target applies from 64 MiB.
StatusOr<std::vector<Figure>> bench_set_get(const RpcBenchOptions& options);
// "rpc.set_cache_hit.<N>MiB": a set of the largest size (at most 256 MiB)
// whose bytes the server's weights cache already has — SHA-256 on the client,
// the hash in one round trip, the server copying its cached bytes — against
// the same set with the cache off, GB/s. No target: it pays off only where
// the network is slower than hashing.
StatusOr<std::vector<Figure>> bench_cache_hit(const RpcBenchOptions& options);
// "rpc.tls.round_trip", "rpc.tls.set.<N>MiB", "rpc.tls.get.<N>MiB": the
// round trip and the set and get of the largest size (at most 256 MiB) with
// a TLS server (certificates made for the run), against the same on a plain
// one. No target: the price of encryption, for docs/security.md.
StatusOr<std::vector<Figure>> bench_tls(const RpcBenchOptions& options);
// "handover.devices.time|bytes", "handover.servers.time|bytes".
StatusOr<std::vector<Figure>> bench_handover(const RpcBenchOptions& options);

}  // namespace tensorpc::tools
