// tensorpc::Model (include/tensorpc/model.h): a thin face over the model
// layer — place_model() opens and places, generate_text() generates — so the
// library's users and the `tensorpc` commands run one path.
#include "tensorpc/model.h"

#include <atomic>

#include "api/placed_model.h"
#include "model/runtime/generate.h"
#include "model/runtime/generator.h"

namespace tensorpc {
namespace {

SamplerOptions sampler_options(const SamplingOptions& s) {
  SamplerOptions o;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.min_p = s.min_p;
  o.repeat_penalty = s.repeat_penalty;
  o.repeat_last_n = s.repeat_last_n;
  o.seed = s.seed;
  return o;
}

FinishReason finish_reason(StopReason stop) {
  switch (stop) {
    case StopReason::n_predict: return FinishReason::max_tokens;
    case StopReason::end_of_text: return FinishReason::end_of_text;
    case StopReason::context_full: return FinishReason::context_full;
    case StopReason::stopped: return FinishReason::stopped;
    case StopReason::cancelled: return FinishReason::cancelled;
  }
  return FinishReason::max_tokens;
}

}  // namespace

// Members go in reverse order of destruction: the generator (whose scheduler
// holds buffers on the devices) before the placed model.
struct Model::State {
  PlacedModel placed;
  std::unique_ptr<Generator> generator;  // kept, so its plans serve the next generation too
  std::atomic<bool> cancel{false};
};

Model::Model(std::unique_ptr<State> state) : state_(std::move(state)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

StatusOr<Model> Model::open(const ModelOptions& options) {
  TENSORPC_ASSIGN_OR_RETURN(auto model, LlamaModel::open(options.path));  // its message names the file
  PlaceOptions where;
  where.endpoints = options.servers;
  where.remote = options.remote;
  where.split = options.split;
  where.threads = options.threads;
  where.n_ctx = options.context_size;
  where.use_local = options.use_local_cpu;
  auto placed = place_model(std::move(model), where, [&](const LlamaModel& m, const DeviceSet& devices) {
    PlacementOptions p;
    p.ratios = options.split;
    p.n_ctx = options.context_size;
    p.progress = options.on_progress;
    return ModelPlacement::create(m, devices.devices(), std::move(p));
  });
  if (!placed.ok()) return placed.status().with_context(options.path);
  auto state = std::make_unique<State>();
  state->placed = std::move(placed).value();
  state->generator = std::make_unique<Generator>(*state->placed.model, *state->placed.placement);
  return Model(std::move(state));
}

std::vector<int32_t> Model::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return state_->placed.model->tokenizer().encode(text, add_special, parse_special);
}

StatusOr<std::string> Model::detokenize(std::span<const int32_t> tokens, bool special) const {
  const Tokenizer& tok = state_->placed.model->tokenizer();
  for (int32_t t : tokens) {
    if (t < 0 || t >= tok.n_tokens()) {
      return invalid_argument("detokenize: token " + std::to_string(t) + " is outside the vocabulary of " +
                              std::to_string(tok.n_tokens()) + " tokens");
    }
  }
  return tok.decode(tokens, special);
}

StatusOr<Generation> Model::generate(std::string_view prompt, const GenerationOptions& options,
                                     const TokenCallback& on_token) {
  if (options.max_tokens < 1) return invalid_argument("generate: max_tokens must be at least 1");
  GenerateOptions g;
  g.n_predict = options.max_tokens;
  g.stop_at_eos = options.stop_at_end;
  g.special = options.special;
  g.sampler = sampler_options(options.sampling);
  state_->cancel.store(false);
  TENSORPC_ASSIGN_OR_RETURN(GenerateResult r, generate_text(*state_->generator, prompt, g, on_token, &state_->cancel));
  Generation out;
  out.text = std::move(r.text);
  out.tokens = std::move(r.generated);
  out.finish = finish_reason(r.stop);
  out.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  out.prompt_seconds = r.prompt_seconds;
  out.decode_seconds = r.decode_seconds;
  return out;
}

void Model::cancel() { state_->cancel.store(true); }

ModelInfo Model::info() const {
  const LlamaModel& m = *state_->placed.model;
  const LlamaHparams& hp = m.hparams();
  ModelInfo info;
  info.architecture = std::string(m.arch().name);
  info.layers = hp.n_layer;
  info.embedding_size = hp.n_embd;
  info.vocabulary_size = hp.n_vocab;
  info.context_size = state_->placed.placement->n_ctx();
  info.trained_context = hp.n_ctx_train;
  info.parameters = m.parameter_count();
  for (Device* d : state_->placed.devices.devices()) info.devices.push_back(d->name());
  info.placement = state_->placed.placement->table();
  return info;
}

}  // namespace tensorpc
