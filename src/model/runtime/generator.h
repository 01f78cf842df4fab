// Generator: runs a placed llama model step by step — prompt in batches,
// then one token at a time — across its devices through a Scheduler.
//
// Each step builds the forward graph for its tokens (llama.h), lets the
// scheduler place and run it over the placement's devices, and returns the
// logits of the step's last token. A step of the same shape as the one
// before (every decode step inside one KV window) reuses that step's graph
// and the scheduler's plan for it: only the inputs change. The sequence's
// position advances with every token fed.
//
// eval_all() keeps every token's row of the output projection, not only the
// last: what scoring a text needs (perplexity.h). Its graphs are its own, so
// decoding never computes rows it throws away.
//
// eval_top() ends the step's graph with a top_k node, so the device of the
// output projection hands back only the k largest logits and their ids: the
// few hundred bytes a sampler needs (Sampler::candidates_needed) instead of
// the whole vocabulary's logits, which over a network is most of a decode
// step's traffic (128 KiB for 32,000 tokens). The logits stay on the device
// for read_logits().
//
// eval_sample() goes one step further: the top_k node feeds a sample node
// (op.h) given the sampler's settings, its recent tokens and its next draw,
// and the step's whole answer is the token id, picked by the device of the
// output projection — the last server of a pipeline — exactly as the
// client's Sampler would pick it.
//
// Several sequences can share the generator (GeneratorOptions::n_seq), as a
// server answering several requests at once does: each has its own position
// and its own cells of the KV cache (cache_cell() in llama.h), and
// eval_batch() runs the next tokens of any of them as one forward pass — one
// graph, so one execution plan per server — returning the logits after each
// one's last token, or after each of its tokens (SequenceTokens::all_rows:
// a slot verifying a draft). A single-sequence caller never names a
// sequence: eval(), position() and rewind() are sequence 0's.
//
// eval_hidden() runs such a batch through a graph that stops before the
// output projection and returns every token's final hidden state, which
// embeddings pool (embedding.h): the same placement, the same sequences and
// cells, only the graph's end differs.
//
// With a recovery (GeneratorOptions::recovery, recovery.h), a step that
// fails because a server of the placement was lost is not the end: the
// generator moves to the placement the recovery makes, evaluates again the
// tokens every sequence holds (it keeps them: history()) to rebuild the KV
// cache, and runs the step again, so its caller sees a slower step, not an
// error. Without one, the step's error is the answer.
//
// Ownership: the generator owns its scheduler; the model, the placement (or
// the recovery, which replaces it) and their devices must outlive it. One
// thread uses a generator at a time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/runtime/placement.h"
#include "model/runtime/recovery.h"
#include "tensorpc/context.h"
#include "tensorpc/scheduler.h"

namespace tensorpc {

struct GeneratorOptions {
  int64_t n_batch = 512;         // prompt tokens per step at most
  int64_t kv_granularity = 32;   // decode graphs change only when the KV window grows by this
  bool select_on_device = true;  // false: can_select_on_device() says no (measurements, tests)
  int64_t n_seq = 1;             // sequences sharing the cache, each up to n_ctx / n_seq positions
  // Asked when a step fails (recovery.h); null: a failed step is the answer.
  PlacementRecovery* recovery = nullptr;
  SchedulerOptions scheduler = {};  // of the scheduler of each placement
};

// What a device needs to sample as a Sampler would (sampler.h): its chain's
// settings, its recent tokens (Sampler::recent) and its next draw
// (Sampler::peek_draw).
struct DeviceSampling {
  SampleSettings settings;
  std::vector<int32_t> recent;
  uint64_t draw = 0;
};

// One sequence's tokens in a batched step.
struct SequenceTokens {
  int64_t seq = 0;
  std::span<const int32_t> tokens;
  // The logits after every one of the tokens come back, not only the last's:
  // what verifying a speculative draft in a batch reads (speculative_step.h).
  bool all_rows = false;
};

class Generator {
 public:
  Generator(const LlamaModel& model, ModelPlacement& placement, GeneratorOptions options = {});

  // Feeds `tokens` at the current position; returns the logits after the
  // last of them ([n_vocab]). Fails when the sequence would pass n_ctx.
  StatusOr<std::vector<float>> eval(std::span<const int32_t> tokens);

  // The same step, returning the logits after every one of the tokens
  // ([tokens.size()][n_vocab], row i after tokens[i]).
  StatusOr<std::vector<float>> eval_all(std::span<const int32_t> tokens);

  // The same step, returning the k largest logits after the last token as
  // the top_k op lays them out ([k, 2]: values, largest first, then ids).
  // Needs can_select_on_device().
  StatusOr<std::vector<float>> eval_top(std::span<const int32_t> tokens, int64_t k);
  // The same for every one of the tokens ([tokens.size()][2k], row i after
  // tokens[i]): what verifying a speculative draft reads (speculative_step.h).
  // read_logits() then reads every token's logits of the step (of the last
  // n_batch tokens, when there were more). Needs can_select_on_device().
  StatusOr<std::vector<float>> eval_top_all(std::span<const int32_t> tokens, int64_t k);
  // Whether the device of the output projection computes top_k (a server
  // older than protocol 1.6 does not; callers then use eval()).
  bool can_select_on_device() const;
  // The same step ending in a sample node over those k candidates: the
  // token, or kSampleUndecided (every candidate +inf, more may be outside:
  // read_logits() and sample them all) or kSampleNoToken. Needs
  // can_sample_on_device().
  StatusOr<int32_t> eval_sample(std::span<const int32_t> tokens, int64_t k, const DeviceSampling& sampling);
  // Whether that device also computes the sample op (protocol 1.10).
  bool can_sample_on_device() const;
  // All logits of the last step that eval_top() or eval_sample() ran (one more read).
  StatusOr<std::vector<float>> read_logits() const;

  // One forward pass over the next tokens of several distinct sequences
  // (each at its own position, which advances): for each entry in order,
  // the logits after its last token — after each of its tokens with
  // all_rows — ([n_vocab] each, one after the other), or with k > 0 their k
  // largest as top_k lays them out ([2k] each; needs can_select_on_device()).
  // After a step with k > 0, read_logits() reads those rows' every logit.
  // The whole batch is one step: the caller keeps it to a size it can
  // afford (n_batch tokens, say).
  StatusOr<std::vector<float>> eval_batch(std::span<const SequenceTokens> batch, int64_t k = 0);
  // The same pass returning, instead of logits, every token's final hidden
  // state (after the output norm, before the output projection):
  // [n_tokens][n_embd], the entries' tokens in order.
  StatusOr<std::vector<float>> eval_hidden(std::span<const SequenceTokens> batch);

  // Back to position 0 with an empty cache, every sequence.
  Status reset();
  // Back to `position` (≤ position()), keeping the cache before it: the next
  // tokens overwrite what came after, which the mask hides until then. A
  // conversation that changes its end (a reply re-tokenized) resumes so.
  Status rewind(int64_t position) { return rewind(0, position); }
  // The same for one sequence: rewind(seq, 0) starts it over.
  Status rewind(int64_t seq, int64_t position);

  int64_t position() const { return positions_[0]; }
  int64_t position(int64_t seq) const { return positions_[static_cast<size_t>(seq)]; }
  int64_t n_seq() const { return static_cast<int64_t>(positions_.size()); }
  // The tokens sequence `seq` holds, from position 0 (position(seq) of them).
  const std::vector<int32_t>& history(int64_t seq) const { return history_[static_cast<size_t>(seq)]; }
  // Positions of the KV cache, and the positions one sequence can hold.
  int64_t n_ctx() const { return n_ctx_; }
  int64_t seq_ctx() const;
  const LlamaModel& model() const { return model_; }
  const GeneratorOptions& options() const { return options_; }
  // The placement the steps run on: after a recovery, the one it made (null
  // while a recovery has failed and the next step has not made one).
  ModelPlacement* placement() const { return placement_; }
  // The scheduler of the current placement (there must be one).
  const Scheduler& scheduler() const { return *scheduler_; }
  // The steps' counters, summed over every placement the generator ran on.
  SchedulerCounters totals() const;
  // The last step's plan (Scheduler::describe); empty before any.
  std::string describe() const;

 private:
  const LlamaModel& model_;
  ModelPlacement* placement_;
  GeneratorOptions options_;
  int64_t n_ctx_ = 0;
  std::unique_ptr<Scheduler> scheduler_;       // null with placement_
  SchedulerCounters carried_;                  // of the schedulers of earlier placements
  std::vector<int64_t> positions_;             // per sequence
  std::vector<std::vector<int32_t>> history_;  // per sequence: its tokens, positions_ of them

  // The last step's graph, kept for the next step of the same shape.
  struct BuiltStep {
    Context ctx;
    LlamaStep step;
    Tensor* top = nullptr;  // top_k of the logits, when k > 0
    int64_t k = 0;
    // The sample node over `top` and its inputs, when the step samples.
    Tensor* token = nullptr;
    Tensor* recent = nullptr;
    Tensor* draw = nullptr;
    SampleSettings settings;
    LlamaStepShape shape;
    Graph graph;
  };
  // The tokens of one step: each with its sequence; `last` marks the tokens
  // whose logits come back (empty: the last token's, or all with all_logits);
  // `hidden`: every token's hidden state comes back instead (no logits).
  struct StepTokens {
    std::vector<int32_t> tokens, seqs, last;
    bool hidden = false;
  };
  // invalid_argument unless least <= k <= n_vocab.
  Status check_candidates(int64_t k, int64_t least) const;
  // The batch's tokens, each entry a distinct sequence with tokens; `last`
  // its last tokens, or all of an entry's with all_rows.
  StatusOr<StepTokens> batch_tokens(std::span<const SequenceTokens> batch) const;
  // Runs one step and appends its result (logits, top k, or with `sampling`
  // the sampled token's bits as one float) to `out`; recovers from a lost
  // server (recover()) and runs it again.
  Status step(const StepTokens& in, int64_t k, bool all_logits, std::vector<float>& out,
              const DeviceSampling* sampling = nullptr);
  // The step itself, on the current placement.
  Status step_once(const StepTokens& in, int64_t k, bool all_logits, std::vector<float>& out,
                   const DeviceSampling* sampling);
  // After `failure`: when the recovery says servers were lost (or, with no
  // placement, at once), moves to the placement it makes and replays the
  // sequences. Returns `failure` when no server was lost, and the
  // recovery's error when it could not recover.
  Status recover(Status failure);
  // Every sequence's history evaluated again from position 0, in steps of
  // n_batch tokens; the number of tokens.
  StatusOr<int64_t> replay();
  // Runs `tokens` through steps ending in top_k(logits, k) when k > 0 (and
  // then sample with `sampling`); reads the last step's result into the
  // returned vector, or with all_logits every step's logits, one after the other.
  StatusOr<std::vector<float>> run(std::span<const int32_t> tokens, int64_t k, bool all_logits = false,
                                   const DeviceSampling* sampling = nullptr);
  bool device_computes(const Tensor& node) const;
  std::unique_ptr<BuiltStep> built_;
};

}  // namespace tensorpc
