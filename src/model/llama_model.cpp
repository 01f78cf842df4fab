// Reading a llama GGUF file into hyper-parameters, weight descriptors and a
// tokenizer (see llama_model.h).
#include "model/llama_model.h"

#include "model/gguf_tensors.h"

namespace tensorpc {
namespace {

// A key that must be there, as int64.
StatusOr<int64_t> required(const GgufFile& f, const char* key) {
  auto v = f.get_u64(key);
  if (!v.ok()) return v.status().with_context("llama model: key " + std::string(key));
  return static_cast<int64_t>(v.value());
}

}  // namespace

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::open(const std::string& path, ModelOpenOptions options) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return file.status();  // it names the path already
  auto model = from_file(std::move(file).value(), path);
  if (!model.ok()) return model.status().with_context(path);
  const std::string dir = options.digest_dir ? *options.digest_dir : WeightDigests::default_dir();
  model.value()->digest_dir_ = dir == "off" ? std::string() : dir;
  return model;
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::open_memory(std::span<const uint8_t> bytes, std::string name) {
  auto file = GgufFile::open_memory(bytes);
  if (!file.ok()) return file.status().with_context(name);
  return from_file(std::move(file).value(), std::move(name));
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::from_file(std::unique_ptr<GgufFile> file, std::string name) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->file_ = std::move(file);
  m->name_ = std::move(name);
  auto arch = m->file_->get_string("general.architecture");
  if (!arch.ok()) return arch.status().with_context("llama model");
  if (arch.value() != "llama") {
    return unsupported("llama model: general.architecture is '" + arch.value() + "', only 'llama' is supported");
  }
  TENSORPC_RETURN_IF_ERROR(m->read_hparams());
  TENSORPC_RETURN_IF_ERROR(m->read_tokenizer());
  TENSORPC_RETURN_IF_ERROR(m->read_weights());
  return m;
}

Status LlamaModel::read_hparams() {
  const GgufFile& f = *file_;
  auto embd = required(f, "llama.embedding_length");
  auto layers = required(f, "llama.block_count");
  auto ff = required(f, "llama.feed_forward_length");
  auto heads = required(f, "llama.attention.head_count");
  for (auto* v : {&embd, &layers, &ff, &heads}) {
    if (!v->ok()) return v->status();
  }
  hp_.n_embd = embd.value();
  hp_.n_layer = layers.value();
  hp_.n_ff = ff.value();
  hp_.n_head = heads.value();
  auto heads_kv = f.get_u64("llama.attention.head_count_kv", static_cast<uint64_t>(hp_.n_head));
  auto ctx = f.get_u64("llama.context_length", 2048);
  auto rot = f.get_u64("llama.rope.dimension_count", static_cast<uint64_t>(hp_.head_dim()));
  auto base = f.get_f32("llama.rope.freq_base", 10000.0f);
  auto eps = f.get_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  if (!heads_kv.ok()) return heads_kv.status();
  if (!ctx.ok()) return ctx.status();
  if (!rot.ok()) return rot.status();
  if (!base.ok()) return base.status();
  if (!eps.ok()) return eps.status();
  hp_.n_head_kv = static_cast<int64_t>(heads_kv.value());
  hp_.n_ctx_train = static_cast<int64_t>(ctx.value());
  hp_.n_rot = static_cast<int64_t>(rot.value());
  hp_.rope_freq_base = base.value();
  hp_.norm_eps = eps.value();
  const GgufTensorInfo* embd_info = f.tensor("token_embd.weight");
  if (embd_info == nullptr) return not_found("llama model: tensor token_embd.weight is missing");
  hp_.n_vocab = embd_info->ne[1];
  TENSORPC_RETURN_IF_ERROR(hp_.validate());
  // Nine tensors a layer: a count the file cannot hold is refused before
  // anything is sized by it.
  constexpr uint64_t kTensorsPerLayer = 9;
  if (static_cast<uint64_t>(hp_.n_layer) > f.tensors().size() / kTensorsPerLayer) {
    return invalid_argument("llama model: llama.block_count is " + std::to_string(hp_.n_layer) + ", but the file has " +
                            std::to_string(f.tensors().size()) + " tensors, fewer than " +
                            std::to_string(kTensorsPerLayer) + " per layer");
  }
  return Status();
}

Status LlamaModel::read_weights() {
  const auto load = [&](const std::string& name, Tensor** out, bool optional = false) -> Status {
    const GgufTensorInfo* info = file_->tensor(name);
    if (info == nullptr) {
      if (optional) return Status();
      return not_found("llama model: tensor " + name + " is missing");
    }
    auto t = new_gguf_tensor(ctx_, *info);
    if (!t.ok()) return t.status();
    *out = t.value();
    infos_.emplace_back(*out, info);
    return Status();
  };
  TENSORPC_RETURN_IF_ERROR(load("token_embd.weight", &weights_.tok_embd));
  weights_.layers.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t i = 0; i < hp_.n_layer; ++i) {
    LlamaLayerWeights& L = weights_.layers[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_norm.weight", &L.attn_norm));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_q.weight", &L.wq));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_k.weight", &L.wk));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_v.weight", &L.wv));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_output.weight", &L.wo));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_norm.weight", &L.ffn_norm));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_gate.weight", &L.ffn_gate));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_up.weight", &L.ffn_up));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_down.weight", &L.ffn_down));
  }
  TENSORPC_RETURN_IF_ERROR(load("output_norm.weight", &weights_.output_norm));
  TENSORPC_RETURN_IF_ERROR(load("output.weight", &weights_.output, /*optional=*/true));
  if (weights_.output == nullptr) weights_.output = weights_.tok_embd;  // tied embeddings
  for (Tensor* norm : {weights_.output_norm}) {
    if (norm->type != DType::f32) return unsupported("llama model: " + norm->name + " must be f32");
  }
  for (const LlamaLayerWeights& L : weights_.layers) {
    if (L.attn_norm->type != DType::f32 || L.ffn_norm->type != DType::f32) {
      return unsupported("llama model: norm weights must be f32 (" + L.attn_norm->name + ")");
    }
  }
  return weights_.validate(hp_);
}

Status LlamaModel::read_tokenizer() {
  const GgufFile& f = *file_;
  auto model = f.get_string("tokenizer.ggml.model", "llama");
  if (!model.ok()) return model.status();
  if (model.value() != "llama") {
    return unsupported("llama model: tokenizer.ggml.model is '" + model.value() + "', only 'llama' is supported");
  }
  Vocabulary v;
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status().with_context("llama model: tokenizer");
  v.tokens = std::move(tokens).value();
  if (f.has("tokenizer.ggml.scores")) {
    auto scores = f.get_f32_array("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    v.scores = std::move(scores).value();
  }
  if (f.has("tokenizer.ggml.token_type")) {
    auto types = f.get_i32_array("tokenizer.ggml.token_type");
    if (!types.ok()) return types.status();
    v.types = std::move(types).value();
  }
  auto bos = f.get_i32("tokenizer.ggml.bos_token_id", 1);
  auto eos = f.get_i32("tokenizer.ggml.eos_token_id", 2);
  auto unk = f.get_i32("tokenizer.ggml.unknown_token_id", 0);
  auto add_bos = f.get_bool("tokenizer.ggml.add_bos_token", true);
  auto add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false);
  auto prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
  for (const Status& s :
       {bos.status(), eos.status(), unk.status(), add_bos.status(), add_eos.status(), prefix.status()}) {
    TENSORPC_RETURN_IF_ERROR(s);
  }
  v.bos = bos.value();
  v.eos = eos.value();
  v.unk = unk.value();
  v.add_bos = add_bos.value();
  v.add_eos = add_eos.value();
  v.add_space_prefix = prefix.value();
  auto tok = Tokenizer::create(std::move(v));
  if (!tok.ok()) return tok.status().with_context("llama model: tokenizer");
  tokenizer_ = std::make_unique<Tokenizer>(std::move(tok).value());
  return Status();
}

WeightDigests& LlamaModel::digests() const {
  if (!digests_) {
    const FileIdentity* identity = file_->identity();
    digests_ = std::make_unique<WeightDigests>(identity != nullptr ? WeightDigests::open(digest_dir_, *identity)
                                                                   : WeightDigests());
  }
  return *digests_;
}

const GgufTensorInfo* LlamaModel::info_of(const Tensor* weight) const {
  for (const auto& [t, info] : infos_) {
    if (t == weight) return info;
  }
  return nullptr;
}

uint64_t LlamaModel::layer_bytes(int64_t layer) const {
  const LlamaLayerWeights& L = weights_.layers[static_cast<size_t>(layer)];
  uint64_t sum = 0;
  for (const Tensor* t : {L.attn_norm, L.wq, L.wk, L.wv, L.wo, L.ffn_norm, L.ffn_gate, L.ffn_up, L.ffn_down}) {
    sum += t->nbytes();
  }
  return sum;
}

uint64_t LlamaModel::embedding_bytes() const { return weights_.tok_embd->nbytes(); }

uint64_t LlamaModel::output_bytes() const {
  return weights_.output_norm->nbytes() + (weights_.output != weights_.tok_embd ? weights_.output->nbytes() : 0);
}

uint64_t LlamaModel::parameter_count() const {
  uint64_t n = 0;
  for (const auto& [t, info] : infos_) n += static_cast<uint64_t>(t->nelements());
  return n;
}

}  // namespace tensorpc
