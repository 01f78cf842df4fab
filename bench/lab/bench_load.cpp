// The load figures of `tensorpc bench` (bench_load.h).
#include "lab/bench_load.h"

#include <algorithm>
#include <filesystem>

#include "api/device_set.h"
#include "api/model_directory.h"
#include "lab/bench_measure.h"
#include "lab/bench_quant.h"
#include "lab/link_proxy.h"
#include "model/runtime/placement.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc::tools {
namespace {

constexpr double kGB = 1e9;

// A server of one device (every thread asked for), with a weights cache
// directory and local weights when given.
StatusOr<std::unique_ptr<Server>> start_server(int threads, const std::string& cache_dir,
                                               std::shared_ptr<const LocalWeights> local = nullptr) {
  ServerOptions so;
  so.port = 0;
  so.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = threads})};
  so.cache_dir = cache_dir;
  so.local_weights = std::move(local);
  return Server::start(std::move(so));
}

struct Load {
  double seconds = 0;
  uint64_t weight_bytes = 0;
  std::vector<uint64_t> bytes_sent;  // to each endpoint
};

// The model at `path` opened anew (its digests from `digest_dir`) and placed
// on the devices of `endpoints`, layers split evenly.
StatusOr<Load> timed_load(const std::string& path, const std::string& digest_dir,
                          const std::vector<std::string>& endpoints) {
  TENSORPC_ASSIGN_OR_RETURN(auto model, LlamaModel::open(path, {.digest_dir = digest_dir}));
  TENSORPC_ASSIGN_OR_RETURN(auto devices, DeviceSet::connect({}, 0, endpoints));
  std::vector<uint64_t> before;
  for (const std::string& e : endpoints) before.push_back(connection_stats(e).bytes_sent);
  PlacementOptions even;
  even.ratios.assign(devices.devices().size(), 1.0);
  even.n_ctx = 512;
  const auto start = BenchClock::now();
  TENSORPC_ASSIGN_OR_RETURN(auto placement, ModelPlacement::create(*model, devices.devices(), even));
  Load out{.seconds = seconds_since(start), .weight_bytes = placement->weight_bytes(), .bytes_sent = {}};
  for (size_t i = 0; i < endpoints.size(); ++i)
    out.bytes_sent.push_back(connection_stats(endpoints[i]).bytes_sent - before[i]);
  return out;
}

}  // namespace

StatusOr<std::vector<Figure>> bench_large_load(const ModelBenchOptions& o) {
  // The quantized-model figures' random 223 M-parameter model in f32: 888 MB of weights.
  TENSORPC_ASSIGN_OR_RETURN(const std::string path, random_250m_model("F32", nullptr));
  TENSORPC_ASSIGN_OR_RETURN(auto digests, TempDir::create("tensorpc_bench_digests_"));
  TENSORPC_ASSIGN_OR_RETURN(auto cache, TempDir::create("tensorpc_bench_cache_"));
  std::vector<Figure> figures;

  // The ceiling: the same cold load onto a server without a cache directory
  // (on a virtual machine, mostly the first touch of the buffer's new pages).
  TENSORPC_ASSIGN_OR_RETURN(auto plain, start_server(o.threads, ""));
  TENSORPC_ASSIGN_OR_RETURN(auto digests_0, TempDir::create("tensorpc_bench_digests_"));
  TENSORPC_ASSIGN_OR_RETURN(const Load uncached, timed_load(path, digests_0.path, {loopback_endpoint(*plain)}));
  plain.reset();
  const double ceiling = static_cast<double>(uncached.weight_bytes) / uncached.seconds / kGB;

  // Cold then warm onto one server on loopback with a cache directory.
  TENSORPC_ASSIGN_OR_RETURN(auto server, start_server(o.threads, cache.path));
  const std::vector<std::string> one{loopback_endpoint(*server)};
  TENSORPC_ASSIGN_OR_RETURN(const Load cold, timed_load(path, digests.path, one));
  std::vector<double> warm_s;
  for (int i = 0; i < std::max(1, o.repetitions); ++i) {
    TENSORPC_ASSIGN_OR_RETURN(const Load warm, timed_load(path, digests.path, one));
    warm_s.push_back(warm.seconds);
  }
  server.reset();
  const double cold_gbps = static_cast<double>(cold.weight_bytes) / cold.seconds / kGB;
  figures.push_back({.id = "load.1g.cold_loopback",
                     .name = "random 223M f32 (888 MB), cold load onto a server on loopback with a cache directory",
                     .value = cold_gbps,
                     .unit = "GB/s",
                     .baseline = ceiling,
                     .baseline_name = "the same, no cache dir",
                     .target = Target{.bound = Target::Bound::at_least, .limit = 1.0, .on_ratio = false}});
  figures.push_back({.id = "load.1g.warm_loopback",
                     .name = "random 223M f32, warm load (weights cache, digest memo) onto that server",
                     .value = median(warm_s) * 1e3,
                     .unit = "ms",
                     .baseline = cold.seconds * 1e3,
                     .baseline_name = "cold load",
                     .target = Target{.bound = Target::Bound::at_most, .limit = 0.05}});

  // Cold onto two servers behind the link, the uploads at once.
  std::vector<std::unique_ptr<Server>> two;
  std::vector<std::unique_ptr<LinkProxy>> links;
  std::vector<std::string> linked;
  for (int i = 0; i < 2; ++i) {
    TENSORPC_ASSIGN_OR_RETURN(auto s, start_server(o.threads, ""));
    TENSORPC_ASSIGN_OR_RETURN(auto proxy, LinkProxy::start("127.0.0.1", s->port(), o.link));
    linked.push_back(proxy->endpoint());
    two.push_back(std::move(s));
    links.push_back(std::move(proxy));
  }
  TENSORPC_ASSIGN_OR_RETURN(auto digests_2, TempDir::create("tensorpc_bench_digests_"));
  TENSORPC_ASSIGN_OR_RETURN(const Load over_link, timed_load(path, digests_2.path, linked));
  const uint64_t most = *std::max_element(over_link.bytes_sent.begin(), over_link.bytes_sent.end());
  const double link_s = o.link.bits_per_second > 0 ? static_cast<double>(most) * 8 / o.link.bits_per_second : 0;
  figures.push_back(
      {.id = "load.1g.cold_2x_link",
       .name = "random 223M f32, cold load onto 2 servers at once, each behind link " + o.link.to_string(),
       .value = over_link.seconds * 1e3,
       .unit = "ms",
       .baseline = link_s * 1e3,
       .baseline_name = "the link's transfer time",
       .target = Target{.bound = Target::Bound::at_most, .limit = 1.3}});
  links.clear();
  two.clear();

  // Onto a server whose --models directory has the file.
  TENSORPC_ASSIGN_OR_RETURN(auto dir, TempDir::create("tensorpc_bench_models_"));
  std::error_code ec;
  std::filesystem::create_symlink(path, dir.path + "/model.gguf", ec);
  if (ec) return io_error("cannot link the model into " + dir.path + ": " + ec.message());
  TENSORPC_ASSIGN_OR_RETURN(auto models, ModelDirectory::open(dir.path, ""));
  models->index(std::max(1, o.threads));
  TENSORPC_ASSIGN_OR_RETURN(auto local, start_server(o.threads, "", models));
  TENSORPC_ASSIGN_OR_RETURN(auto digests_3, TempDir::create("tensorpc_bench_digests_"));
  TENSORPC_ASSIGN_OR_RETURN(const Load from_disk, timed_load(path, digests_3.path, {loopback_endpoint(*local)}));
  figures.push_back({.id = "load.1g.models_dir.bytes",
                     .name = "random 223M f32, bytes sent to a server whose --models has the file",
                     .value = static_cast<double>(from_disk.bytes_sent[0]),
                     .unit = "B",
                     .baseline = static_cast<double>(from_disk.weight_bytes),
                     .baseline_name = "the weights",
                     .target = Target{.bound = Target::Bound::at_most, .limit = 0.001}});
  figures.push_back({.id = "load.1g.models_dir",
                     .name = "random 223M f32, load onto that server (the client hashing the file)",
                     .value = from_disk.seconds * 1e3,
                     .unit = "ms",
                     .baseline = cold.seconds * 1e3,
                     .baseline_name = "cold load sending the bytes"});
  return figures;
}

}  // namespace tensorpc::tools
