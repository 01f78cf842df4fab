// Timing, loopback servers and raw TCP baselines of `tensorpc bench`
// (bench_measure.h).
#include "lab/bench_measure.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#if defined(__x86_64__)
#include "cpu/immintrin_quiet.h"
#endif

#include "tensorpc/cpu_device.h"

namespace tensorpc::tools {
namespace {

// The far end's requests: what the client wants next.
enum class RawRequest : uint64_t { echo = 1, push = 2, pull = 3, relay = 4, relay_polling = 5 };

struct RawHeader {
  RawRequest request;
  uint64_t size;
};

// Receives exactly `size` bytes, polling with non-blocking reads instead of
// sleeping in recv; after `patience` without a byte it sleeps after all (the
// other end has gone quiet), so an idle end does not hold a core for long.
Status recv_polling(rpc::Socket& socket, void* data, size_t size,
                    std::chrono::nanoseconds patience = std::chrono::milliseconds(1)) {
  auto* p = static_cast<char*>(data);
  auto last_byte = BenchClock::now();
  while (size > 0) {
    const ssize_t n = ::recv(socket.fd(), p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      last_byte = BenchClock::now();
    } else if (n == 0) {
      return io_error("connection closed by peer");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return io_error(std::string("recv: ") + std::strerror(errno));
    } else if (BenchClock::now() - last_byte > patience) {
      return socket.recv_all(p, size);
    }
  }
  return Status();
}

// Busy for `d`, as a core that computes is.
void spin_for(std::chrono::nanoseconds d) {
  const auto until = BenchClock::now() + d;
  while (BenchClock::now() < until) {
  }
}

// Independent chains of multiply-adds: enough to cover an FMA's latency on
// two pipes, few enough to stay in registers.
constexpr int kChains = 12;
constexpr double kPassSeconds = 0.05;

// Each pass runs kChains chains of vector FMAs of its width for about
// kPassSeconds and returns one thread's GFLOP/s. The loops are written out in
// each function: code the compiler may use the wider instructions in must sit
// in the function that carries the target attribute.
double pass_gflops(uint64_t rounds, int lanes, BenchClock::time_point t0) {
  return static_cast<double>(rounds) * kChains * lanes * 2 / seconds_since(t0) / 1e9;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fma_pass_avx512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  const auto t0 = BenchClock::now();
  uint64_t rounds = 0;
  do {
    for (int i = 0; i < 1024; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    rounds += 1024;
  } while (seconds_since(t0) < kPassSeconds);
  const double gflops = pass_gflops(rounds, 16, t0);
  volatile float sink = 0;
  for (int c = 0; c < kChains; ++c) sink = sink + _mm512_reduce_add_ps(acc[c]);
  return gflops;
}

__attribute__((target("avx2,fma"))) double fma_pass_avx2() {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  const auto t0 = BenchClock::now();
  uint64_t rounds = 0;
  do {
    for (int i = 0; i < 1024; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    rounds += 1024;
  } while (seconds_since(t0) < kPassSeconds);
  const double gflops = pass_gflops(rounds, 8, t0);
  alignas(32) float out[8];
  volatile float sink = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm256_store_ps(out, acc[c]);
    sink = sink + out[0];
  }
  return gflops;
}
#endif

double fma_pass_scalar() {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 0.001f * static_cast<float>(c);
  const auto t0 = BenchClock::now();
  uint64_t rounds = 0;
  do {
    for (int i = 0; i < 1024; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999f + 1e-3f;
    rounds += 1024;
  } while (seconds_since(t0) < kPassSeconds);
  const double gflops = pass_gflops(rounds, 1, t0);
  volatile float sink = 0;
  for (float v : acc) sink = sink + v;
  return gflops;
}

double fma_pass_best() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return fma_pass_avx512();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return fma_pass_avx2();
#endif
  return fma_pass_scalar();
}

}  // namespace

double fma_peak_gflops(int threads) {
  threads = std::max(1, threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> each(static_cast<size_t>(threads));
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) workers.emplace_back([&each, t] { each[static_cast<size_t>(t)] = fma_pass_best(); });
    for (auto& w : workers) w.join();
    double sum = 0;
    for (double g : each) sum += g;
    best = std::max(best, sum);
  }
  return best;
}

double memory_read_gbs(int threads) {
  threads = std::max(1, threads);
  const size_t n = (size_t{512} << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<uint64_t> sink{0};
    const auto t0 = BenchClock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // four chains, so the adds do not limit the loads
        const size_t b = n * t / threads, e = n * (t + 1) / threads;
        for (size_t i = b; i + 4 <= e; i += 4) {
          s0 += buf[i];
          s1 += buf[i + 1];
          s2 += buf[i + 2];
          s3 += buf[i + 3];
        }
        sink += s0 + s1 + s2 + s3;
      });
    }
    for (auto& w : workers) w.join();
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / seconds_since(t0) / 1e9);
  }
  return best;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

StatusOr<double> median_of(int repetitions, const std::function<StatusOr<double>()>& once) {
  std::vector<double> values;
  for (int i = 0; i < std::max(1, repetitions); ++i) {
    TENSORPC_ASSIGN_OR_RETURN(auto v, once());
    values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

StatusOr<std::unique_ptr<Server>> start_loopback_server(int devices, int threads_per_device, const TlsOptions& tls,
                                                        bool pin_threads) {
  ServerOptions options;
  options.port = 0;
  options.tls = tls;
  // Pinned, the devices share their threads, as tensorpc-server's do.
  const auto shared = pin_threads ? CpuDevice::shared_threads(threads_per_device, true) : nullptr;
  for (int d = 0; d < devices; ++d) {
    options.devices.push_back(std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu" + std::to_string(d),
                                                                           .threads = threads_per_device,
                                                                           .pin_threads = pin_threads,
                                                                           .shared_threads = shared}));
  }
  return Server::start(std::move(options));
}

std::string loopback_endpoint(const Server& server) { return "127.0.0.1:" + std::to_string(server.port()); }

StatusOr<std::unique_ptr<RawLoopback>> RawLoopback::start(uint64_t max_size) {
  TENSORPC_ASSIGN_OR_RETURN(auto listener, rpc::Socket::listen("127.0.0.1", 0));
  TENSORPC_ASSIGN_OR_RETURN(auto client, rpc::Socket::connect("127.0.0.1", listener.local_port()));
  TENSORPC_ASSIGN_OR_RETURN(auto server, listener.accept());
  return std::unique_ptr<RawLoopback>(new RawLoopback(std::move(client), std::move(server), max_size));
}

RawLoopback::RawLoopback(rpc::Socket client, rpc::Socket server, uint64_t max_size)
    : client_(std::move(client)), server_(std::move(server)), sink_(max_size) {
  // A far end that stops (a request it does not know) closes its side, so
  // the client's next read fails instead of waiting for ever.
  thread_ = std::thread([this] {
    serve();
    server_.shutdown();
  });
}

RawLoopback::~RawLoopback() {
  client_.shutdown();
  thread_.join();
}

void RawLoopback::serve() {
  RawHeader h;
  bool polling = false;                  // after a polled relay, the next request is polled for too
  std::chrono::nanoseconds patience{0};  // ... for as long as the other end works, and a millisecond
  while ((polling ? recv_polling(server_, &h, sizeof h, patience) : server_.recv_all(&h, sizeof h)).ok()) {
    if (h.size > sink_.size()) return;
    polling = h.request == RawRequest::relay_polling;
    Status s;
    switch (h.request) {
      case RawRequest::echo:
        s = server_.recv_all(sink_.data(), h.size);
        if (s.ok()) s = server_.send_all(sink_.data(), h.size);
        break;
      case RawRequest::relay:
      case RawRequest::relay_polling: {
        // The body starts with this end's work and the other end's, in
        // nanoseconds.
        s = polling ? recv_polling(server_, sink_.data(), h.size) : server_.recv_all(sink_.data(), h.size);
        if (!s.ok() || h.size < 2 * sizeof(int64_t)) return;
        int64_t work_ns[2] = {0, 0};
        std::memcpy(work_ns, sink_.data(), sizeof work_ns);
        patience = std::chrono::nanoseconds(work_ns[1]) + std::chrono::milliseconds(1);
        spin_for(std::chrono::nanoseconds(work_ns[0]));
        s = server_.send_all(sink_.data(), h.size);
        break;
      }
      case RawRequest::push: {
        s = server_.recv_all(sink_.data(), h.size);
        const uint8_t ack = 1;
        if (s.ok()) s = server_.send_all(&ack, 1);
        break;
      }
      case RawRequest::pull: s = server_.send_all(sink_.data(), h.size); break;
      default: return;
    }
    if (!s.ok()) return;
  }
}

StatusOr<double> RawLoopback::round_trip(size_t size, int count) {
  // The header travels with the message: `size` counts both, as a tiny
  // command's frame counts its header.
  const size_t body = size > sizeof(RawHeader) ? size - sizeof(RawHeader) : 0;
  std::vector<uint8_t> message(body);
  const RawHeader h{RawRequest::echo, body};
  const auto start = BenchClock::now();
  for (int i = 0; i < count; ++i) {
    const iovec parts[2] = {{const_cast<RawHeader*>(&h), sizeof h}, {message.data(), body}};
    TENSORPC_RETURN_IF_ERROR(client_.send_all(parts));
    TENSORPC_RETURN_IF_ERROR(client_.recv_all(message.data(), body));
  }
  return seconds_since(start) / count;
}

StatusOr<double> RawLoopback::pipeline_step(std::chrono::nanoseconds near, std::chrono::nanoseconds far, int steps,
                                            bool polling) {
  // 64 bytes with the header: a token id and a frame header, or so.
  std::vector<uint8_t> message(64 - sizeof(RawHeader));
  const int64_t work_ns[2] = {far.count(), near.count()};
  std::memcpy(message.data(), work_ns, sizeof work_ns);
  const auto patience = far + std::chrono::milliseconds(1);
  const RawHeader h{polling ? RawRequest::relay_polling : RawRequest::relay, message.size()};
  return median_of(steps, [&]() -> StatusOr<double> {
    const auto start = BenchClock::now();
    spin_for(near);
    const iovec parts[2] = {{const_cast<RawHeader*>(&h), sizeof h}, {message.data(), message.size()}};
    TENSORPC_RETURN_IF_ERROR(client_.send_all(parts));
    TENSORPC_RETURN_IF_ERROR(polling ? recv_polling(client_, message.data(), message.size(), patience)
                                     : client_.recv_all(message.data(), message.size()));
    return seconds_since(start);
  });
}

StatusOr<double> RawLoopback::push(const uint8_t* data, uint64_t size) {
  const RawHeader h{RawRequest::push, size};
  const auto start = BenchClock::now();
  const iovec parts[2] = {{const_cast<RawHeader*>(&h), sizeof h}, {const_cast<uint8_t*>(data), size}};
  TENSORPC_RETURN_IF_ERROR(client_.send_all(parts));
  uint8_t ack = 0;
  TENSORPC_RETURN_IF_ERROR(client_.recv_all(&ack, 1));
  return seconds_since(start);
}

StatusOr<double> RawLoopback::pull(uint8_t* data, uint64_t size) {
  const RawHeader h{RawRequest::pull, size};
  const auto start = BenchClock::now();
  TENSORPC_RETURN_IF_ERROR(client_.send_all(&h, sizeof h));
  TENSORPC_RETURN_IF_ERROR(client_.recv_all(data, size));
  return seconds_since(start);
}

}  // namespace tensorpc::tools
