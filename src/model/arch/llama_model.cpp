// Reading a GGUF file of any architecture tensorpc runs into
// hyper-parameters, weight descriptors and a tokenizer (see llama_model.h).
#include "model/arch/llama_model.h"

#include <unordered_set>

#include "model/arch/arch_hparams.h"
#include "model/gguf/gguf_tensors.h"
#include "model/text/tokenizer_gguf.h"

namespace tensorpc {

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::open(const std::string& path, ModelOpenOptions options) {
  TENSORPC_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));  // it names the path already
  auto model = from_file(std::move(file), path);
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
  m->arch_ = find_architecture(arch.value());
  if (m->arch_ == nullptr) {
    return unsupported("model: general.architecture is '" + arch.value() + "'; tensorpc runs " + architecture_names());
  }
  TENSORPC_RETURN_IF_ERROR(m->read_hparams());
  TENSORPC_RETURN_IF_ERROR(m->read_tokenizer());
  TENSORPC_RETURN_IF_ERROR(m->read_weights());
  return m;
}

Status LlamaModel::read_hparams() {
  const GgufFile& f = *file_;
  const std::string arch(arch_->name);
  TENSORPC_RETURN_IF_ERROR(read_arch_hparams(f, *arch_, hp_));
  const GgufTensorInfo* embd_info = f.tensor("token_embd.weight");
  if (embd_info == nullptr) return not_found(arch + " model: tensor token_embd.weight is missing");
  hp_.n_vocab = embd_info->ne[1];
  TENSORPC_RETURN_IF_ERROR(hp_.validate());
  // A layer count the file's tensors cannot hold is refused before anything
  // is sized by it.
  const uint64_t kTensorsPerLayer = static_cast<uint64_t>(tensors_per_layer(*arch_));
  if (static_cast<uint64_t>(hp_.n_layer) > f.tensors().size() / kTensorsPerLayer) {
    return invalid_argument(arch + " model: " + arch + ".block_count is " + std::to_string(hp_.n_layer) +
                            ", but the file has " + std::to_string(f.tensors().size()) + " tensors, fewer than " +
                            std::to_string(kTensorsPerLayer) + " per layer");
  }
  return Status();
}

Status LlamaModel::read_weights() {
  const ArchDescription& a = *arch_;
  const std::string arch(a.name);
  const bool moe = hp_.has_experts();
  // Loads tensor `name` into *out when `wanted`; a wanted tensor that is
  // missing is an error unless optional.
  const auto load = [&](const std::string& name, Tensor** out, bool wanted = true, bool optional = false) -> Status {
    if (!wanted) return Status();
    const GgufTensorInfo* info = file_->tensor(name);
    if (info == nullptr) {
      if (optional) return Status();
      return not_found(arch + " model: tensor " + name + " is missing");
    }
    TENSORPC_ASSIGN_OR_RETURN(*out, new_gguf_tensor(ctx_, *info));
    infos_.emplace_back(*out, info);
    return Status();
  };
  TENSORPC_RETURN_IF_ERROR(load("token_embd.weight", &weights_.tok_embd));
  weights_.layers.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t i = 0; i < hp_.n_layer; ++i) {
    LlamaLayerWeights& L = weights_.layers[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_norm.weight", &L.attn_norm));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_qkv.weight", &L.wqkv, a.fused_qkv));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_q.weight", &L.wq, !a.fused_qkv));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_k.weight", &L.wk, !a.fused_qkv));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_v.weight", &L.wv, !a.fused_qkv));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_q.bias", &L.bq, a.qkv_bias));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_k.bias", &L.bk, a.qkv_bias));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_v.bias", &L.bv, a.qkv_bias));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_q_norm.weight", &L.q_norm, a.qk_norm));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_k_norm.weight", &L.k_norm, a.qk_norm));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_output.weight", &L.wo));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_output.bias", &L.bo, a.attn_output_bias));
    TENSORPC_RETURN_IF_ERROR(load(p + "attn_sinks.weight", &L.sinks, a.attn_sinks));
    TENSORPC_RETURN_IF_ERROR(load(p + "post_attention_norm.weight", &L.post_attn_norm, a.post_norms));
    TENSORPC_RETURN_IF_ERROR(load(p + std::string(a.ffn_norm) + ".weight", &L.ffn_norm));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_gate.weight", &L.ffn_gate, !moe && !a.fused_gate_up));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_up.weight", &L.ffn_up, !moe));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_down.weight", &L.ffn_down, !moe));
    TENSORPC_RETURN_IF_ERROR(load(p + "post_ffw_norm.weight", &L.post_ffn_norm, a.post_norms));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_gate_inp.weight", &L.gate_inp, moe));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_gate_exps.weight", &L.gate_exps, moe));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_up_exps.weight", &L.up_exps, moe));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_down_exps.weight", &L.down_exps, moe));
    const bool biases = moe && a.expert_biases;
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_gate_inp.bias", &L.gate_inp_b, biases));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_gate_exps.bias", &L.gate_exps_b, biases));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_up_exps.bias", &L.up_exps_b, biases));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_down_exps.bias", &L.down_exps_b, biases));
    const bool shared = moe && a.shared_expert;
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_gate_inp_shexp.weight", &L.gate_inp_shexp, shared));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_gate_shexp.weight", &L.gate_shexp, shared));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_up_shexp.weight", &L.up_shexp, shared));
    TENSORPC_RETURN_IF_ERROR(load(p + "ffn_down_shexp.weight", &L.down_shexp, shared));
  }
  TENSORPC_RETURN_IF_ERROR(load("output_norm.weight", &weights_.output_norm));
  TENSORPC_RETURN_IF_ERROR(load("output.weight", &weights_.output, true, /*optional=*/true));
  if (weights_.output == nullptr) weights_.output = weights_.tok_embd;  // tied embeddings
  TENSORPC_RETURN_IF_ERROR(load("rope_freqs.weight", &weights_.rope_freqs, true, /*optional=*/true));

  // Every tensor of the file is one the forward pass uses: one it would
  // leave out (a bias of another architecture, long-context RoPE factors)
  // means the file is not the model tensorpc would run.
  std::unordered_set<const GgufTensorInfo*> used;
  for (const auto& [t, info] : infos_) used.insert(info);
  for (const GgufTensorInfo& info : file_->tensors()) {
    if (used.contains(&info)) continue;
    if (info.name.rfind("rope_factors_", 0) == 0) {
      return unsupported(arch + " model: tensor " + info.name +
                         " holds long-context RoPE factors (longrope), which tensorpc does not implement");
    }
    return unsupported(arch + " model: tensor " + info.name + " is not part of the " + arch +
                       " forward pass tensorpc runs");
  }

  // Norms, biases and RoPE factors are added or multiplied element-wise: f32.
  for (const auto& [t, info] : infos_) {
    const bool small = t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1;
    if (small && t->type != DType::f32) {
      return unsupported(arch + " model: " + t->name + " must be f32, not " + std::string(name_of(t->type)));
    }
  }
  return weights_.validate(hp_);
}

Status LlamaModel::read_tokenizer() {
  auto tok = tokenizer_from_gguf(*file_);
  if (!tok.ok()) return tok.status().with_context("llama model");
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
  uint64_t sum = 0;
  for (const Tensor* t : weights_.layers[static_cast<size_t>(layer)].tensors()) sum += t->nbytes();
  return sum;
}

uint64_t LlamaModel::embedding_bytes() const {
  return weights_.tok_embd->nbytes() + (weights_.rope_freqs != nullptr ? weights_.rope_freqs->nbytes() : 0);
}

uint64_t LlamaModel::output_bytes() const {
  return weights_.output_norm->nbytes() + (weights_.output != weights_.tok_embd ? weights_.output->nbytes() : 0);
}

uint64_t LlamaModel::parameter_count() const {
  uint64_t n = 0;
  for (const auto& [t, info] : infos_) n += static_cast<uint64_t>(t->nelements());
  return n;
}

}  // namespace tensorpc
