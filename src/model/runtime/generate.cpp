// The generation loop (generate.h).
#include "model/runtime/generate.h"

#include <chrono>

#include "model/runtime/next_token.h"

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
  DetokenizeStream stream(tok, /*sequence_start=*/false, options.special);
  auto cancelled = [cancel] { return cancel != nullptr && cancel->load(std::memory_order_relaxed); };
  auto step = [&](std::span<const int32_t> tokens) { return next_token(gen, sampler, tokens); };

  Clock::time_point t0 = Clock::now();
  Clock::time_point decode_start;
  SchedulerCounters before = gen.totals();
  for (int i = 0; i < options.n_predict; ++i) {
    if (cancelled()) {
      r.stop = StopReason::cancelled;
      break;
    }
    int32_t next = 0;
    if (i == 0) {
      auto first = step(r.prompt);
      if (!first.ok()) return first.status().with_context("prompt");
      before = gen.totals();
      next = first.value();
    } else {
      const int32_t last = r.generated.back();
      auto sampled = step(std::span<const int32_t>(&last, 1));
      if (!sampled.ok()) return sampled.status().with_context("token " + std::to_string(i));
      next = sampled.value();
      ++r.decode_steps;
    }
    sampler.accept(next, /*generated=*/true);
    r.generated.push_back(next);
    if (i == 0) {
      r.prompt_seconds = seconds_since(t0);
      if (options.on_decode_start) options.on_decode_start();
      decode_start = Clock::now();
    }
    if (options.stop_at_eos && tok.is_end_of_generation(next)) {
      r.stop = StopReason::end_of_text;
      break;
    }
    const std::string piece = stream.push(next);
    r.text += piece;
    if (on_token && !on_token(piece, next)) {
      r.stop = StopReason::stopped;
      break;
    }
    // Stop before a step that would pass the context; the text so far stands.
    if (gen.position() + 1 > gen.n_ctx() && i + 1 < options.n_predict) {
      r.stop = StopReason::context_full;
      break;
    }
  }
  if (const std::string rest = stream.flush(); !rest.empty()) {
    r.text += rest;
    if (on_token) on_token(rest, -1);
  }
  if (!r.generated.empty()) r.decode_seconds = seconds_since(decode_start);
  r.decode = difference(gen.totals(), before);
  r.schedule = gen.describe();
  return r;
}

StatusOr<GenerateResult> generate_text(const LlamaModel& model, ModelPlacement& placement, std::string_view prompt,
                                       const GenerateOptions& options, const TokenSink& on_token) {
  Generator gen(model, placement, options.generator);
  return generate_text(gen, prompt, options, on_token);
}

}  // namespace tensorpc
