// Engine: the serving loop of `tensorpc serve`. A fixed set of slots share
// one Generator (each slot one of its sequences, so one region of the KV
// cache), and one thread runs the steps: between steps it admits queued
// requests into free slots and drops those whose client went away; each step
// is one batched forward pass (Generator::eval_batch) carrying the next token
// of every decoding slot and a chunk of the prompt of every slot still
// prefilling, up to n_batch tokens, so a long prompt never stalls the
// streams already flowing. A step over servers thus costs each server one
// execution plan, whatever the number of slots.
//
// With lookup or a draft model (EngineOptions::lookup, draft_model), a
// decoding slot's entry carries its token and a draft of the tokens after it
// (prompt_lookup.h, draft_model.h: the draft model has a sequence for each
// slot, on a generator of its own); the step
// brings back every row of such an entry, and the slot's sampler walks them
// as a single sequence's verification does (walk_draft() in
// speculative_step.h), so the text is the one without lookup. Drafts are
// tokens of the step's n_batch: while prompts wait they get at most half of
// what the decoding slots' tokens leave.
//
// A request whose prompt begins with tokens a free slot still holds from an
// earlier request is given that slot, and only the rest of its prompt is
// evaluated.
//
// Embeddings (submit_embedding) run on the same thread, between generation
// steps: a request waits in its own queue for a free slot, and then its
// inputs are evaluated on every slot free at that moment, one input a slot,
// in steps that end at the hidden states instead of the logits (embed() in
// embedding.h); more inputs than free slots take turns, a generation step
// between turns. The slots it used start over empty (their cached prompts
// are dropped); the slots generating are not touched.
//
// Text goes to each request's callbacks from the engine's thread, piece by
// piece as it completes (whole UTF-8 characters, stop strings held back and
// cut); a callback must be quick (hand the piece to the connection's thread).
//
// Ownership: the engine borrows the model and its placement, which must
// outlive it, and owns its generator and thread; the destructor ends every
// request (cancelled) and joins the thread. submit() and the getters may be
// called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "model/arch/llama_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/placement.h"
#include "model/runtime/recovery.h"
#include "model/runtime/sampler.h"
#include "tensorpc/status.h"

namespace tensorpc::serve {

struct EngineOptions {
  int parallel = 4;       // slots: requests generated at once
  int64_t n_batch = 64;   // tokens of one step at most (every decoding slot's one, prompt chunks the rest)
  int queue = 64;         // requests waiting for a slot at most; beyond: submit() refuses
  int64_t kv_granularity = 32;
  // Speculative decoding by prompt lookup (prompt_lookup.h): a decoding
  // slot's entry in a step carries, after its token, up to draft_max tokens
  // drafted from its prompt and reply, and keeps those its sampler confirms.
  bool lookup = false;
  // Or drafted by a draft model of the same vocabulary (draft_model.h) on
  // its placement; both must outlive the engine. Excludes lookup.
  const LlamaModel* draft_model = nullptr;
  ModelPlacement* draft_placement = nullptr;
  int draft_max = 8;
  // What the generator recovers from a lost server with (recovery.h): a
  // step then pauses while it works, and goes on. Null: a failed step ends
  // its requests with the error. Must outlive the engine.
  PlacementRecovery* recovery = nullptr;
  SchedulerOptions scheduler = {};  // the generator's (GeneratorOptions::scheduler)
  // Told each failed step once (the requests it ended and the error); may be empty.
  std::function<void(const std::string& line)> log = {};
};

enum class Finish { stop, length, cancelled, error };

// What a request ended with.
struct Outcome {
  Finish finish = Finish::stop;
  Status status;                  // the error when finish is error
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // of the prompt, found in the slot's cache
  int64_t completion_tokens = 0;
  std::string stop_string;        // the stop string that ended the text, if one did
  double queue_seconds = 0;       // waiting for a slot
  double first_token_seconds = 0; // from submit() to the first sampled token
  double seconds = 0;             // from submit() to the end
};

// A generated token's log probability under the model (the log-softmax of
// its logits, before any sampling setting), and the most likely tokens'.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};
struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first
};

struct Request {
  std::vector<int32_t> prompt;  // tokens, BOS included when the model wants one
  int64_t max_tokens = -1;      // generated tokens at most; < 1: until the end of the text or the slot's context
  SamplerOptions sampler;
  std::vector<std::string> stop;  // stop strings: the text ends before the first that appears
  bool stop_at_eos = true;
  // Control tokens' text goes to on_text too (Mistral's [TOOL_CALLS], which
  // opens its tool calls); otherwise they print nothing.
  bool special_text = false;
  // Each piece of text as it completes (never empty); false: the client is gone, stop.
  std::function<bool(std::string_view piece)> on_text;
  // Once, at the end, whatever happened (also when the engine shuts down).
  std::function<void(const Outcome&)> on_done;
  // With top_logprobs >= 0: each generated token's log probability and its
  // top_logprobs most likely alternatives, before the token's text (which may
  // come later: a character or stop string still incomplete); not for the
  // token that ends the text. A step that carries such a request brings back
  // every logit.
  int top_logprobs = -1;
  std::function<void(const TokenLogprobs&)> on_logprobs;
  // Set from any thread to stop the request at the next step.
  std::shared_ptr<std::atomic<bool>> cancel;
};

// Texts (as tokens) to turn into vectors (embedding.h).
struct EmbedRequest {
  std::vector<std::vector<int32_t>> inputs;  // each not empty, at most slot_context() tokens
  bool normalize = true;                     // unit vectors
  // Once, at the end, from the engine's thread: a vector per input, in
  // order, or the error (cancelled: the client went away or the engine shut down).
  std::function<void(StatusOr<std::vector<std::vector<float>>>)> on_done;
  std::shared_ptr<std::atomic<bool>> cancel;  // set from any thread to drop the request
};

// Live figures of the engine, for /metrics.
struct EngineStats {
  int slots = 0;
  int active = 0;
  int queued = 0;  // generation and embedding requests waiting for a slot
  uint64_t requests_done = 0;
  uint64_t prompt_tokens = 0;     // evaluated (cached ones not counted)
  uint64_t generated_tokens = 0;
  uint64_t steps = 0;
  uint64_t decode_steps = 0;      // slots' decode entries in those steps (a token and its draft, if any)
  uint64_t decoded_tokens = 0;    // the tokens they gave
  uint64_t draft_tokens = 0;      // draft tokens evaluated (--lookup)
  uint64_t draft_accepted = 0;    // of which the sampler picked the same token
  double tokens_per_second = 0;   // generated over the last few seconds
  std::string last_error;         // the last failed step's error, empty if none
  bool last_step_failed = false;  // the latest step failed (a lost server, with no recovery to go on)
};

class Engine {
 public:
  // Fails when the placement's context does not give each slot a position.
  static StatusOr<std::unique_ptr<Engine>> create(const LlamaModel& model, ModelPlacement& placement,
                                                  EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. out_of_memory when every slot is busy and the queue is full; invalid_argument
  // for an empty prompt, a token outside the vocabulary, a prompt that does
  // not fit a slot's context, or sampler options out of range. On success
  // on_done will be called exactly once.
  Status submit(Request request);
  // Queues an embedding request, counted with the others against --parallel
  // and --queue. invalid_argument for no inputs, an empty input, a token
  // outside the vocabulary or an input longer than a slot's context.
  Status submit_embedding(EmbedRequest request);

  // Positions one slot holds: the longest prompt plus reply a request can have.
  int64_t slot_context() const { return slot_context_; }
  EngineStats stats() const;
  const LlamaModel& model() const { return model_; }
  const EngineOptions& options() const { return options_; }

 private:
  struct Slot;
  struct Pending;
  struct PendingEmbed;
  Engine(const LlamaModel& model, ModelPlacement& placement, EngineOptions options);
  void loop();
  // mu_ held: out_of_memory when the engine stops or every slot is busy and the queue is full.
  Status check_room() const;
  // mu_ held: stats_.queued from both queues.
  void note_queued();
  // Moves queued requests into free slots (the one holding the longest prefix of each prompt).
  void admit();
  // One batched step over the active slots; nothing when none is active.
  void step();
  // One turn of the oldest embedding request on the free slots; nothing when none is free.
  void embed();
  // Ends the embedding request under way with `result`.
  void finish_embedding(StatusOr<std::vector<std::vector<float>>> result);
  // Sets the slot's step_tokens: `next`, then a draft of at most `budget` tokens (taken from it).
  void draft(Slot& s, int64_t& budget);
  // What a token sampled for the slot does (counted, logprobs, text, stops,
  // limits), `position` being the slot's sequence's as plain decoding would
  // have it; false: the request ended.
  bool take_token(Slot& s, int32_t t, int64_t position, std::span<const float> logits);
  void finish(Slot& slot, Finish finish, Status status = Status());
  void note_generated(int64_t n);

  const LlamaModel& model_;
  EngineOptions options_;
  std::unique_ptr<Generator> gen_;  // used by the engine's thread only
  std::unique_ptr<Generator> draft_gen_;  // the draft model's, a sequence a slot; null without one
  bool draft_failed_ = false;             // its last draft failed (logged once a run of failures)
  int64_t slot_context_ = 0;        // gen_->seq_ctx(), read from any thread
  std::vector<std::unique_ptr<Slot>> slots_;  // used by the engine's thread only
  uint64_t admitted_ = 0;                      // requests admitted so far (the engine's thread)

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Pending>> queue_;  // guarded by mu_
  std::deque<std::unique_ptr<PendingEmbed>> embed_queue_;  // guarded by mu_
  std::unique_ptr<PendingEmbed> embedding_;                // the request under way (the engine's thread)
  bool stopping_ = false;                       // guarded by mu_
  EngineStats stats_;                           // guarded by mu_ (slots, queued, active kept current)
  std::deque<std::pair<double, int64_t>> recent_;  // guarded by mu_: (time, tokens) of the last steps
  std::thread thread_;
};

}  // namespace tensorpc::serve
