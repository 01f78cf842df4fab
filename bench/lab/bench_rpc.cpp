// RPC figures of `tensorpc bench` (bench_rpc.h).
#include "lab/bench_rpc.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "certs/certificate_authority.h"
#include "lab/bench_measure.h"
#include "rpc/client/remote_buffer.h"
#include "rpc/transport/connection.h"
#include "tensorpc/context.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc::tools {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr size_t kPingBytes = 24;  // a PING frame: header and empty fields

std::vector<uint8_t> pattern(uint64_t size) {
  std::vector<uint8_t> data(size);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  return data;
}

// A tensor of `bytes` filling `buffer` from offset 0, flagged as an input so
// that a set is one plain SET_TENSOR (not the weights cache's hash first).
StatusOr<Tensor> whole(Buffer& buffer, uint64_t bytes) {
  Tensor t;
  t.type = DType::f32;
  t.ne = {static_cast<int64_t>(bytes / 4), 1, 1, 1};
  t.nb = {4, bytes, bytes, bytes};
  t.flags = kFlagInput;
  TENSORPC_RETURN_IF_ERROR(buffer.place(t, 0));
  return t;
}

Status synchronize(Buffer& b) {
  return dynamic_cast<rpc::RemoteBuffer&>(b).connection()->call_status_only(rpc::Command::synchronize, {});
}

uint64_t client_bytes(const std::vector<std::string>& endpoints) {
  uint64_t sum = 0;
  for (const auto& e : endpoints) sum += connection_stats(e).bytes_sent + connection_stats(e).bytes_received;
  return sum;
}

std::string mib_text(uint64_t bytes) { return std::to_string(bytes / kMiB) + " MiB"; }
std::string mib_id(uint64_t bytes) { return std::to_string(bytes / kMiB) + "MiB"; }

}  // namespace

// Seconds per PING on `connection`, the median of the repetitions.
StatusOr<double> ping_seconds(rpc::Connection& connection, const RpcBenchOptions& o) {
  return median_of(o.repetitions, [&]() -> StatusOr<double> {
    const auto start = BenchClock::now();
    for (int i = 0; i < o.round_trips; ++i) {
      TENSORPC_RETURN_IF_ERROR(connection.call_status_only(rpc::Command::ping, {}));
    }
    return seconds_since(start) / o.round_trips;
  });
}

// Seconds for a set (until a SYNCHRONIZE confirms it) and a get of `t`
// (`size` bytes), the median of the repetitions each.
struct SetGet {
  double set = 0, get = 0;
};
StatusOr<SetGet> set_get_seconds(Buffer& buffer, const Tensor& t, uint64_t size, std::vector<uint8_t>& data,
                                 std::vector<uint8_t>& back, int repetitions) {
  SetGet out;
  TENSORPC_ASSIGN_OR_RETURN(auto set, median_of(repetitions, [&]() -> StatusOr<double> {
                              const auto start = BenchClock::now();
                              TENSORPC_RETURN_IF_ERROR(buffer.set(t, data.data(), 0, size));
                              TENSORPC_RETURN_IF_ERROR(synchronize(buffer));
                              return seconds_since(start);
                            }));
  TENSORPC_ASSIGN_OR_RETURN(auto get, median_of(repetitions, [&]() -> StatusOr<double> {
                              const auto start = BenchClock::now();
                              TENSORPC_RETURN_IF_ERROR(buffer.get(t, back.data(), 0, size));
                              return seconds_since(start);
                            }));
  out.set = set;
  out.get = get;
  return out;
}

StatusOr<std::vector<Figure>> bench_round_trip(const RpcBenchOptions& o) {
  TENSORPC_ASSIGN_OR_RETURN(auto server, start_loopback_server(0, 0));
  TENSORPC_ASSIGN_OR_RETURN(auto connection, rpc::get_connection(loopback_endpoint(*server)));
  TENSORPC_ASSIGN_OR_RETURN(auto raw_link, RawLoopback::start(kPingBytes));
  TENSORPC_ASSIGN_OR_RETURN(auto raw,
                            median_of(o.repetitions, [&] { return raw_link->round_trip(kPingBytes, o.round_trips); }));
  TENSORPC_ASSIGN_OR_RETURN(auto ours, ping_seconds(*connection, o));
  Figure f{.id = "rpc.round_trip",
           .name = "round trip of a tiny command (PING)",
           .value = ours * 1e6,
           .unit = "us",
           .baseline = raw * 1e6,
           .baseline_name = "raw TCP ping-pong",
           .target = Target{.bound = Target::Bound::at_most, .limit = 1.5}};
  return std::vector<Figure>{f};
}

StatusOr<std::vector<Figure>> bench_set_get(const RpcBenchOptions& o) {
  const uint64_t max_size = o.sizes.empty() ? 0 : *std::max_element(o.sizes.begin(), o.sizes.end());
  TENSORPC_ASSIGN_OR_RETURN(auto server, start_loopback_server(0, 0));
  // The weights cache off: these figures measure moving bytes, not skipping them.
  TENSORPC_ASSIGN_OR_RETURN(
      auto devices, connect_devices(loopback_endpoint(*server), RemoteOptions{.weights_cache_threshold = UINT64_MAX}));
  TENSORPC_ASSIGN_OR_RETURN(auto buffer, devices[0]->allocate(max_size));
  TENSORPC_ASSIGN_OR_RETURN(auto raw_link, RawLoopback::start(max_size));
  std::vector<uint8_t> data = pattern(max_size), back(max_size);

  std::vector<Figure> out;
  for (const uint64_t size : o.sizes) {
    TENSORPC_ASSIGN_OR_RETURN(auto t, whole(*buffer, size));
    TENSORPC_ASSIGN_OR_RETURN(auto ours, set_get_seconds(*buffer, t, size, data, back, o.repetitions));
    const double set = ours.set, get = ours.get;
    TENSORPC_ASSIGN_OR_RETURN(auto push, median_of(o.repetitions, [&] { return raw_link->push(data.data(), size); }));
    TENSORPC_ASSIGN_OR_RETURN(auto pull, median_of(o.repetitions, [&] { return raw_link->pull(back.data(), size); }));
    std::optional<Target> target;
    if (size >= 64 * kMiB) target = Target{.bound = Target::Bound::at_least, .limit = 0.8};
    const double gb = static_cast<double>(size) / 1e9;
    out.push_back({.id = "rpc.set." + mib_id(size),
                   .name = "set-tensor " + mib_text(size),
                   .value = gb / set,
                   .unit = "GB/s",
                   .baseline = gb / push,
                   .baseline_name = "raw TCP pump",
                   .target = target});
    out.push_back({.id = "rpc.get." + mib_id(size),
                   .name = "get-tensor " + mib_text(size),
                   .value = gb / get,
                   .unit = "GB/s",
                   .baseline = gb / pull,
                   .baseline_name = "raw TCP pump",
                   .target = target});
  }
  return out;
}

StatusOr<std::vector<Figure>> bench_tls(const RpcBenchOptions& o) {
  const uint64_t largest = o.sizes.empty() ? kMiB : *std::max_element(o.sizes.begin(), o.sizes.end());
  const uint64_t size = std::min(largest, 256 * kMiB);
  char dir[] = "/tmp/tensorpc-bench-tls-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return io_error("mkdtemp failed");
  struct RemoveDir {
    std::string path;
    ~RemoveDir() { std::filesystem::remove_all(path); }
  } remove_dir{dir};
  TENSORPC_RETURN_IF_ERROR(ensure_ca(dir).status());
  TENSORPC_ASSIGN_OR_RETURN(auto files, issue_certificate(dir, "server", {"127.0.0.1"}));
  std::vector<uint8_t> data = pattern(size), back(size);

  // The same measurements on a plain server and on a TLS one.
  struct Side {
    double ping = 0;
    SetGet set_get;
  };
  auto measure = [&](const TlsOptions& server_tls, const TlsOptions& client_tls) -> StatusOr<Side> {
    TENSORPC_ASSIGN_OR_RETURN(auto server, start_loopback_server(1, 1, server_tls));
    const std::string endpoint = loopback_endpoint(*server);
    const RemoteOptions options{.weights_cache_threshold = UINT64_MAX, .tls = client_tls};
    TENSORPC_ASSIGN_OR_RETURN(auto devices, connect_devices(endpoint, options));
    TENSORPC_ASSIGN_OR_RETURN(auto buffer, devices[0]->allocate(size));
    TENSORPC_ASSIGN_OR_RETURN(auto t, whole(*buffer, size));
    TENSORPC_ASSIGN_OR_RETURN(auto connection, rpc::get_connection(endpoint, rpc::credentials_of(options)));
    Side side;
    TENSORPC_ASSIGN_OR_RETURN(auto ping, ping_seconds(*connection, o));
    side.ping = ping;
    TENSORPC_ASSIGN_OR_RETURN(auto set_get, set_get_seconds(*buffer, t, size, data, back, o.repetitions));
    side.set_get = set_get;
    return side;
  };
  TENSORPC_ASSIGN_OR_RETURN(auto plain, measure({}, {}));
  TENSORPC_ASSIGN_OR_RETURN(
      auto tls, measure({.cert_file = files.cert_file, .key_file = files.key_file}, {.ca_file = files.ca_file}));
  const double gb = static_cast<double>(size) / 1e9;
  return std::vector<Figure>{
      {.id = "rpc.tls.round_trip",
       .name = "round trip of a tiny command (PING) over TLS",
       .value = tls.ping * 1e6,
       .unit = "us",
       .baseline = plain.ping * 1e6,
       .baseline_name = "plain TCP"},
      {.id = "rpc.tls.set." + mib_id(size),
       .name = "set-tensor " + mib_text(size) + " over TLS",
       .value = gb / tls.set_get.set,
       .unit = "GB/s",
       .baseline = gb / plain.set_get.set,
       .baseline_name = "plain TCP"},
      {.id = "rpc.tls.get." + mib_id(size),
       .name = "get-tensor " + mib_text(size) + " over TLS",
       .value = gb / tls.set_get.get,
       .unit = "GB/s",
       .baseline = gb / plain.set_get.get,
       .baseline_name = "plain TCP"}};
}

StatusOr<std::vector<Figure>> bench_cache_hit(const RpcBenchOptions& o) {
  const uint64_t largest = o.sizes.empty() ? kMiB : *std::max_element(o.sizes.begin(), o.sizes.end());
  const uint64_t size = std::min(largest, 256 * kMiB);
  TENSORPC_ASSIGN_OR_RETURN(auto server, start_loopback_server(0, 0));
  const std::string endpoint = loopback_endpoint(*server);
  TENSORPC_ASSIGN_OR_RETURN(auto plain,
                            connect_devices(endpoint, RemoteOptions{.weights_cache_threshold = UINT64_MAX}));
  TENSORPC_ASSIGN_OR_RETURN(auto cached, connect_devices(endpoint, RemoteOptions{.weights_cache_threshold = size}));
  TENSORPC_ASSIGN_OR_RETURN(auto plain_buffer, plain[0]->allocate(size));
  TENSORPC_ASSIGN_OR_RETURN(auto cached_buffer, cached[0]->allocate(size));
  TENSORPC_ASSIGN_OR_RETURN(auto t, whole(*plain_buffer, size));
  TENSORPC_ASSIGN_OR_RETURN(auto w, whole(*cached_buffer, size));
  w.flags = 0;  // a weight, not an input: its sets go through the cache
  const std::vector<uint8_t> data = pattern(size);
  auto set_seconds = [&](Buffer& b, const Tensor& tensor) -> StatusOr<double> {
    const auto start = BenchClock::now();
    TENSORPC_RETURN_IF_ERROR(b.set(tensor, data.data(), 0, size));
    TENSORPC_RETURN_IF_ERROR(synchronize(b));
    return seconds_since(start);
  };
  TENSORPC_RETURN_IF_ERROR(set_seconds(*cached_buffer, w).status());  // the miss: hash and bytes
  TENSORPC_ASSIGN_OR_RETURN(auto hit, median_of(o.repetitions, [&] { return set_seconds(*cached_buffer, w); }));
  TENSORPC_ASSIGN_OR_RETURN(auto sent, median_of(o.repetitions, [&] { return set_seconds(*plain_buffer, t); }));
  const double gb = static_cast<double>(size) / 1e9;
  return std::vector<Figure>{{.id = "rpc.set_cache_hit." + mib_id(size),
                              .name = "set-tensor " + mib_text(size) + ", weights cache hit",
                              .value = gb / hit,
                              .unit = "GB/s",
                              .baseline = gb / sent,
                              .baseline_name = "cache off"}};
}

StatusOr<std::vector<Figure>> bench_handover(const RpcBenchOptions& o) {
  const uint64_t n = o.handover_bytes;
  TENSORPC_ASSIGN_OR_RETURN(auto a, start_loopback_server(2, 1));
  TENSORPC_ASSIGN_OR_RETURN(auto b, start_loopback_server(1, 1));
  const std::string ea = loopback_endpoint(*a), eb = loopback_endpoint(*b);
  auto a0 = remote_device(ea, 0), a1 = remote_device(ea, 1), b0 = remote_device(eb, 0);
  TENSORPC_ASSIGN_OR_RETURN(auto src, a0->allocate(n));
  TENSORPC_ASSIGN_OR_RETURN(auto same, a1->allocate(n));
  TENSORPC_ASSIGN_OR_RETURN(auto other, b0->allocate(n));
  TENSORPC_ASSIGN_OR_RETURN(auto ts, whole(*src, n));
  TENSORPC_ASSIGN_OR_RETURN(auto tsame, whole(*same, n));
  TENSORPC_ASSIGN_OR_RETURN(auto tother, whole(*other, n));
  std::vector<uint8_t> host = pattern(n);
  TENSORPC_RETURN_IF_ERROR(src->set(ts, host.data(), 0, n));
  TENSORPC_RETURN_IF_ERROR(synchronize(*src));

  // Median seconds of `once`, and the client's bytes (sent + received) of one run.
  struct Path {
    double seconds = 0;
    uint64_t bytes = 0;
  };
  auto measure = [&](const std::vector<std::string>& endpoints, const std::function<Status()>& once) -> StatusOr<Path> {
    Path p;
    TENSORPC_ASSIGN_OR_RETURN(auto s, median_of(o.repetitions, [&]() -> StatusOr<double> {
                                const uint64_t before = client_bytes(endpoints);
                                const auto start = BenchClock::now();
                                TENSORPC_RETURN_IF_ERROR(once());
                                const double t = seconds_since(start);
                                p.bytes = client_bytes(endpoints) - before;
                                return t;
                              }));
    p.seconds = s;
    return p;
  };
  auto relay = [&](Buffer& to, const Tensor& dst) -> Status {
    TENSORPC_RETURN_IF_ERROR(src->get(ts, host.data(), 0, n));
    TENSORPC_RETURN_IF_ERROR(to.set(dst, host.data(), 0, n));
    return synchronize(to);
  };
  TENSORPC_ASSIGN_OR_RETURN(auto one, measure({ea}, [&]() -> Status {
                              TENSORPC_RETURN_IF_ERROR(same->copy(ts, tsame));
                              return synchronize(*same);
                            }));
  TENSORPC_ASSIGN_OR_RETURN(auto one_relay, measure({ea}, [&] { return relay(*same, tsame); }));
  TENSORPC_ASSIGN_OR_RETURN(auto two, measure({ea, eb}, [&] { return other->copy(ts, tother); }));
  TENSORPC_ASSIGN_OR_RETURN(auto two_relay, measure({ea, eb}, [&] { return relay(*other, tother); }));

  // The bytes arrived: a hand-over to the other server leaves it the source's bytes.
  std::vector<uint8_t> back(n);
  TENSORPC_RETURN_IF_ERROR(other->copy(ts, tother));
  TENSORPC_RETURN_IF_ERROR(other->get(tother, back.data(), 0, n));
  if (back != host) return internal_error("hand-over: the other server's copy differs from the source");

  const std::string size = mib_text(n);
  const Target no_tensor_bytes{.bound = Target::Bound::at_most, .limit = 1024, .on_ratio = false};
  return std::vector<Figure>{
      {.id = "handover.devices.time",
       .name = "hand-over " + size + ", 2 devices: time",
       .value = one.seconds * 1e3,
       .unit = "ms",
       .baseline = one_relay.seconds * 1e3,
       .baseline_name = "relayed via client"},
      {.id = "handover.devices.client_bytes",
       .name = "hand-over " + size + ", 2 devices: client bytes",
       .value = static_cast<double>(one.bytes),
       .unit = "B",
       .baseline = static_cast<double>(one_relay.bytes),
       .baseline_name = "relayed via client",
       .target = no_tensor_bytes},
      {.id = "handover.servers.time",
       .name = "hand-over " + size + ", 2 servers: time",
       .value = two.seconds * 1e3,
       .unit = "ms",
       .baseline = two_relay.seconds * 1e3,
       .baseline_name = "relayed via client"},
      {.id = "handover.servers.client_bytes",
       .name = "hand-over " + size + ", 2 servers: client bytes",
       .value = static_cast<double>(two.bytes),
       .unit = "B",
       .baseline = static_cast<double>(two_relay.bytes),
       .baseline_name = "relayed via client",
       .target = no_tensor_bytes},
  };
}

}  // namespace tensorpc::tools
