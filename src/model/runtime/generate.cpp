// The generation loop (generate.h).
#include "model/runtime/generate.h"

#include <chrono>

#include "model/runtime/draft_model.h"
#include "model/runtime/next_token.h"
#include "model/runtime/speculative_step.h"

namespace tensorpc {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Counters of the steps between two snapshots of a scheduler's totals.
SchedulerCounters difference(const SchedulerCounters& after, const SchedulerCounters& before) {
  SchedulerCounters d;
  d.runs = after.runs - before.runs;
  d.splits_run = after.splits_run - before.splits_run;
  d.copies = after.copies - before.copies;
  d.copies_through_host = after.copies_through_host - before.copies_through_host;
  d.bytes_copied = after.bytes_copied - before.bytes_copied;
  d.round_trips = after.round_trips - before.round_trips;
  d.bytes_sent = after.bytes_sent - before.bytes_sent;
  d.bytes_received = after.bytes_received - before.bytes_received;
  return d;
}

}  // namespace

StatusOr<GenerateResult> generate_text(Generator& gen, std::string_view prompt, const GenerateOptions& options,
                                       const TokenSink& on_token, const std::atomic<bool>* cancel) {
  const LlamaModel& model = gen.model();
  TENSORPC_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(options.sampler));
  const Tokenizer& tok = model.tokenizer();
  GenerateResult r;
  r.prompt = tok.encode(prompt, /*add_special=*/true, options.special);
  if (r.prompt.empty()) return invalid_argument("the prompt has no tokens");
  for (int32_t t : r.prompt) sampler.accept(t);

  if (gen.position() > 0) TENSORPC_RETURN_IF_ERROR(gen.reset());
  TENSORPC_ASSIGN_OR_RETURN(const std::unique_ptr<Drafter> drafter,
                            make_drafter(options.lookup, options.draft_model, options.draft_max));
  if (drafter) drafter->push(r.prompt);
  DetokenizeStream stream(tok, /*sequence_start=*/false, options.special);
  auto cancelled = [cancel] { return cancel != nullptr && cancel->load(std::memory_order_relaxed); };

  Clock::time_point t0 = Clock::now();
  Clock::time_point decode_start;
  // Keeps one sampled token; false: generation ends with it. Every stop is
  // checked token by token, so a step that yields several cuts where plain
  // decoding would.
  const auto take = [&](int32_t next) {
    sampler.accept(next, /*generated=*/true);
    r.generated.push_back(next);
    const size_t n = r.generated.size();
    if (n == 1) {
      r.prompt_seconds = seconds_since(t0);
      if (options.on_decode_start) options.on_decode_start();
      decode_start = Clock::now();
    }
    if (options.stop_at_eos && tok.is_end_of_generation(next)) {
      r.stop = StopReason::end_of_text;
      return false;
    }
    const std::string piece = stream.push(next);
    r.text += piece;
    if (on_token && !on_token(piece, next)) {
      r.stop = StopReason::stopped;
      return false;
    }
    if (n >= static_cast<size_t>(options.n_predict)) {
      r.stop = StopReason::n_predict;
      return false;
    }
    // Stop before a step that would pass the context (plain decoding has fed
    // the prompt and every token but this one); the text so far stands.
    if (static_cast<int64_t>(r.prompt.size() + n) > gen.n_ctx()) {
      r.stop = StopReason::context_full;
      return false;
    }
    return true;
  };

  SchedulerCounters before = gen.totals();
  bool more = options.n_predict > 0;
  if (more && cancelled()) {
    r.stop = StopReason::cancelled;
    more = false;
  }
  if (more) {
    auto first = next_token(gen, sampler, r.prompt);
    if (!first.ok()) return first.status().with_context("prompt");
    before = gen.totals();
    if (drafter) drafter->push(first.value());
    more = take(first.value());
  }
  while (more) {
    if (cancelled()) {
      r.stop = StopReason::cancelled;
      break;
    }
    const size_t room = static_cast<size_t>(options.n_predict) - r.generated.size();
    const Status s = decode_after(gen, sampler, drafter.get(), r.generated.back(), room,
                                  [&](int32_t next) { return more = take(next); });
    if (!s.ok()) return s.with_context("token " + std::to_string(r.generated.size()));
    ++r.decode_steps;
  }
  if (const std::string rest = stream.flush(); !rest.empty()) {
    r.text += rest;
    if (on_token) on_token(rest, -1);
  }
  if (!r.generated.empty()) r.decode_seconds = seconds_since(decode_start);
  r.decode = difference(gen.totals(), before);
  if (drafter) r.speculation = drafter->counts();
  r.schedule = gen.describe();
  return r;
}

StatusOr<GenerateResult> generate_text(const LlamaModel& model, ModelPlacement& placement, std::string_view prompt,
                                       const GenerateOptions& options, const TokenSink& on_token) {
  Generator gen(model, placement, options.generator);
  return generate_text(gen, prompt, options, on_token);
}

}  // namespace tensorpc
