// What every `tensorpc bench` measurement shares: the median of repeated
// timings, in-process servers on loopback, and the raw TCP baselines the RPC
// figures are held against.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rpc/transport/socket.h"
#include "tensorpc/server.h"
#include "tensorpc/status.h"

namespace tensorpc::tools {

using BenchClock = std::chrono::steady_clock;

inline double seconds_since(BenchClock::time_point start) {
  return std::chrono::duration<double>(BenchClock::now() - start).count();
}

// The median of `v` (the mean of the middle two of an even count); 0 when empty.
double median(std::vector<double> v);

// The median of `repetitions` (at least 1) calls of `once`, which returns
// seconds (or any other measure) or an error that ends the measurement.
StatusOr<double> median_of(int repetitions, const std::function<StatusOr<double>()>& once);

// GB/s of `threads` threads summing a 512 MiB buffer between them, the best of
// three passes: the memory-read bandwidth that decode's weight reads are held
// against (decode reads every weight once per token).
double memory_read_gbs(int threads);

// GFLOP/s of `threads` threads doing nothing but independent fused
// multiply-adds on the widest vectors the CPU has (AVX-512, AVX2 or none),
// the best of three passes: the peak prefill's matrix work is held against.
double fma_peak_gflops(int threads);

// A server in this process on 127.0.0.1 (its own threads, a real TCP
// socket) with `devices` CPU devices of `threads_per_device` threads each
// (devices 0: the server's default, one CPU device with every core), and
// TLS when `tls` names a certificate; `pin_threads`: CpuDeviceOptions'.
StatusOr<std::unique_ptr<Server>> start_loopback_server(int devices, int threads_per_device, const TlsOptions& tls = {},
                                                        bool pin_threads = false);
std::string loopback_endpoint(const Server& server);

// A fresh directory under the system's temporary one, removed with what it
// holds when this goes.
struct TempDir {
  static StatusOr<TempDir> create(const std::string& prefix) {
    std::string path = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (::mkdtemp(path.data()) == nullptr) return io_error("cannot create a directory like " + path);
    return TempDir(std::move(path));
  }
  explicit TempDir(std::string p) : path(std::move(p)) {}
  TempDir(TempDir&& o) noexcept : path(std::exchange(o.path, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

// Raw TCP on loopback, the baseline of the RPC figures: a connected socket
// pair (TCP_NODELAY, as the rpc layer's) and a thread on the far end that
// echoes fixed-size messages, or reads and writes bulk transfers.
class RawLoopback {
 public:
  // `max_size`: the largest bulk transfer.
  static StatusOr<std::unique_ptr<RawLoopback>> start(uint64_t max_size);
  ~RawLoopback();

  // Seconds of one round trip of a `size`-byte message (the mean of `count`).
  StatusOr<double> round_trip(size_t size, int count);
  // Seconds of one step of a two-stage pipeline with nothing in it but its
  // work and its hand-overs (the median of `steps`): this end is busy for
  // `near` (spinning, as a computing core is), hands a 64-byte message to
  // the far end, which is busy for `far` and hands it back. Each end waits
  // for the other asleep in recv, as the rpc layer's threads do; `polling`:
  // each end polls for it instead (non-blocking reads in a loop), so no
  // thread sleeps, at the price of a core kept busy while it waits.
  StatusOr<double> pipeline_step(std::chrono::nanoseconds near, std::chrono::nanoseconds far, int steps,
                                 bool polling = false);
  // Seconds to send `size` bytes and get the far end's one-byte ack.
  StatusOr<double> push(const uint8_t* data, uint64_t size);
  // Seconds to ask for `size` bytes and receive them into `data`.
  StatusOr<double> pull(uint8_t* data, uint64_t size);

 private:
  RawLoopback(rpc::Socket client, rpc::Socket server, uint64_t max_size);
  void serve();

  rpc::Socket client_, server_;
  std::vector<uint8_t> sink_;
  std::thread thread_;
};

}  // namespace tensorpc::tools
