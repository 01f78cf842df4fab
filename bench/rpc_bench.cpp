// The RPC layer's costs against raw loopback TCP, measured in the same run:
//   (a) the round trip of a tiny command (PING) vs a 24-byte ping-pong over a
//       plain socket pair;
//   (b) setting 1, 16, 64 and 256 MiB into a remote buffer, until a
//       SYNCHRONIZE says the server has them, vs pumping the same bytes to a
//       thread that reads them into a buffer and answers with one byte.
// Each figure is the median of several repetitions. The server runs in this
// process on 127.0.0.1 (its own threads, a real TCP socket). Targets: round
// trip <= 1.5x raw; set >= 0.8x raw throughput at 256 MiB.
//
// Usage: rpc_bench [repetitions (default 7)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "rpc/connection.h"
#include "rpc/socket.h"
#include "tensorpc/context.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"

namespace tensorpc {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const Status& s) {
  std::fprintf(stderr, "rpc_bench: %s\n", s.to_string().c_str());
  std::exit(1);
}
void check(const Status& s) {
  if (!s.ok()) die(s);
}

// Median over `reps` runs of `once`, which returns seconds.
double median_of(int reps, const std::function<double()>& once) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(once());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A connected pair of loopback TCP sockets (both with TCP_NODELAY, as the
// rpc layer's are).
struct SocketPair {
  rpc::Socket client, server;
};
SocketPair socket_pair() {
  auto listener = rpc::Socket::listen("127.0.0.1", 0);
  if (!listener.ok()) die(listener.status());
  auto client = rpc::Socket::connect("127.0.0.1", listener.value().local_port());
  if (!client.ok()) die(client.status());
  auto server = listener.value().accept();
  if (!server.ok()) die(server.status());
  return {std::move(client).value(), std::move(server).value()};
}

// ---- (a) round trips ----------------------------------------------------------

constexpr int kPings = 20000;

double raw_round_trip(int reps) {
  SocketPair pair = socket_pair();
  std::thread echo([&] {
    uint8_t m[24];
    while (pair.server.recv_all(m, sizeof m).ok() && pair.server.send_all(m, sizeof m).ok()) {
    }
  });
  uint8_t m[24] = {};
  const double t = median_of(reps, [&] {
    const auto start = Clock::now();
    for (int i = 0; i < kPings; ++i) {
      check(pair.client.send_all(m, sizeof m));
      check(pair.client.recv_all(m, sizeof m));
    }
    return seconds_since(start) / kPings;
  });
  pair.client.shutdown();
  echo.join();
  return t;
}

double rpc_round_trip(const std::string& endpoint, int reps) {
  auto connection = rpc::get_connection(endpoint);
  if (!connection.ok()) die(connection.status());
  rpc::Connection& c = *connection.value();
  return median_of(reps, [&] {
    const auto start = Clock::now();
    for (int i = 0; i < kPings; ++i) check(c.call_status_only(rpc::Command::ping, {}));
    return seconds_since(start) / kPings;
  });
}

// ---- (b) bulk sets --------------------------------------------------------------

// Seconds to pump `size` bytes to a reader thread and get its one-byte ack.
class RawPump {
 public:
  explicit RawPump(uint64_t max_size) : pair_(socket_pair()), sink_(max_size) {
    reader_ = std::thread([this] {
      uint64_t size = 0;
      while (pair_.server.recv_all(&size, sizeof size).ok() && pair_.server.recv_all(sink_.data(), size).ok()) {
        const uint8_t ack = 1;
        if (!pair_.server.send_all(&ack, 1).ok()) break;
      }
    });
  }
  ~RawPump() {
    pair_.client.shutdown();
    reader_.join();
  }
  double once(const uint8_t* data, uint64_t size) {
    const auto start = Clock::now();
    iovec parts[2] = {{&size, sizeof size}, {const_cast<uint8_t*>(data), size}};
    check(pair_.client.send_all(parts));
    uint8_t ack;
    check(pair_.client.recv_all(&ack, 1));
    return seconds_since(start);
  }

 private:
  SocketPair pair_;
  std::vector<uint8_t> sink_;
  std::thread reader_;
};

struct Row {
  std::string what;
  double ours, raw;  // in the row's unit
  const char* unit;
  std::string target;
};

void print(const std::vector<Row>& rows) {
  std::printf("\n%-28s %14s %14s %8s   %s\n", "", "tensorpc", "raw TCP", "ratio", "target");
  for (const Row& r : rows) {
    const double ratio = r.ours / r.raw;
    std::printf("%-28s %10.2f %-3s %10.2f %-3s %7.2fx   %s\n", r.what.c_str(), r.ours, r.unit, r.raw, r.unit, ratio,
                r.target.c_str());
  }
}

int run(int reps) {
  ServerOptions options;
  options.port = 0;
  auto server = Server::start(std::move(options));
  if (!server.ok()) die(server.status());
  const std::string endpoint = "127.0.0.1:" + std::to_string(server.value()->port());
  std::printf("rpc_bench: in-process server at %s, %d repetitions, median\n", endpoint.c_str(), reps);

  // The weights cache off: (b) measures moving bytes, not skipping them.
  auto devices = connect_devices(endpoint, RemoteOptions{.weights_cache_threshold = UINT64_MAX});
  if (!devices.ok()) die(devices.status());
  Device& device = *devices.value()[0];

  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const uint64_t max_size = 256 * kMiB;
  auto buffer = device.allocate(max_size);  // also keeps the connection open for (a)
  if (!buffer.ok()) die(buffer.status());
  auto stream = device.create_stream();
  if (!stream.ok()) die(stream.status());
  std::vector<uint8_t> data(max_size);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 24);

  std::vector<Row> rows;
  const double raw_rt = raw_round_trip(reps);
  const double rpc_rt = rpc_round_trip(endpoint, reps);
  rows.push_back({"round trip (PING)", rpc_rt * 1e6, raw_rt * 1e6, "us", "<= 1.50x (time)"});

  RawPump pump(max_size);
  Context ctx;
  for (uint64_t mib : {1, 16, 64, 256}) {
    const uint64_t size = mib * kMiB;
    Tensor* t = ctx.new_tensor(DType::i32, {static_cast<int64_t>(size / 4)});
    check(buffer.value()->place(*t, 0));
    const double ours = median_of(reps, [&] {
      const auto start = Clock::now();
      check(buffer.value()->set(*t, data.data(), 0, size));
      check(stream.value()->synchronize());
      return seconds_since(start);
    });
    const double raw = median_of(reps, [&] { return pump.once(data.data(), size); });
    rows.push_back({"set " + std::to_string(mib) + " MiB", size / ours / 1e9, size / raw / 1e9, "GB/s",
                    mib == 256 ? ">= 0.80x (throughput)" : ""});
  }
  print(rows);

  // For information: a 256 MiB weight uploaded again with the cache on
  // (the server has it after the first upload: only the hash travels).
  auto cached_devices = connect_devices(endpoint);
  if (!cached_devices.ok()) die(cached_devices.status());
  auto cached = cached_devices.value()[0]->allocate(max_size);
  if (!cached.ok()) die(cached.status());
  Tensor* w = ctx.new_tensor(DType::i32, {static_cast<int64_t>(max_size / 4)});
  check(cached.value()->place(*w, 0));
  check(cached.value()->set(*w, data.data(), 0, max_size));  // miss: hash + bytes
  const double hit = median_of(reps, [&] {
    const auto start = Clock::now();
    check(cached.value()->set(*w, data.data(), 0, max_size));
    check(stream.value()->synchronize());
    return seconds_since(start);
  });
  std::printf(
      "\nset 256 MiB through the weights cache, hit (SHA-256 + hash round trip): %.1f ms (%.2f GB/s "
      "effective)\n",
      hit * 1e3, max_size / hit / 1e9);

  const bool rt_ok = rpc_rt <= 1.5 * raw_rt;
  const bool set_ok = rows.back().ours >= 0.8 * rows.back().raw;
  std::printf("targets: round trip %s, set 256 MiB %s\n", rt_ok ? "met" : "MISSED", set_ok ? "met" : "MISSED");
  return 0;
}

}  // namespace
}  // namespace tensorpc

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  return tensorpc::run(reps);
}
