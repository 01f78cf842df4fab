// Helpers of the client tests (client_test.cpp, remote_*_test.cpp): an
// in-process server on a port the OS picks, a port nobody listens on, a wait
// with a deadline for state that changes on the server's threads, and a
// runner that computes one graph on any device from seeded inputs.
// Owned by the client's tests; the server's tests have rpc_test_util.h.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/transport/socket.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"
#include "test_util.h"

namespace tensorpc::test {

// Polls `done` until it holds or `deadline` passes; returns its last value.
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// A port on 127.0.0.1 that nobody listens on while this lives: bound, never
// listening, so connecting is refused and no other process (a test running
// alongside) can take the port for a server of its own.
class RefusingPort {
 public:
  RefusingPort() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &length) != 0) {
      throw std::runtime_error(std::string("RefusingPort: ") + std::strerror(errno));
    }
    port_ = ntohs(a.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_;
  uint16_t port_ = 0;
};

// Options of a server of `devices` with `key` (empty: none) and `tls` (empty: plain TCP).
inline ServerOptions options_of(std::vector<std::shared_ptr<Device>> devices, std::string key = {},
                                TlsOptions tls = {}) {
  ServerOptions options;
  options.devices = std::move(devices);
  options.key = std::move(key);
  options.tls = std::move(tls);
  return options;
}

// A tensorpc server in this process, on 127.0.0.1 and a port the OS picks,
// serving one CPU device of 2 threads (as the tests' local reference device
// has, so that results can be compared bit for bit).
class InProcessServer {
 public:
  InProcessServer() : InProcessServer({std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 2})}) {}
  // Serving `devices` (device i is index i on the wire), to clients that
  // prove `key` when it is not empty.
  explicit InProcessServer(std::vector<std::shared_ptr<Device>> devices, std::string key = {})
      : InProcessServer(options_of(std::move(devices), std::move(key))) {}
  // Started with `options`, on a port the OS picks (options.port is ignored).
  explicit InProcessServer(ServerOptions options) {
    options.port = 0;
    auto server = Server::start(std::move(options));
    if (!server.ok()) throw std::runtime_error("Server::start: " + server.status().to_string());
    server_ = std::move(server).value();
    endpoint_ = "127.0.0.1:" + std::to_string(server_->port());
  }

  const std::string& endpoint() const { return endpoint_; }
  Server& server() { return *server_; }
  ServerStats stats() const { return server_->stats(); }
  void stop() { server_->stop(); }

 private:
  std::unique_ptr<Server> server_;
  std::string endpoint_;
};

// Two CPU devices of 2 threads each, cpu0 and cpu1, with optional memory limits.
inline std::vector<std::shared_ptr<Device>> two_cpus(uint64_t limit0 = 0, uint64_t limit1 = 0) {
  return {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 2, .memory_limit = limit0}),
          std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu1", .threads = 2, .memory_limit = limit1})};
}

// A graph to compute: its outputs, and the values of its i32 leaves (which
// must be valid indices or positions); every other leaf gets random bytes.
struct Built {
  std::vector<Tensor*> outputs;
  std::vector<std::pair<Tensor*, std::vector<int32_t>>> ints;
};
using Builder = std::function<Built(Context&)>;

// Builds, places, fills and computes on `device`; returns each output's bytes.
inline std::vector<std::vector<uint8_t>> run_on(Device& device, const Builder& build, uint32_t seed = 1000) {
  Context ctx;
  const Built built = build(ctx);
  GraphRun run(device, built.outputs);
  for (Tensor* leaf : run.graph().leafs()) {
    bool is_int = false;
    for (const auto& [t, values] : built.ints) {
      if (t == leaf) {
        run.write_i32(leaf, values);
        is_int = true;
      }
    }
    if (!is_int) run.write_raw(leaf, random_encoded(leaf->type, leaf->nelements(), seed++));
  }
  run.compute();
  std::vector<std::vector<uint8_t>> out;
  for (Tensor* t : built.outputs) out.push_back(run.raw(t));
  return out;
}

}  // namespace tensorpc::test
