// Hand-over of a 64 MiB tensor between devices, the server-side paths against
// the relayed one measured in the same run:
//   one server, cpu0 -> cpu1:  COPY_TENSOR (on the server)
//                              vs GET_TENSOR to the client, then SET_TENSOR;
//   two servers, A/cpu0 -> B/cpu0: GRANT_WRITE + COPY_TO_PEER (server to server)
//                              vs GET_TENSOR from A to the client, then SET_TENSOR to B.
// Each path ends when the destination holds the bytes (a SYNCHRONIZE after the
// one-way commands). Reported: the median time of several repetitions, its
// ratio to the relayed path, and the bytes the client sent and received for
// one hand-over (frame headers included), which must be far below the tensor's
// size on the server-side paths (no tensor bytes through the client).
// Targets: server-side paths move < 1 KiB through the client; one server
// <= 0.5x relayed time (a memory copy against two socket transfers), two
// servers <= 0.75x (one socket transfer against two).
//
// The servers run in this process on 127.0.0.1 (their own threads, real TCP
// sockets). Usage: handover_bench [repetitions (default 7)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "rpc/connection.h"
#include "rpc/log.h"
#include "rpc/remote_buffer.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"

namespace tensorpc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kBytes = uint64_t{64} << 20;

void check(const Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "handover_bench: %s\n", s.to_string().c_str());
  std::exit(1);
}
template <typename T>
T take(StatusOr<T> v) {
  check(v.status());
  return std::move(v).value();
}

std::unique_ptr<Server> start_server() {
  ServerOptions options;
  options.port = 0;
  for (int i = 0; i < 2; ++i) {
    options.devices.push_back(
        std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu" + std::to_string(i), .threads = 1}));
  }
  return take(Server::start(std::move(options)));
}

// A 64 MiB f32 tensor filling `buffer`. Flagged as an input, so a relayed
// set is one plain SET_TENSOR (not the weights cache's hash first).
Tensor whole(Buffer& buffer) {
  Tensor t;
  t.type = DType::f32;
  t.ne = {static_cast<int64_t>(kBytes / 4), 1, 1, 1};
  t.nb = {4, kBytes, kBytes, kBytes};
  t.flags = kFlagInput;
  check(buffer.place(t, 0));
  return t;
}

void synchronize(Buffer& b) {
  check(dynamic_cast<rpc::RemoteBuffer&>(b).connection()->call_status_only(rpc::Command::synchronize, {}));
}

struct Result {
  double seconds = 0;
  uint64_t client_bytes = 0;  // sent + received by the client, one hand-over
};

// Median time over `reps` runs of `once`; bytes counted on the endpoints.
Result measure(int reps, const std::vector<std::string>& endpoints, const std::function<void()>& once) {
  std::vector<double> times;
  uint64_t bytes = 0;
  for (int i = 0; i < reps; ++i) {
    uint64_t before = 0, after = 0;
    for (const auto& e : endpoints) before += connection_stats(e).bytes_sent + connection_stats(e).bytes_received;
    const auto start = Clock::now();
    once();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    for (const auto& e : endpoints) after += connection_stats(e).bytes_sent + connection_stats(e).bytes_received;
    bytes = after - before;
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], bytes};
}

void relay(std::vector<uint8_t>& host, Buffer& from, const Tensor& src, Buffer& to, const Tensor& dst) {
  check(from.get(src, host.data(), 0, kBytes));
  check(to.set(dst, host.data(), 0, kBytes));
  synchronize(to);
}

void row(const char* path, const char* how, const Result& r, const Result& relayed, const char* target, bool met) {
  std::printf("%-12s %-30s %9.2f ms %10.2f GB/s %14llu %8.2fx   %-28s %s\n", path, how, r.seconds * 1e3,
              static_cast<double>(kBytes) / r.seconds / 1e9, static_cast<unsigned long long>(r.client_bytes),
              r.seconds / relayed.seconds, target, met ? "met" : "MISSED");
}

int run(int reps) {
  log::set_level(log::Level::warn);
  auto a = start_server();
  auto b = start_server();
  const std::string ea = "127.0.0.1:" + std::to_string(a->port());
  const std::string eb = "127.0.0.1:" + std::to_string(b->port());
  auto a0 = remote_device(ea, 0), a1 = remote_device(ea, 1), b0 = remote_device(eb, 0);
  auto src = take(a0->allocate(kBytes));
  auto same = take(a1->allocate(kBytes));
  auto other = take(b0->allocate(kBytes));
  const Tensor ts = whole(*src), tsame = whole(*same), tother = whole(*other);
  std::vector<uint8_t> host(kBytes);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  check(src->set(ts, host.data(), 0, kBytes));
  synchronize(*src);

  const Result one_server = measure(reps, {ea}, [&] {
    check(same->copy(ts, tsame));
    synchronize(*same);
  });
  const Result one_relay = measure(reps, {ea}, [&] { relay(host, *src, ts, *same, tsame); });
  const Result two_servers = measure(reps, {ea, eb}, [&] { check(other->copy(ts, tother)); });
  const Result two_relay = measure(reps, {ea, eb}, [&] { relay(host, *src, ts, *other, tother); });

  // The bytes arrived: the last hand-over of each destination equals the source.
  std::vector<uint8_t> back(kBytes);
  check(other->copy(ts, tother));
  check(other->get(tother, back.data(), 0, kBytes));
  if (back != host) return std::fprintf(stderr, "handover_bench: B's copy differs from the source\n"), 1;

  std::printf("hand-over of a %llu MiB tensor, median of %d; client bytes = sent + received for one hand-over\n",
              static_cast<unsigned long long>(kBytes >> 20), reps);
  std::printf("%-12s %-30s %12s %15s %14s %9s   %-28s %s\n", "between", "path", "time", "throughput", "client bytes",
              "vs relay", "target", "");
  row("devices", "COPY_TENSOR (server)", one_server, one_relay, "< 1 KiB; <= 0.5x relay",
      one_server.client_bytes < 1024 && one_server.seconds <= 0.5 * one_relay.seconds);
  row("devices", "relayed (get + set)", one_relay, one_relay, "(baseline)", true);
  row("servers", "COPY_TO_PEER (server->server)", two_servers, two_relay, "< 1 KiB; <= 0.75x relay",
      two_servers.client_bytes < 1024 && two_servers.seconds <= 0.75 * two_relay.seconds);
  row("servers", "relayed (get + set)", two_relay, two_relay, "(baseline)", true);
  src.reset();
  same.reset();
  other.reset();
  a->stop();
  b->stop();
  return 0;
}

}  // namespace
}  // namespace tensorpc

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  return tensorpc::run(reps);
}
