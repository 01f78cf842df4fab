// Random models of every architecture (random_model.h). The weights are scaled like an
// initialised network (std 1/sqrt(fan_in)) so activations stay in range and
// greedy decoding does not collapse to one token at once.
#include "lab/random_model.h"

#include <cmath>
#include <filesystem>
#include <random>
#include <span>
#include <vector>

#include "model/arch/arch.h"
#include "model/gguf/gguf_writer.h"

namespace tensorpc::tools {
namespace {

// Bytes of a [ne0, ne1] tensor of `type` with normal(mean, std) values.
std::vector<uint8_t> random_matrix(DType type, int64_t ne0, int64_t ne1, float mean, float std, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> row(static_cast<size_t>(ne0));
  const uint64_t rb = row_bytes(type, ne0);
  std::vector<uint8_t> out(static_cast<size_t>(rb * static_cast<uint64_t>(ne1)));
  for (int64_t r = 0; r < ne1; ++r) {
    for (float& v : row) v = dist(rng);
    traits(type).from_float(row.data(), out.data() + static_cast<uint64_t>(r) * rb, ne0);
  }
  return out;
}

// Every key and tensor of the model into `w`.
Status add_random_model(GgufWriter& w, const RandomModelOptions& o) {
  const ArchDescription* arch = find_architecture(o.arch);
  if (arch == nullptr) {
    return invalid_argument("random model: architecture '" + o.arch + "'; tensorpc runs " + architecture_names());
  }
  if (o.n_vocab < 259) return invalid_argument("random model: n_vocab must be at least 259");
  if (o.n_head <= 0 || o.n_head_kv <= 0 || o.n_head % o.n_head_kv != 0 ||
      (o.n_head_dim == 0 && o.n_embd % o.n_head != 0)) {
    return invalid_argument("random model: heads must divide n_embd and each other");
  }
  const int64_t head_dim = o.n_head_dim > 0 ? o.n_head_dim : o.n_embd / o.n_head;
  const int64_t q_dim = head_dim * o.n_head, kv_dim = head_dim * o.n_head_kv;
  const std::string k = o.arch + ".";  // every hyper-parameter under the architecture's prefix
  const auto u32 = [&](const std::string& key, int64_t v) { return w.add_u32(k + key, static_cast<uint32_t>(v)); };
  TENSORPC_RETURN_IF_ERROR(w.add_string("general.architecture", o.arch));
  TENSORPC_RETURN_IF_ERROR(w.add_string("general.name", "random-" + o.arch));
  TENSORPC_RETURN_IF_ERROR(u32("context_length", o.n_ctx));
  TENSORPC_RETURN_IF_ERROR(u32("embedding_length", o.n_embd));
  TENSORPC_RETURN_IF_ERROR(u32("block_count", o.n_layer));
  TENSORPC_RETURN_IF_ERROR(u32("feed_forward_length", o.n_ff));
  TENSORPC_RETURN_IF_ERROR(u32("attention.head_count", o.n_head));
  TENSORPC_RETURN_IF_ERROR(u32("attention.head_count_kv", o.n_head_kv));
  if (o.n_head_dim > 0) {
    TENSORPC_RETURN_IF_ERROR(u32("attention.key_length", o.n_head_dim));
    TENSORPC_RETURN_IF_ERROR(u32("attention.value_length", o.n_head_dim));
  }
  TENSORPC_RETURN_IF_ERROR(u32("rope.dimension_count", head_dim));
  if (o.rope_freq_base != 10000.0f) TENSORPC_RETURN_IF_ERROR(w.add_f32(k + "rope.freq_base", o.rope_freq_base));
  TENSORPC_RETURN_IF_ERROR(w.add_f32(k + "attention.layer_norm_rms_epsilon", 1e-5f));
  if (!o.rope_scaling.empty()) {
    TENSORPC_RETURN_IF_ERROR(w.add_string(k + "rope.scaling.type", o.rope_scaling));
    TENSORPC_RETURN_IF_ERROR(w.add_f32(k + "rope.scaling.factor", o.rope_scaling_factor));
    if (o.rope_scaling == "yarn") {
      TENSORPC_RETURN_IF_ERROR(
          u32("rope.scaling.original_context_length", o.rope_original_context > 0 ? o.rope_original_context : o.n_ctx));
    }
  }
  if (o.sliding_window > 0) TENSORPC_RETURN_IF_ERROR(u32("attention.sliding_window", o.sliding_window));
  if (o.pooling_type >= 0) TENSORPC_RETURN_IF_ERROR(u32("pooling_type", o.pooling_type));
  if (o.attn_softcap > 0) TENSORPC_RETURN_IF_ERROR(w.add_f32(k + "attn_logit_softcapping", o.attn_softcap));
  if (o.final_softcap > 0) TENSORPC_RETURN_IF_ERROR(w.add_f32(k + "final_logit_softcapping", o.final_softcap));
  const bool moe = o.n_expert > 0;
  // Mixtral (llama) files give no expert width: the experts are feed_forward_length wide.
  const int64_t n_ff_exp = o.n_ff_exp > 0 && o.arch != "llama" ? o.n_ff_exp : o.n_ff;
  const int64_t n_ff_shexp = o.n_ff_shexp > 0 ? o.n_ff_shexp : o.n_ff;
  if (moe) {
    TENSORPC_RETURN_IF_ERROR(u32("expert_count", o.n_expert));
    TENSORPC_RETURN_IF_ERROR(u32("expert_used_count", o.n_expert_used));
    if (o.arch != "llama") TENSORPC_RETURN_IF_ERROR(u32("expert_feed_forward_length", n_ff_exp));
    if (arch->shared_expert) TENSORPC_RETURN_IF_ERROR(u32("expert_shared_feed_forward_length", n_ff_shexp));
  }

  // Vocabulary: specials, the byte fallback, then pieces that are unique
  // and mergeable ("▁" and a few letters) so prompts tokenize to several ids.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char s[8];
    std::snprintf(s, sizeof s, "<0x%02X>", b);
    tokens.push_back(s);
    types.push_back(6);
  }
  const std::string space = "\xe2\x96\x81";  // ▁
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (int64_t i = 0; static_cast<int64_t>(tokens.size()) < o.n_vocab; ++i) {
    std::string piece;
    if (i == 0) {
      piece = space;
    } else if (i <= 26) {
      piece = std::string(1, letters[static_cast<size_t>(i - 1)]);
    } else if (i <= 52) {
      piece = space + letters[static_cast<size_t>(i - 27)];
    } else {
      piece = space + "w" + std::to_string(i);  // filler: unique, never matched by ordinary text
    }
    tokens.push_back(piece);
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  TENSORPC_RETURN_IF_ERROR(w.add_string("tokenizer.ggml.model", "llama"));
  TENSORPC_RETURN_IF_ERROR(w.add_string_array("tokenizer.ggml.tokens", tokens));
  TENSORPC_RETURN_IF_ERROR(w.add_f32_array("tokenizer.ggml.scores", scores));
  TENSORPC_RETURN_IF_ERROR(w.add_i32_array("tokenizer.ggml.token_type", types));

  std::mt19937_64 rng(o.seed);
  auto matrix = [&](const std::string& name, int64_t ne0, int64_t ne1) {
    const float std = 1.0f / std::sqrt(static_cast<float>(ne0));
    const int64_t ne[2] = {ne0, ne1};
    return w.add_tensor(name, o.type, ne, random_matrix(o.type, ne0, ne1, 0.0f, std, rng));
  };
  // Norms, biases and RoPE factors: f32 vectors of normal(mean, std) values.
  auto vector = [&](const std::string& name, int64_t n, float mean, float std) {
    const int64_t ne[1] = {n};
    return w.add_tensor(name, DType::f32, ne, random_matrix(DType::f32, n, 1, mean, std, rng));
  };
  auto norm = [&](const std::string& name, int64_t n) { return vector(name, n, 1.0f, 0.1f); };
  // E experts' matrices [ne0, ne1] one after another: [ne0, ne1, E].
  const DType expert_type = o.expert_type.value_or(o.type);
  auto experts = [&](const std::string& name, int64_t ne0, int64_t ne1) {
    const float std = 1.0f / std::sqrt(static_cast<float>(ne0));
    const int64_t ne[3] = {ne0, ne1, o.n_expert};
    return w.add_tensor(name, expert_type, ne, random_matrix(expert_type, ne0, ne1 * o.n_expert, 0.0f, std, rng));
  };
  // Per-expert biases [n, E] of normal(0, std) values.
  auto biases = [&](const std::string& name, int64_t n, float std) {
    const int64_t ne[2] = {n, o.n_expert};
    return w.add_tensor(name, DType::f32, ne, random_matrix(DType::f32, n, o.n_expert, 0.0f, std, rng));
  };
  // The embedding is read one row per token, so unit-scale rows.
  {
    const int64_t ne[2] = {o.n_embd, o.n_vocab};
    TENSORPC_RETURN_IF_ERROR(w.add_tensor("token_embd.weight", o.type, ne,
                                          random_matrix(o.type, o.n_embd, o.n_vocab, 0.0f, 1.0f, rng)));
  }
  for (int64_t l = 0; l < o.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    TENSORPC_RETURN_IF_ERROR(norm(p + "attn_norm.weight", o.n_embd));
    if (arch->fused_qkv) {
      TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_qkv.weight", o.n_embd, q_dim + 2 * kv_dim));
    } else {
      TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_q.weight", o.n_embd, q_dim));
      TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_k.weight", o.n_embd, kv_dim));
      TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_v.weight", o.n_embd, kv_dim));
    }
    if (arch->qkv_bias) {
      TENSORPC_RETURN_IF_ERROR(vector(p + "attn_q.bias", q_dim, 0.0f, 0.5f));
      TENSORPC_RETURN_IF_ERROR(vector(p + "attn_k.bias", kv_dim, 0.0f, 0.5f));
      TENSORPC_RETURN_IF_ERROR(vector(p + "attn_v.bias", kv_dim, 0.0f, 0.5f));
    }
    if (arch->qk_norm) {
      TENSORPC_RETURN_IF_ERROR(norm(p + "attn_q_norm.weight", head_dim));
      TENSORPC_RETURN_IF_ERROR(norm(p + "attn_k_norm.weight", head_dim));
    }
    TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_output.weight", q_dim, o.n_embd));
    if (arch->attn_output_bias) TENSORPC_RETURN_IF_ERROR(vector(p + "attn_output.bias", o.n_embd, 0.0f, 0.5f));
    if (arch->attn_sinks) TENSORPC_RETURN_IF_ERROR(vector(p + "attn_sinks.weight", o.n_head, 0.0f, 1.0f));
    if (arch->post_norms) TENSORPC_RETURN_IF_ERROR(norm(p + "post_attention_norm.weight", o.n_embd));
    TENSORPC_RETURN_IF_ERROR(norm(p + std::string(arch->ffn_norm) + ".weight", o.n_embd));
    if (moe) {
      // The router's logits spread wide enough that the choice is clear.
      const int64_t ne[2] = {o.n_embd, o.n_expert};
      TENSORPC_RETURN_IF_ERROR(w.add_tensor(p + "ffn_gate_inp.weight", o.type, ne,
                                            random_matrix(o.type, o.n_embd, o.n_expert, 0.0f, 0.5f, rng)));
      TENSORPC_RETURN_IF_ERROR(experts(p + "ffn_gate_exps.weight", o.n_embd, n_ff_exp));
      TENSORPC_RETURN_IF_ERROR(experts(p + "ffn_up_exps.weight", o.n_embd, n_ff_exp));
      TENSORPC_RETURN_IF_ERROR(experts(p + "ffn_down_exps.weight", n_ff_exp, o.n_embd));
      if (arch->expert_biases) {
        TENSORPC_RETURN_IF_ERROR(vector(p + "ffn_gate_inp.bias", o.n_expert, 0.0f, 0.5f));
        // wide enough that some gate and up values pass gpt-oss's clamp at ±7
        TENSORPC_RETURN_IF_ERROR(biases(p + "ffn_gate_exps.bias", n_ff_exp, 3.0f));
        TENSORPC_RETURN_IF_ERROR(biases(p + "ffn_up_exps.bias", n_ff_exp, 3.0f));
        TENSORPC_RETURN_IF_ERROR(biases(p + "ffn_down_exps.bias", o.n_embd, 0.5f));
      }
      if (arch->shared_expert) {
        TENSORPC_RETURN_IF_ERROR(vector(p + "ffn_gate_inp_shexp.weight", o.n_embd, 0.0f, 0.5f));
        TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_gate_shexp.weight", o.n_embd, n_ff_shexp));
        TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_up_shexp.weight", o.n_embd, n_ff_shexp));
        TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_down_shexp.weight", n_ff_shexp, o.n_embd));
      }
    } else if (arch->fused_gate_up) {
      TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", o.n_embd, 2 * o.n_ff));
    } else {
      TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", o.n_embd, o.n_ff));
      TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", o.n_embd, o.n_ff));
    }
    if (!moe) TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", o.n_ff, o.n_embd));
    if (arch->post_norms) TENSORPC_RETURN_IF_ERROR(norm(p + "post_ffw_norm.weight", o.n_embd));
  }
  TENSORPC_RETURN_IF_ERROR(norm("output_norm.weight", o.n_embd));
  if (!o.tied_output) TENSORPC_RETURN_IF_ERROR(matrix("output.weight", o.n_embd, o.n_vocab));
  if (o.rope_freqs) {
    std::uniform_real_distribution<float> factor(1.0f, 8.0f);
    std::vector<float> f(static_cast<size_t>(head_dim / 2));
    for (float& v : f) v = factor(rng);
    const int64_t ne[1] = {head_dim / 2};
    const auto* bytes = reinterpret_cast<const uint8_t*>(f.data());
    TENSORPC_RETURN_IF_ERROR(w.add_tensor("rope_freqs.weight", DType::f32, ne, std::span<const uint8_t>(bytes, 4 * f.size())));
  }
  return Status();
}

}  // namespace

Status write_random_llama(const std::string& path, const RandomModelOptions& o) {
  GgufWriter w;
  TENSORPC_RETURN_IF_ERROR(add_random_model(w, o));
  return w.write(path);
}

StatusOr<std::string> write_random_llama_once(const std::string& path, const RandomModelOptions& o) {
  if (std::filesystem::exists(path)) return path;
  TENSORPC_RETURN_IF_ERROR(write_random_llama(path, o));
  return path;
}

StatusOr<std::vector<uint8_t>> random_model_bytes(const RandomModelOptions& o) {
  GgufWriter w;
  TENSORPC_RETURN_IF_ERROR(add_random_model(w, o));
  return w.encode();
}

}  // namespace tensorpc::tools
