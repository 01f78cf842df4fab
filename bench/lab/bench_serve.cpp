// The serving figures of `tensorpc bench` (bench_serve.h).
#include "lab/bench_serve.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "lab/bench_measure.h"
#include "lab/bench_quant.h"
#include "model/runtime/generator.h"
#include "serve/engine.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc::tools {
namespace {

using Clock = std::chrono::steady_clock;
using serve::Engine;
using serve::Outcome;

constexpr int kSlots = 8;
constexpr int kPromptTokens = 32;

// Requests submitted together, and their ends.
class Batch {
 public:
  // `next_prompt` numbers the prompts of a run, so that each is new.
  Batch(Engine& engine, int& next_prompt) : engine_(engine), next_prompt_(next_prompt) {}
  Status submit(int count, int64_t max_tokens) {
    for (int i = 0; i < count; ++i) {
      serve::Request r;
      // A new prompt each time, so no request finds another's in a slot's cache.
      const int n = next_prompt_++;
      for (int t = 0; t < kPromptTokens; ++t) r.prompt.push_back(n * 977 + t * 131 + 1);
      for (int32_t& t : r.prompt) t %= 32000;
      r.max_tokens = max_tokens;
      r.sampler.temperature = 0;
      r.stop_at_eos = false;
      r.on_done = [this](const Outcome& o) {
        std::lock_guard lock(mu_);
        done_.push_back(o);
        cv_.notify_all();
      };
      TENSORPC_RETURN_IF_ERROR(engine_.submit(std::move(r)));
      ++submitted_;
    }
    return Status();
  }
  // Every request's outcome, once all are done; an error if one failed.
  StatusOr<std::vector<Outcome>> wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return static_cast<int>(done_.size()) == submitted_; });
    for (const Outcome& o : done_) {
      if (o.finish == serve::Finish::error) return o.status;
    }
    return done_;
  }

 private:
  Engine& engine_;
  int& next_prompt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Outcome> done_;
  int submitted_ = 0;
};

// Decode tokens/s of `count` requests submitted at once: each request's
// tokens after its first over the time after its first token, summed over
// the requests (they decode together, so the sum is what the streams
// deliver at once; their prompts' prefill is time to first token).
StatusOr<double> throughput(Engine& engine, int& next_prompt, int count, int64_t tokens) {
  Batch b(engine, next_prompt);
  TENSORPC_RETURN_IF_ERROR(b.submit(count, tokens));
  TENSORPC_ASSIGN_OR_RETURN(auto outcomes, b.wait());
  double rate = 0;
  for (const Outcome& o : outcomes) {
    const double decode = o.seconds - o.first_token_seconds;
    if (o.completion_tokens > 1 && decode > 0) rate += static_cast<double>(o.completion_tokens - 1) / decode;
  }
  return rate;
}

// Tokens/s of decode steps of `n` sequences at once on the local CPU (one
// token each, the cache rewound to the same position every step): what the
// kernels give a batched step of the serving layout, no server, no sampling.
StatusOr<double> step_rate(const LlamaModel& model, int threads, int64_t n, int steps) {
  CpuDevice cpu({.threads = threads});
  PlacementOptions po;
  po.n_ctx = 128 * n;
  TENSORPC_ASSIGN_OR_RETURN(auto placement, ModelPlacement::create(model, {&cpu}, po));
  Generator gen(model, *placement, {.n_seq = n});
  const std::vector<int32_t> prompt(kPromptTokens, 7);
  std::vector<int32_t> next(static_cast<size_t>(n));
  std::vector<SequenceTokens> prefill, step;
  for (int64_t s = 0; s < n; ++s) {
    next[static_cast<size_t>(s)] = static_cast<int32_t>(100 + 37 * s);
    prefill.push_back({s, prompt});
    step.push_back({s, std::span<const int32_t>(&next[static_cast<size_t>(s)], 1)});
  }
  TENSORPC_RETURN_IF_ERROR(gen.eval_batch(prefill).status());
  const auto rewind = [&]() -> Status {
    for (int64_t s = 0; s < n; ++s) TENSORPC_RETURN_IF_ERROR(gen.rewind(s, kPromptTokens));
    return Status();
  };
  TENSORPC_RETURN_IF_ERROR(gen.eval_batch(step, 1).status());  // warm: the step's plan made
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    TENSORPC_RETURN_IF_ERROR(rewind());
    TENSORPC_RETURN_IF_ERROR(gen.eval_batch(step, 1).status());
  }
  return static_cast<double>(n * steps) / seconds_since(t0);
}

}  // namespace

StatusOr<std::vector<Figure>> bench_serving(const ModelBenchOptions& o, std::FILE* progress) {
  TENSORPC_ASSIGN_OR_RETURN(auto path, random_250m_model("Q8_0", progress));
  TENSORPC_ASSIGN_OR_RETURN(auto model, LlamaModel::open(path, {.digest_dir = "off"}));
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::unique_ptr<Device>> remote;
  std::vector<Device*> devices;
  for (int i = 0; i < 2; ++i) {
    TENSORPC_ASSIGN_OR_RETURN(auto server, start_loopback_server(1, o.threads, {}, o.pin_threads));
    remote.push_back(remote_device(loopback_endpoint(*server), 0));
    devices.push_back(remote.back().get());
    servers.push_back(std::move(server));
  }
  const int64_t tokens = std::max(o.n_predict, 65);
  PlacementOptions po;
  po.n_ctx = kSlots * 128;
  TENSORPC_ASSIGN_OR_RETURN(auto placement, ModelPlacement::create(*model, devices, po));
  TENSORPC_ASSIGN_OR_RETURN(auto engine, Engine::create(*model, *placement, {.parallel = kSlots, .n_batch = 64}));

  int next_prompt = 0;
  // Warm-up: every batch size once (plans made and stored on the servers).
  for (int n = 1; n <= kSlots; ++n) TENSORPC_RETURN_IF_ERROR(throughput(*engine, next_prompt, n, 4).status());

  // One request alone against eight at once, in turns.
  std::vector<double> alone, together;
  for (int r = 0; r < std::max(1, o.repetitions); ++r) {
    TENSORPC_ASSIGN_OR_RETURN(double a, throughput(*engine, next_prompt, 1, tokens));
    TENSORPC_ASSIGN_OR_RETURN(double t, throughput(*engine, next_prompt, kSlots, tokens));
    alone.push_back(a);
    together.push_back(t);
  }

  // A late request: its first token alone (its prefill), then while seven others decode.
  std::vector<double> first_alone, first_late, step_seconds;
  for (int r = 0; r < std::max(1, o.repetitions); ++r) {
    Batch single(*engine, next_prompt);
    TENSORPC_RETURN_IF_ERROR(single.submit(1, 1));
    TENSORPC_ASSIGN_OR_RETURN(auto one, single.wait());
    first_alone.push_back(one[0].first_token_seconds);

    Batch seven(*engine, next_prompt);
    TENSORPC_RETURN_IF_ERROR(seven.submit(kSlots - 1, 4 * tokens));
    // Once they decode: a few steps in, timed to give their step time.
    const auto steps_at = [&] { return engine->stats().steps; };
    while (steps_at() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const uint64_t s0 = steps_at();
    const auto t0 = Clock::now();
    while (steps_at() < s0 + 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    step_seconds.push_back(seconds_since(t0) / static_cast<double>(steps_at() - s0));
    Batch late(*engine, next_prompt);
    TENSORPC_RETURN_IF_ERROR(late.submit(1, 1));
    TENSORPC_ASSIGN_OR_RETURN(auto l, late.wait());
    first_late.push_back(l[0].first_token_seconds);
    TENSORPC_RETURN_IF_ERROR(seven.wait().status());
  }

  // The most batching can give on this machine: a step of 8 tokens against a step of 1, local CPU.
  TENSORPC_ASSIGN_OR_RETURN(const double ceiling_8, step_rate(*model, o.threads, kSlots, 30));
  TENSORPC_ASSIGN_OR_RETURN(const double ceiling_1, step_rate(*model, o.threads, 1, 100));

  std::vector<Figure> out;
  const auto [low, high] = ratio_range(together, alone);
  out.push_back({.id = "serve.batched",
                 .name = "serve: 8 requests at once, decode tokens/s of all (250M q8_0, 2 servers)",
                 .value = median(together),
                 .unit = "tok/s",
                 .baseline = median(alone),
                 .baseline_name = "1 request alone",
                 .target = Target{.bound = Target::Bound::at_least, .limit = 3.0},
                 .ratio_low = low,
                 .ratio_high = high});
  out.push_back({.id = "serve.batched_ceiling",
                 .name = "ceiling: decode steps of 8 sequences, tokens/s (local CPU, no server)",
                 .value = ceiling_8,
                 .unit = "tok/s",
                 .baseline = ceiling_1,
                 .baseline_name = "steps of 1 sequence"});
  const double step = median(step_seconds);
  out.push_back({.id = "serve.late_first_token",
                 .name = "serve: first token of a request arriving while 7 decode",
                 .value = median(first_late) * 1e3,
                 .unit = "ms",
                 .baseline = (2 * step + median(first_alone)) * 1e3,
                 .baseline_name = "2 decode steps of the 7 + its first token alone",
                 .target = Target{.bound = Target::Bound::at_most, .limit = 1.0}});
  out.push_back({.id = "serve.first_token",
                 .name = "serve: first token of a request alone (32-token prompt)",
                 .value = median(first_alone) * 1e3,
                 .unit = "ms"});
  engine.reset();
  placement.reset();
  return out;
}

}  // namespace tensorpc::tools
