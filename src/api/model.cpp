// tensorpc::Model (include/tensorpc/model.h): a thin face over the model
// layer — place_model() opens and places, generate_text() generates — and
// the one path every `tensorpc` command opens a model by (ModelInternals,
// src/api/model_internals.h).
#include "tensorpc/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>

#include "api/cluster_recovery.h"
#include "api/model_internals.h"
#include "model/runtime/draft_model.h"
#include "model/runtime/generate.h"
#include "model/runtime/generator.h"
#include "model/runtime/grammar_vocabulary.h"
#include "model/runtime/json_schema.h"

namespace tensorpc {
namespace {

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

// What the model is, before and after it is placed.
ModelInfo describe(const LlamaModel& m, int64_t context_size) {
  const LlamaHparams& hp = m.hparams();
  ModelInfo info;
  info.architecture = std::string(m.arch().name);
  info.layers = hp.n_layer;
  info.embedding_size = hp.n_embd;
  info.heads = hp.n_head;
  info.kv_heads = hp.n_head_kv;
  info.vocabulary_size = hp.n_vocab;
  info.experts = hp.n_expert;
  info.experts_used = hp.n_expert_used;
  info.context_size = context_size;
  info.trained_context = hp.n_ctx_train;
  info.parameters = m.parameter_count();
  return info;
}

uint64_t bytes_sent_to(const std::vector<std::string>& endpoints) {
  uint64_t sum = 0;
  for (const std::string& e : endpoints) sum += connection_stats(e).bytes_sent;
  return sum;
}

// The upload's cost on the network: the weight bytes remote devices took,
// counted from the progress calls, and the bytes sent to their servers.
struct UploadCount {
  uint64_t server_weight_bytes = 0;
  uint64_t server_bytes_sent = 0;
};

// The placement options of `options` on `devices`: split, overrides, context.
PlacementOptions placement_options(const ModelOptions& options, const DeviceSet& devices) {
  PlacementOptions p;
  p.ratios = options.split;
  // The helper CPU last, with no layers; the others by the split or their free memory.
  p.last_takes_no_layers = devices.helper_cpu();
  if (devices.helper_cpu() && !p.ratios.empty()) p.ratios.push_back(0);
  for (const TensorOverride& o : options.tensor_overrides) p.overrides.push_back({o.pattern, o.device});
  p.n_ctx = options.context_size;
  return p;
}

// ModelPlacement::create with the options' split, context and progress,
// counting what the upload sent to the servers.
StatusOr<std::unique_ptr<ModelPlacement>> place_counting(const LlamaModel& model, const DeviceSet& devices,
                                                         const ModelOptions& options, UploadCount& count) {
  std::map<std::string, bool> is_remote;
  for (Device* d : devices.devices()) is_remote[d->name()] = d->kind() == DeviceKind::remote;
  uint64_t last_done = 0;
  const uint64_t sent_before = bytes_sent_to(devices.endpoints());
  PlacementOptions p = placement_options(options, devices);
  p.progress = [&](uint64_t done, uint64_t total, const std::string& device) {
    if (is_remote[device]) count.server_weight_bytes += done - last_done;
    last_done = done;
    if (options.on_progress) options.on_progress(done, total, device);
  };
  auto placement = ModelPlacement::create(model, devices.devices(), std::move(p));
  // Bytes sent include frame headers and the hashes the weights cache's protocol sends first.
  count.server_bytes_sent = bytes_sent_to(devices.endpoints()) - sent_before;
  return placement;
}

}  // namespace

Status SamplingOptions::validate() const {
  if (!grammar.empty()) TENSORPC_RETURN_IF_ERROR(Grammar::parse(grammar).status());
  return sampler_options(*this).validate();
}

StatusOr<std::string> json_schema_grammar(std::string_view schema) {
  if (schema.empty()) return json_gbnf(/*object_root=*/true);
  return json_schema_to_gbnf(schema);
}

SamplerOptions sampler_options(const SamplingOptions& s) {
  SamplerOptions o;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.min_p = s.min_p;
  o.repeat_penalty = s.repeat_penalty;
  o.repeat_last_n = s.repeat_last_n;
  o.seed = s.seed;
  o.presence_penalty = s.presence_penalty;
  o.frequency_penalty = s.frequency_penalty;
  o.logit_bias = s.logit_bias;
  return o;
}

// Members go in reverse order of destruction: the generator (whose scheduler
// holds buffers on the devices) before the placed model.
struct Model::State {
  PlacedModel placed;
  UploadCount upload;
  std::string warning;
  std::chrono::milliseconds reply_timeout{0};  // the servers' (RemoteOptions::reply_timeout)
  std::unique_ptr<ClusterRecovery> recovery;   // with servers, unless recovery is off
  std::unique_ptr<Generator> generator;  // made on first use, and kept: its plans serve the next generation too
  std::shared_ptr<const GrammarVocabulary> vocabulary;  // for grammars, made on first use
  std::atomic<bool> cancel{false};
  std::unique_ptr<Model> draft;  // ModelOptions::draft_path's, opened and placed; null without one
  std::string draft_text;        // ModelInfo::draft
};

// The standby servers: none of the model's own, each listing its devices.
Status check_standby(const ModelOptions& options) {
  const RecoveryOptions& r = options.recovery;
  if (!std::isfinite(r.reconnect_wait_s) || r.reconnect_wait_s < 0 || r.reconnect_wait_s > 1e6) {
    return invalid_argument("the reconnect wait must be from 0 to 1000000 seconds");
  }
  for (const std::string& s : r.standby) {
    if (std::find(options.servers.begin(), options.servers.end(), s) != options.servers.end()) {
      return invalid_argument("standby server " + s + " is also one of the model's servers");
    }
    auto listed = connect_devices(s, options.remote);
    if (!listed.ok()) return listed.status().with_context("standby server " + s);
    if (listed.value().empty()) return not_found("standby server " + s + " has no devices");
  }
  return Status();
}

// Where ModelOptions::draft_device puts a draft model: wholly on that one
// device, with the main model's context and servers' key.
StatusOr<ModelOptions> draft_options(const ModelOptions& main, int64_t context_size) {
  ModelOptions d;
  d.path = main.draft_path;
  d.remote = main.remote;
  d.threads = main.threads;
  d.context_size = context_size;
  // No recovery for a draft: serve goes on without its drafts while they fail; generate() reports the error.
  d.recovery.enabled = false;
  const std::string& device = main.draft_device;
  const size_t slash = device.find('/');
  if (slash == std::string::npos) {  // a local device
    d.local_devices = {device};
    return d;
  }
  d.servers = {device.substr(0, slash)};
  d.use_local_cpu = false;
  TENSORPC_ASSIGN_OR_RETURN(const auto devices, connect_devices(d.servers[0], main.remote));
  std::string names;
  for (const auto& dev : devices) {
    d.split.push_back(dev->name() == device ? 1.0 : 0.0);
    names += (names.empty() ? "" : ", ") + dev->name();
  }
  if (std::find(d.split.begin(), d.split.end(), 1.0) == d.split.end()) {
    return not_found("draft device " + device + ": the server has " + (names.empty() ? "no devices" : names));
  }
  return d;
}

// ModelOptions::draft_path opened and placed for `main`, placed with
// `context_size` positions.
struct OpenedDraft {
  std::unique_ptr<Model> model;
  std::string text;  // ModelInfo::draft
};
StatusOr<OpenedDraft> open_draft(const LlamaModel& main, int64_t context_size, const ModelOptions& options) {
  TENSORPC_ASSIGN_OR_RETURN(auto draft, LlamaModel::open(options.draft_path));
  if (const Status s = check_draft_vocabulary(main.tokenizer(), draft->tokenizer()); !s.ok()) {
    return s.with_context(options.draft_path);
  }
  TENSORPC_ASSIGN_OR_RETURN(const ModelOptions d, draft_options(options, context_size));
  auto opened = ModelInternals::open(std::move(draft), d);
  if (!opened.ok()) return opened.status().with_context(options.draft_path);
  OpenedDraft out{std::make_unique<Model>(std::move(opened).value()), ""};
  const ModelInfo info = out.model->info();
  out.text = options.draft_path + ": " + std::to_string(info.layers) + " layers on " + options.draft_device + ", " +
             std::to_string(info.parameters / 1000) + " K parameters";
  return out;
}

Model::Model(std::unique_ptr<State> state) : state_(std::move(state)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

StatusOr<Model> Model::open(const ModelOptions& options) {
  TENSORPC_ASSIGN_OR_RETURN(auto model, LlamaModel::open(options.path));  // its message names the file
  auto opened = ModelInternals::open(std::move(model), options);
  if (!opened.ok()) return opened.status().with_context(options.path);
  return opened;
}

StatusOr<Model> ModelInternals::open(std::unique_ptr<LlamaModel> model, const ModelOptions& options) {
  if (options.on_open) {
    TENSORPC_RETURN_IF_ERROR(
        options.on_open(describe(*model, context_positions(model->hparams(), options.context_size))));
  }
  PlaceOptions where;
  where.endpoints = options.servers;
  where.remote = options.remote;
  where.split = options.split;
  where.threads = options.threads;
  where.n_ctx = options.context_size;
  where.use_local = options.use_local_cpu;
  where.local_devices = options.local_devices;
  TENSORPC_RETURN_IF_ERROR(check_standby(options));
  auto state = std::make_unique<Model::State>();
  TENSORPC_ASSIGN_OR_RETURN(state->placed,
                            place_model(std::move(model), where, [&](const LlamaModel& m, const DeviceSet& devices) {
                              return place_counting(m, devices, options, state->upload);
                            }));
  state->reply_timeout = options.remote.reply_timeout;
  if (options.recovery.enabled && !options.servers.empty()) {
    state->recovery =
        std::make_unique<ClusterRecovery>(state->placed, options.recovery, options.remote,
                                          placement_options(options, state->placed.devices), options.split);
  }
  if (const Status& s = state->placed.model->digests().save_failure(); !s.ok()) {
    state->warning = s.to_string() + " (the next load hashes the weights again)";
  }
  if (!options.draft_path.empty()) {
    TENSORPC_ASSIGN_OR_RETURN(OpenedDraft draft,
                              open_draft(*state->placed.model, state->placed.placement->n_ctx(), options));
    state->draft = std::move(draft.model);
    state->draft_text = std::move(draft.text);
  }
  return Model(std::move(state));
}

PlacedModel& ModelInternals::placed(Model& model) { return model.state_->placed; }

ClusterRecovery* ModelInternals::recovery(Model& model) { return model.state_->recovery.get(); }

GeneratorOptions ModelInternals::generator_options(Model& model) {
  const Model::State& s = *model.state_;
  GeneratorOptions g;
  g.recovery = s.recovery.get();
  if (s.reply_timeout.count() > 0) {
    g.scheduler.plan_wait_timeout_ms = static_cast<uint32_t>(std::min<int64_t>(s.reply_timeout.count(), UINT32_MAX));
  }
  return g;
}

Model* ModelInternals::draft(Model& model) { return model.state_->draft.get(); }

Generator& ModelInternals::generator(Model& model) {
  Model::State& s = *model.state_;
  if (s.generator == nullptr) {
    s.generator = std::make_unique<Generator>(*s.placed.model, *s.placed.placement, generator_options(model));
  }
  return *s.generator;
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
  if (state_->draft) g.draft_model = &ModelInternals::generator(*state_->draft);
  if (const Status s = check_speculation(options.lookup, state_->draft != nullptr, options.draft_max); !s.ok()) {
    return s.with_context("generate");
  }
  g.n_predict = options.max_tokens;
  g.stop_at_eos = options.stop_at_end;
  g.special = options.special;
  g.lookup = options.lookup;
  g.draft_max = options.draft_max;
  g.sampler = sampler_options(options.sampling);
  if (!options.sampling.grammar.empty()) {
    auto grammar = Grammar::parse(options.sampling.grammar);
    if (!grammar.ok()) return grammar.status();
    if (!state_->vocabulary) {
      state_->vocabulary = std::make_shared<const GrammarVocabulary>(state_->placed.model->tokenizer());
    }
    g.sampler.grammar = std::move(grammar).value();
    g.sampler.grammar_vocabulary = state_->vocabulary;
  }
  state_->cancel.store(false);
  Generator& gen = ModelInternals::generator(*this);
  TENSORPC_ASSIGN_OR_RETURN(GenerateResult r, generate_text(gen, prompt, g, on_token, &state_->cancel));
  Generation out;
  out.text = std::move(r.text);
  out.tokens = std::move(r.generated);
  out.finish = finish_reason(r.stop);
  out.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  out.prompt_seconds = r.prompt_seconds;
  out.decode_seconds = r.decode_seconds;
  out.decode_steps = r.decode_steps;
  out.drafted_tokens = r.speculation.drafted;
  out.accepted_tokens = r.speculation.accepted;
  out.draft_steps = r.speculation.steps;
  out.decode_bytes_sent = r.decode.bytes_sent;
  out.decode_bytes_received = r.decode.bytes_received;
  out.decode_round_trips = r.decode.round_trips;
  out.schedule = std::move(r.schedule);
  return out;
}

void Model::cancel() { state_->cancel.store(true); }

ModelInfo Model::info() const {
  const PlacedModel& p = state_->placed;
  // With no placement (a recovery failed), the context the model was opened with.
  ModelInfo info = describe(*p.model, state_->generator ? state_->generator->n_ctx() : p.placement->n_ctx());
  for (Device* d : p.devices.devices()) info.devices.push_back(d->name());
  if (p.placement) info.placement = p.placement->table();
  if (state_->recovery) {
    const RecoveryState r = state_->recovery->state();
    info.standby = r.standby;
    info.recoveries = r.recoveries;
  }
  info.server_weight_bytes = state_->upload.server_weight_bytes;
  info.server_bytes_sent = state_->upload.server_bytes_sent;
  info.warning = state_->warning;
  info.draft = state_->draft_text;
  return info;
}

}  // namespace tensorpc
