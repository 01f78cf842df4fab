// ModelInternals: what the library's own commands reach inside a
// tensorpc::Model, so that each of them opens and places a model through the
// one path Model::open takes, then builds on it what the public API does not
// offer: a chat session (`tensorpc chat`, the demo), perplexity, the
// serving engine.
//
// Ownership: the references point into the Model, which must outlive their use.
#pragma once

#include <memory>

#include "api/cluster_recovery.h"
#include "api/placed_model.h"
#include "model/arch/llama_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/sampler.h"
#include "tensorpc/model.h"

namespace tensorpc {

struct ModelInternals {
  // Model::open for a model file the caller has read already (to choose a
  // chat template or a chunk length from it before any upload). Unlike
  // Model::open, errors do not repeat the file's path.
  static StatusOr<Model> open(std::unique_ptr<LlamaModel> model, const ModelOptions& options);
  // The opened model, its devices and its placement.
  static PlacedModel& placed(Model& model);
  // What recovers it from a lost server; null without servers or with
  // RecoveryOptions::enabled false. Generators on its placement pass it in
  // GeneratorOptions::recovery.
  static ClusterRecovery* recovery(Model& model);
  // The options of a generator on the model's placement: its recovery, and
  // plans that wait for a server's hand-over as long as the servers'
  // reply timeout (RemoteOptions::reply_timeout), so a frozen server is lost
  // after that time however the pipeline meets it.
  static GeneratorOptions generator_options(Model& model);
  // The draft model ModelOptions::draft_path opened; null without one.
  static Model* draft(Model& model);
  // The generator Model::generate runs on, made on first use; another one on
  // the same placement (its own options) must not run while this one does.
  static Generator& generator(Model& model);
};

// The sampler's options for the public SamplingOptions.
SamplerOptions sampler_options(const SamplingOptions& sampling);

}  // namespace tensorpc
