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
// Ownership: the generator owns its scheduler; the model, the placement and
// their devices must outlive it. One thread uses a generator at a time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/placement.h"
#include "tensorpc/scheduler.h"

namespace tensorpc {

struct GeneratorOptions {
  int64_t n_batch = 64;        // prompt tokens per step at most
  int64_t kv_granularity = 32;  // decode graphs change only when the KV window grows by this
};

class Generator {
 public:
  Generator(const LlamaModel& model, ModelPlacement& placement, GeneratorOptions options = {});

  // Feeds `tokens` at the current position; returns the logits after the
  // last of them ([n_vocab]). Fails when the sequence would pass n_ctx.
  StatusOr<std::vector<float>> eval(std::span<const int32_t> tokens);

  // Back to position 0 with an empty cache.
  Status reset();

  int64_t position() const { return position_; }
  const Scheduler& scheduler() const { return scheduler_; }

 private:
  const LlamaModel& model_;
  ModelPlacement& placement_;
  GeneratorOptions options_;
  Scheduler scheduler_;
  int64_t position_ = 0;

  // The last step's graph, kept for the next step of the same shape.
  struct BuiltStep {
    Context ctx;
    LlamaStep step;
    Graph graph;
  };
  std::unique_ptr<BuiltStep> built_;
};

}  // namespace tensorpc
