// Model figures of `tensorpc bench` (bench_model.h).
#include "lab/bench_model.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "api/device_set.h"
#include "lab/bench_measure.h"
#include "lab/random_model.h"
#include "model/runtime/draft_model.h"
#include "model/runtime/generate.h"
#include "model/runtime/generator.h"
#include "model/runtime/placement.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc::tools {
namespace {

// Long enough that prefill runs as a batch, short enough that prompt and
// generation fit the context below.
constexpr const char* kPrompt =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep.";
constexpr int64_t kContext = 512;
// A repetition's raw pipeline (the decode figures' ceilings) runs for about
// this long, and at least kMinPipelineSteps steps.
constexpr double kPipelineSeconds = 0.25;
constexpr int kMinPipelineSteps = 20;

}  // namespace

struct GenerationLayout::Parts {
  std::unique_ptr<CpuDevice> local;
  std::optional<DeviceSet> remote;
  std::unique_ptr<ModelPlacement> placement;
  // One for every generation of the layout: decode is measured with the
  // plans the warm-up made, as a process that keeps generating has them.
  std::unique_ptr<Generator> generator;
  // ModelBenchOptions::draft_model's, on its own CPU (destroyed in reverse: the generator first).
  std::unique_ptr<LlamaModel> draft;
  std::unique_ptr<CpuDevice> draft_cpu;
  std::unique_ptr<ModelPlacement> draft_placement;
  std::unique_ptr<Generator> draft_generator;
  std::vector<const Server*> profiled;
  GenerateOptions generate;
  std::string prompt;
  std::vector<double> decode_tps, prefill_tps;
  GenerationSpeed last;

  // The profiled servers' compute and wait times, summed.
  std::pair<uint64_t, uint64_t> server_times() const {
    std::pair<uint64_t, uint64_t> sum{0, 0};
    for (const Server* s : profiled) {
      const ServerStats st = s->stats();
      sum.first += st.compute_ns;
      sum.second += st.peer_wait_ns;
    }
    return sum;
  }
};

GenerationLayout::~GenerationLayout() = default;

StatusOr<std::unique_ptr<GenerationLayout>> GenerationLayout::prepare(const LlamaModel& model,
                                                                      const std::vector<std::string>& endpoints,
                                                                      const ModelBenchOptions& o,
                                                                      std::vector<const Server*> profiled) {
  std::unique_ptr<GenerationLayout> layout(new GenerationLayout());
  layout->parts_ = std::make_unique<Parts>();
  Parts& p = *layout->parts_;
  p.profiled = std::move(profiled);
  std::vector<Device*> list;
  if (endpoints.empty()) {
    p.local = std::make_unique<CpuDevice>(CpuDeviceOptions{.threads = o.threads, .pin_threads = o.pin_threads});
    list = {p.local.get()};
  } else {
    TENSORPC_ASSIGN_OR_RETURN(auto devices, DeviceSet::connect({}, 0, endpoints));
    p.remote.emplace(std::move(devices));
    list = p.remote->devices();
  }
  PlacementOptions even;  // layers split evenly
  even.ratios.assign(list.size(), 1.0);
  even.n_ctx = kContext;
  TENSORPC_ASSIGN_OR_RETURN(p.placement, ModelPlacement::create(model, list, even));
  p.prompt = o.prompt.empty() ? kPrompt : o.prompt;
  p.generate.n_predict = o.n_predict;
  p.generate.stop_at_eos = false;
  p.generate.sampler.temperature = 0;
  p.generate.lookup = o.lookup;
  p.generate.special = o.special;
  if (!o.draft_model.empty()) {
    TENSORPC_ASSIGN_OR_RETURN(p.draft, LlamaModel::open(o.draft_model, {.digest_dir = "off"}));
    TENSORPC_RETURN_IF_ERROR(check_draft_vocabulary(model.tokenizer(), p.draft->tokenizer()));
    p.draft_cpu = std::make_unique<CpuDevice>(CpuDeviceOptions{.threads = 1});
    TENSORPC_ASSIGN_OR_RETURN(p.draft_placement,
                              ModelPlacement::create(*p.draft, {p.draft_cpu.get()}, {.n_ctx = kContext}));
    p.draft_generator = std::make_unique<Generator>(*p.draft, *p.draft_placement);
    p.generate.draft_model = p.draft_generator.get();
  }
  p.last.weight_bytes = p.placement->weight_bytes();
  // One generation first, not measured, for every layout alike: what a
  // layout does once — storing its plans and graphs on the servers, asking
  // for standing grants, the allocators' buffers growing into fresh memory —
  // is load time, not decode speed.
  p.generator = std::make_unique<Generator>(model, *p.placement, p.generate.generator);
  TENSORPC_ASSIGN_OR_RETURN(auto warm_up, generate_text(*p.generator, p.prompt, p.generate));
  (void)warm_up;
  return layout;
}

Status GenerationLayout::measure() {
  Parts& p = *parts_;
  std::pair<uint64_t, uint64_t> at_decode{0, 0};
  GenerateOptions g = p.generate;
  g.on_decode_start = [&] { at_decode = p.server_times(); };
  TENSORPC_ASSIGN_OR_RETURN(auto r, generate_text(*p.generator, p.prompt, g));
  if (r.decode_steps == 0) return internal_error("no decode step ran");
  const auto after = p.server_times();
  // The tokens after the prefill's: one a step, or more with lookup.
  const double decoded = static_cast<double>(r.generated.size() - 1);
  p.last.server_compute_ms = (after.first - at_decode.first) / 1e6 / r.decode_steps;
  p.last.peer_wait_ms = (after.second - at_decode.second) / 1e6 / r.decode_steps;
  p.last.round_trips = static_cast<double>(r.decode.round_trips) / decoded;
  p.last.client_bytes = static_cast<double>(r.decode.bytes_sent + r.decode.bytes_received) / decoded;
  p.last.tokens_per_step = decoded / r.decode_steps;
  p.prefill_tps.push_back(static_cast<double>(r.prompt.size()) / r.prompt_seconds);
  p.decode_tps.push_back(decoded / r.decode_seconds);
  return Status();
}

GenerationSpeed GenerationLayout::speed() const {
  GenerationSpeed s = parts_->last;
  s.decode_runs = parts_->decode_tps;
  s.prefill_runs = parts_->prefill_tps;
  s.decode_tps = median(parts_->decode_tps);
  s.prefill_tps = median(parts_->prefill_tps);
  return s;
}

StatusOr<GenerationSpeed> measure_generation(const LlamaModel& model, const std::vector<std::string>& endpoints,
                                             const ModelBenchOptions& o, const std::vector<const Server*>& profiled) {
  TENSORPC_ASSIGN_OR_RETURN(auto layout, GenerationLayout::prepare(model, endpoints, o, profiled));
  for (int i = 0; i < std::max(1, o.repetitions); ++i) TENSORPC_RETURN_IF_ERROR(layout->measure());
  return layout->speed();
}

namespace {

// Servers in this process, and LinkProxies in front of them when asked.
struct Servers {
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::unique_ptr<LinkProxy>> proxies;

  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (const auto& s : servers) out.push_back(loopback_endpoint(*s));
    return out;
  }
  std::vector<const Server*> profiled() const {
    std::vector<const Server*> out;
    for (const auto& s : servers) out.push_back(s.get());
    return out;
  }
  StatusOr<std::vector<std::string>> linked_endpoints(const LinkShape& link) {
    std::vector<std::string> out;
    for (const auto& s : servers) {
      TENSORPC_ASSIGN_OR_RETURN(auto proxy, LinkProxy::start("127.0.0.1", s->port(), link));
      out.push_back(proxy->endpoint());
      proxies.push_back(std::move(proxy));
    }
    return out;
  }
};

StatusOr<Servers> start_servers(int count, int devices, int threads_per_device, bool pin_threads) {
  Servers s;
  for (int i = 0; i < count; ++i) {
    TENSORPC_ASSIGN_OR_RETURN(auto server, start_loopback_server(devices, threads_per_device, {}, pin_threads));
    s.servers.push_back(std::move(server));
  }
  return s;
}

}  // namespace

StatusOr<std::vector<Figure>> bench_model_decode(const BenchModel& m, const ModelBenchOptions& o) {
  // Digests in memory only: the bench leaves nothing in the user's store.
  // A model's weights are placed on one set of devices at a time, so each
  // layout has the file opened for itself.
  const auto open = [&] { return LlamaModel::open(m.path, {.digest_dir = "off"}); };
  TENSORPC_ASSIGN_OR_RETURN(auto model, open());
  TENSORPC_ASSIGN_OR_RETURN(auto model_1x1, open());
  TENSORPC_ASSIGN_OR_RETURN(auto model_2x2, open());
  TENSORPC_ASSIGN_OR_RETURN(auto model_link, open());
  const std::string id = "model." + m.key + ".";
  const std::string name = m.label + ", ";

  // The same cores in every layout: the local CPU has all o.threads, one
  // server one device with all of them, and so does each device of two
  // servers with two devices each: the stages of a pipeline compute one at
  // a time, so each can have every core (two servers on two machines would
  // each have their own).
  // Every layout is loaded first and then measured in turns, repetition by
  // repetition, so that a machine that slows down or speeds up meanwhile
  // (a shared one does) moves each layout's median alike.
  TENSORPC_ASSIGN_OR_RETURN(auto one, start_servers(1, 1, o.threads, o.pin_threads));
  TENSORPC_ASSIGN_OR_RETURN(auto two, start_servers(2, 2, o.threads, o.pin_threads));
  TENSORPC_ASSIGN_OR_RETURN(auto on_local, GenerationLayout::prepare(*model, {}, o));
  TENSORPC_ASSIGN_OR_RETURN(auto on_one, GenerationLayout::prepare(*model_1x1, one.endpoints(), o));
  TENSORPC_ASSIGN_OR_RETURN(auto on_two, GenerationLayout::prepare(*model_2x2, two.endpoints(), o, two.profiled()));
  // The same servers behind the emulated link: their weights caches have the
  // model, so only hashes cross the link while it loads.
  TENSORPC_ASSIGN_OR_RETURN(auto linked_endpoints, two.linked_endpoints(o.link));
  TENSORPC_ASSIGN_OR_RETURN(auto on_link, GenerationLayout::prepare(*model_link, linked_endpoints, o, two.profiled()));
  // In the same turns, the pipeline of the ceilings below: this repetition's
  // local step, spun in two halves by two threads that hand a token over
  // loopback TCP to each other.
  TENSORPC_ASSIGN_OR_RETURN(auto raw, RawLoopback::start(64));
  std::vector<double> raw_sleeping, raw_polling, raw_single;
  for (int i = 0; i < std::max(1, o.repetitions); ++i) {
    for (GenerationLayout* layout : {on_local.get(), on_one.get(), on_two.get(), on_link.get()}) {
      TENSORPC_RETURN_IF_ERROR(layout->measure());
    }
    const double local_step = 1 / on_local->speed().decode_runs.back();
    const auto half =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(local_step / 2));
    const int steps = std::max(kMinPipelineSteps, static_cast<int>(kPipelineSeconds / local_step));
    TENSORPC_ASSIGN_OR_RETURN(auto sleeping, raw->pipeline_step(half, half, steps));
    TENSORPC_ASSIGN_OR_RETURN(auto polling, raw->pipeline_step(half, half, steps, /*polling=*/true));
    TENSORPC_ASSIGN_OR_RETURN(
        auto single, raw->pipeline_step(std::chrono::nanoseconds(0), std::chrono::nanoseconds(2 * half), steps));
    raw_sleeping.push_back(1 / sleeping);
    raw_polling.push_back(1 / polling);
    raw_single.push_back(1 / single);
  }
  const GenerationSpeed local = on_local->speed(), single = on_one->speed(), spread = on_two->speed(),
                        linked = on_link->speed();

  const Target distributed{.bound = Target::Bound::at_least, .limit = 0.9};
  const Target one_server{.bound = Target::Bound::at_least, .limit = 0.95};
  const Target one_round_trip{.bound = Target::Bound::at_most, .limit = 1, .on_ratio = false};
  const std::string link = "link " + o.link.to_string();
  std::vector<Figure> out;
  // The layouts were measured in turns: each repetition's ratio to the
  // local CPU's generation of the same turn shows the noise.
  auto speed = [&](const std::string& what, const std::string& layout, const std::string& layout_name,
                   const GenerationSpeed& s, std::optional<Target> target) {
    const bool decode = what == "decode";
    const bool on_local = &s == &local;
    const auto [low, high] = on_local ? std::pair{0.0, 0.0}
                                      : ratio_range(decode ? s.decode_runs : s.prefill_runs,
                                                    decode ? local.decode_runs : local.prefill_runs);
    const double local_tps = on_local ? 0 : decode ? local.decode_tps : local.prefill_tps;
    out.push_back({.id = id + what + "." + layout,
                   .name = name + what + ", " + layout_name,
                   .value = decode ? s.decode_tps : s.prefill_tps,
                   .unit = "tok/s",
                   .baseline = local_tps,
                   .baseline_name = local_tps > 0 ? "local CPU" : "",
                   .target = target,
                   .ratio_low = low,
                   .ratio_high = high});
  };
  auto traffic = [&](const std::string& layout, const std::string& layout_name, const GenerationSpeed& s, int servers,
                     std::optional<Target> target) {
    out.push_back({.id = id + "bytes_per_token." + layout,
                   .name = name + "client bytes/token, " + layout_name,
                   .value = s.client_bytes,
                   .unit = "B/token"});
    out.push_back({.id = id + "round_trips_per_server_token." + layout,
                   .name = name + "round trips/token/server, " + layout_name,
                   .value = s.round_trips / servers,
                   .unit = "RT",
                   .target = target});
  };
  speed("decode", "local", "local CPU", local, std::nullopt);
  speed("decode", "1x1", "1 server x 1 device", single, one_server);
  speed("decode", "2x2", "2 servers x 2 devices", spread, distributed);
  speed("prefill", "local", "local CPU", local, std::nullopt);
  speed("prefill", "1x1", "1 server x 1 device", single, std::nullopt);
  speed("prefill", "2x2", "2 servers x 2 devices", spread, std::nullopt);
  // The most a split over two servers could reach on this machine: a token
  // that passes over two servers crosses between them twice at the least
  // (the hidden state to the second, the next token back to the first), so
  // no such split decodes faster than the local step's work in two halves
  // with two hand-overs and nothing else — the raw pipeline above. With
  // threads that sleep while they wait, as servers' do; and with threads
  // that poll, which needs a free core for every waiting thread.
  // And for one server: the local step's work on the far side of one
  // hand-over each way, with nothing else.
  auto ceiling = [&](const std::string& layout, const std::string& kind, const std::string& how,
                     const std::vector<double>& tps) {
    const auto [low, high] = ratio_range(tps, local.decode_runs);
    out.push_back({.id = id + "decode." + layout + "_ceiling." + kind,
                   .name = name + "decode, ceiling of " + how,
                   .value = median(tps),
                   .unit = "tok/s",
                   .baseline = local.decode_tps,
                   .baseline_name = "local CPU",
                   .ratio_low = low,
                   .ratio_high = high});
  };
  ceiling("1x1", "sleeping", "1 server: the local step over TCP and back, waiters asleep", raw_single);
  ceiling("2x2", "sleeping", "2 servers: the local step in 2 halves over TCP, waiters asleep", raw_sleeping);
  ceiling("2x2", "polling", "2 servers: the local step in 2 halves over TCP, waiters polling", raw_polling);
  traffic("1x1", "1 server x 1 device", single, 1, std::nullopt);
  traffic("2x2", "2 servers x 2 devices", spread, 2, std::nullopt);
  const auto [link_low, link_high] = ratio_range(linked.decode_runs, spread.decode_runs);
  out.push_back({.id = id + "decode.2x2_link",
                 .name = name + "decode, 2 servers x 2 devices, " + link,
                 .value = linked.decode_tps,
                 .unit = "tok/s",
                 .baseline = spread.decode_tps,
                 .baseline_name = "same on loopback",
                 .ratio_low = link_low,
                 .ratio_high = link_high});
  traffic("2x2_link", "2 servers x 2 devices, " + link, linked, 2, one_round_trip);
  // Where a decode step's time goes: computing on the servers' devices (the
  // local step, all compute, for scale), and the rest — the wire, hand-overs
  // between servers, the client, threads waking — against the whole step.
  // Waiting for another server's tensor overlaps the sender's compute.
  auto profile = [&](const std::string& layout, const std::string& layout_name, const GenerationSpeed& s) {
    const double step_ms = 1000 / s.decode_tps;
    out.push_back({.id = id + "step." + layout + ".compute",
                   .name = name + "decode step, compute on the servers, " + layout_name,
                   .value = s.server_compute_ms,
                   .unit = "ms",
                   .baseline = 1000 / local.decode_tps,
                   .baseline_name = "local step"});
    out.push_back({.id = id + "step." + layout + ".other",
                   .name = name + "decode step, wire, hand-overs, client, " + layout_name,
                   .value = std::max(0.0, step_ms - s.server_compute_ms),
                   .unit = "ms",
                   .baseline = step_ms,
                   .baseline_name = "whole step"});
    out.push_back({.id = id + "step." + layout + ".peer_wait",
                   .name = name + "decode step, plans waiting for a peer's tensor, " + layout_name,
                   .value = s.peer_wait_ms,
                   .unit = "ms",
                   .baseline = step_ms,
                   .baseline_name = "whole step"});
  };
  profile("2x2", "2 servers x 2 devices", spread);
  profile("2x2_link", "2 servers x 2 devices, " + link, linked);
  // The client's counters miss exchanges between the servers (a peer copy's
  // grant); the time the link adds to a token does not: in link round trips,
  // it is every exchange on the token's critical path. Taken repetition by
  // repetition (the link's generation runs right after loopback's, on the
  // same servers), so that the machine's drift between repetitions stays
  // out of the difference; the median of the repetitions'.
  const double link_round_trip = 2 * std::chrono::duration<double>(o.link.one_way_delay).count();
  if (link_round_trip > 0) {
    std::vector<double> added_runs;
    for (size_t i = 0; i < std::min(linked.decode_runs.size(), spread.decode_runs.size()); ++i) {
      added_runs.push_back(std::max(0.0, 1 / linked.decode_runs[i] - 1 / spread.decode_runs[i]));
    }
    const double added = median(added_runs);
    out.push_back({.id = id + "implied_round_trips_per_server_token.2x2_link",
                   .name = name + "round trips/token/server the link's time implies, " + link,
                   .value = added / link_round_trip / 2,
                   .unit = "RT",
                   .target = one_round_trip});
  }
  return out;
}

StatusOr<std::vector<Figure>> bench_model_load(const BenchModel& m, const ModelBenchOptions& o) {
  TENSORPC_ASSIGN_OR_RETURN(auto digest_dir, TempDir::create("tensorpc_bench_digests_"));
  TENSORPC_ASSIGN_OR_RETURN(auto servers, start_servers(1, 1, o.threads, o.pin_threads));
  TENSORPC_ASSIGN_OR_RETURN(auto endpoints, servers.linked_endpoints(o.link));
  struct Load {
    double seconds = 0;
    double bytes_sent = 0;
  };
  // The model is opened anew for each load, its digests read from the store
  // in the load. The devices and the placement go before the next load: the
  // connection closes, and the server frees the buffers but keeps its
  // weights cache.
  auto load = [&]() -> StatusOr<Load> {
    TENSORPC_ASSIGN_OR_RETURN(auto model, LlamaModel::open(m.path, {.digest_dir = digest_dir.path}));
    TENSORPC_ASSIGN_OR_RETURN(auto devices, DeviceSet::connect({}, 0, endpoints));
    PlacementOptions by_free_memory;
    by_free_memory.n_ctx = kContext;
    const uint64_t before = connection_stats(endpoints[0]).bytes_sent;
    const auto start = BenchClock::now();
    TENSORPC_ASSIGN_OR_RETURN(auto placement, ModelPlacement::create(*model, devices.devices(), by_free_memory));
    return Load{seconds_since(start), static_cast<double>(connection_stats(endpoints[0]).bytes_sent - before)};
  };
  // One cold load (the server's cache is empty only once), then warm ones:
  // their median, as a single one can meet a stall of the machine.
  TENSORPC_ASSIGN_OR_RETURN(auto cold, load());
  std::vector<double> warm_ms;
  Load warm;
  for (int i = 0; i < std::max(1, o.repetitions); ++i) {
    TENSORPC_ASSIGN_OR_RETURN(auto again, load());
    warm_ms.push_back(again.seconds * 1e3);
    warm = again;
  }
  const auto [fastest, slowest] = std::minmax_element(warm_ms.begin(), warm_ms.end());
  const std::string link = "link " + o.link.to_string();
  return std::vector<Figure>{
      {.id = "load." + m.key + ".time",
       .name = m.label + ", load warm (client digest memo, weights cache), " + link,
       .value = median(warm_ms),
       .unit = "ms",
       .baseline = cold.seconds * 1e3,
       .baseline_name = "cold load",
       .target = Target{.bound = Target::Bound::at_most, .limit = 0.1},
       .ratio_low = *fastest / (cold.seconds * 1e3),
       .ratio_high = *slowest / (cold.seconds * 1e3)},
      {.id = "load." + m.key + ".bytes",
       .name = m.label + ", bytes uploaded warm",
       .value = warm.bytes_sent,
       .unit = "B",
       .baseline = cold.bytes_sent,
       .baseline_name = "cold load"},
  };
}

namespace {}  // namespace

std::string temp_model_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

std::string prefill_prompt(const LlamaModel& model) {
  const std::string sentence = "In the beginning God created the heaven and the earth. ";
  std::string prompt;
  while (model.tokenizer().encode(prompt).size() < 128) prompt += sentence;
  return prompt;
}

StatusOr<std::string> random_100m_model(DType type) {
  return write_random_llama_once(temp_model_path("tensorpc_bench_100m_" + std::string(name_of(type)) + ".gguf"),
                                 {.n_vocab = 32000,
                                  .n_embd = 768,
                                  .n_layer = 12,
                                  .n_head = 12,
                                  .n_head_kv = 4,
                                  .n_ff = 2048,
                                  .n_ctx = 512,
                                  .type = type,
                                  .seed = 7});
}

StatusOr<std::string> random_24m_f32_model() {
  return write_random_llama_once(temp_model_path("tensorpc_bench_24m_f32.gguf"), {.n_vocab = 32000,
                                                                                  .n_embd = 256,
                                                                                  .n_layer = 8,
                                                                                  .n_head = 4,
                                                                                  .n_head_kv = 2,
                                                                                  .n_ff = 896,
                                                                                  .n_ctx = 512,
                                                                                  .type = DType::f32,
                                                                                  .seed = 9});
}

}  // namespace tensorpc::tools
