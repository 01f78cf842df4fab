// generate_text(): a prompt in, text out — the loop every caller that
// continues a text shares (`tensorpc run` and `demo`, the bench, the public
// tensorpc::Model of include/tensorpc/model.h): tokenize the prompt, prefill
// it, then sample one token at a time until n_predict tokens, the end of the
// text (EOS, or an end-of-turn token: Tokenizer::is_end_of_generation), a
// full context, the caller's callback saying stop, or the cancel flag.
//
// With GenerateOptions::lookup or draft_model, a decode step may verify a draft and yield
// several tokens (speculative_step.h); the tokens are those of plain
// decoding, and every stop cuts where plain decoding would.
//
// It also measures itself (prompt and decode seconds, the scheduler's
// counters over the decode steps), so a tool can print speeds; it prints
// nothing itself.
//
// Ownership: everything is borrowed; the generator (and its model and
// placement) must outlive the call. `cancel` may be set from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/runtime/drafter.h"
#include "model/runtime/generator.h"
#include "model/runtime/sampler.h"
#include "tensorpc/scheduler.h"

namespace tensorpc {

struct GenerateOptions {
  int n_predict = 64;       // tokens to generate at most
  bool stop_at_eos = true;  // stop at EOS or an end-of-turn token; false: run to n_predict (tests, benchmarks)
  bool special = false;     // the prompt may spell control tokens, and generated ones print (--special)
  SamplerOptions sampler;
  // Speculative decoding by prompt lookup (prompt_lookup.h, speculative_step.h):
  // the tokens plain decoding gives, greedy or sampled, in fewer steps when
  // the text repeats itself. draft_max: draft tokens per step at most (>= 1).
  bool lookup = false;
  // Or by a draft model (draft_model.h): the generator of a model of the
  // same vocabulary, borrowed (its sequence 0); excludes lookup.
  Generator* draft_model = nullptr;
  int draft_max = 8;
  GeneratorOptions generator;                  // for callers that make the generator from these options
  std::function<void()> on_decode_start = {};  // called once prefill is done (profiles); may be empty
};

// Why generation ended.
enum class StopReason {
  n_predict,     // n_predict tokens were generated
  end_of_text,   // EOS or an end-of-turn token (kept in `generated`, not in `text`)
  context_full,  // the next step would pass the context
  stopped,       // the token callback returned false
  cancelled,     // the cancel flag was set
};

struct GenerateResult {
  std::vector<int32_t> prompt;     // the prompt's tokens (BOS included)
  std::vector<int32_t> generated;  // the sampled tokens, EOS included when it ended the text
  std::string text;                // the generated text
  StopReason stop = StopReason::n_predict;
  double prompt_seconds = 0;  // prefill, through the first sampled token
  double decode_seconds = 0;  // every later step, sampling included
  int decode_steps = 0;       // evaluations after the prefill (one token each, or one and its draft)
  SpeculationCounts speculation;  // with lookup: its drafts and how they fared
  SchedulerCounters decode;   // the scheduler's counters summed over those steps
  std::string schedule;       // the scheduler's description of the last step's plan
};

// Called once for each generated token that does not end the text, with its
// id and the text it completes (empty while a character is incomplete);
// returning false stops generation after it. A last call with token -1 may
// follow, carrying what was still held back at the end (an incomplete
// character's bytes); its return value is ignored.
using TokenSink = std::function<bool(std::string_view piece, int32_t token)>;

// Generates from `prompt` on `gen`, which starts over first when it has
// evaluated anything (Generator::reset): a caller that generates again and
// again on one placement keeps its plans from one generation to the next —
// graphs planned, plans stored on the servers — instead of making them anew.
// options.generator is not used: the generator has its own. `cancel` is
// read before every step; once set, generation ends with what it has.
StatusOr<GenerateResult> generate_text(Generator& gen, std::string_view prompt, const GenerateOptions& options,
                                       const TokenSink& on_token = {}, const std::atomic<bool>* cancel = nullptr);
// The same on a generator made for this one call (options.generator) on
// `placement`, which must be free of other generators while it runs.
StatusOr<GenerateResult> generate_text(const LlamaModel& model, ModelPlacement& placement, std::string_view prompt,
                                       const GenerateOptions& options, const TokenSink& on_token = {});

}  // namespace tensorpc
