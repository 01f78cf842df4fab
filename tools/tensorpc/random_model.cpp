// Random llama models (random_model.h). The weights are scaled like an
// initialised network (std 1/sqrt(fan_in)) so activations stay in range and
// greedy decoding does not collapse to one token at once.
#include "tensorpc/random_model.h"

#include <cmath>
#include <random>
#include <vector>

#include "model/gguf_writer.h"

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

}  // namespace

Status write_random_llama(const std::string& path, const RandomModelOptions& o) {
  if (o.n_vocab < 259) return invalid_argument("random model: n_vocab must be at least 259");
  if (o.n_head <= 0 || o.n_head_kv <= 0 || o.n_embd % o.n_head != 0 || o.n_head % o.n_head_kv != 0) {
    return invalid_argument("random model: heads must divide n_embd and each other");
  }
  const int64_t head_dim = o.n_embd / o.n_head, kv_dim = head_dim * o.n_head_kv;
  GgufWriter w;
  TENSORPC_RETURN_IF_ERROR(w.add_string("general.architecture", "llama"));
  TENSORPC_RETURN_IF_ERROR(w.add_string("general.name", "random-llama"));
  TENSORPC_RETURN_IF_ERROR(w.add_u32("llama.context_length", static_cast<uint32_t>(o.n_ctx)));
  TENSORPC_RETURN_IF_ERROR(w.add_u32("llama.embedding_length", static_cast<uint32_t>(o.n_embd)));
  TENSORPC_RETURN_IF_ERROR(w.add_u32("llama.block_count", static_cast<uint32_t>(o.n_layer)));
  TENSORPC_RETURN_IF_ERROR(w.add_u32("llama.feed_forward_length", static_cast<uint32_t>(o.n_ff)));
  TENSORPC_RETURN_IF_ERROR(w.add_u32("llama.attention.head_count", static_cast<uint32_t>(o.n_head)));
  TENSORPC_RETURN_IF_ERROR(w.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(o.n_head_kv)));
  TENSORPC_RETURN_IF_ERROR(w.add_u32("llama.rope.dimension_count", static_cast<uint32_t>(head_dim)));
  TENSORPC_RETURN_IF_ERROR(w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f));

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
  auto matrix = [&](const std::string& name, DType type, int64_t ne0, int64_t ne1) {
    const float std = 1.0f / std::sqrt(static_cast<float>(ne0));
    const int64_t ne[2] = {ne0, ne1};
    return w.add_tensor(name, type, ne, random_matrix(type, ne0, ne1, 0.0f, std, rng));
  };
  auto norm = [&](const std::string& name) {
    const int64_t ne[1] = {o.n_embd};
    return w.add_tensor(name, DType::f32, ne, random_matrix(DType::f32, o.n_embd, 1, 1.0f, 0.1f, rng));
  };
  // The embedding is read one row per token, so unit-scale rows.
  {
    const int64_t ne[2] = {o.n_embd, o.n_vocab};
    TENSORPC_RETURN_IF_ERROR(w.add_tensor("token_embd.weight", o.type, ne,
                                          random_matrix(o.type, o.n_embd, o.n_vocab, 0.0f, 1.0f, rng)));
  }
  for (int64_t l = 0; l < o.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    TENSORPC_RETURN_IF_ERROR(norm(p + "attn_norm.weight"));
    TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_q.weight", o.type, o.n_embd, o.n_embd));
    TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_k.weight", o.type, o.n_embd, kv_dim));
    TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_v.weight", o.type, o.n_embd, kv_dim));
    TENSORPC_RETURN_IF_ERROR(matrix(p + "attn_output.weight", o.type, o.n_embd, o.n_embd));
    TENSORPC_RETURN_IF_ERROR(norm(p + "ffn_norm.weight"));
    TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", o.type, o.n_embd, o.n_ff));
    TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", o.type, o.n_embd, o.n_ff));
    TENSORPC_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", o.type, o.n_ff, o.n_embd));
  }
  TENSORPC_RETURN_IF_ERROR(norm("output_norm.weight"));
  TENSORPC_RETURN_IF_ERROR(matrix("output.weight", o.type, o.n_embd, o.n_vocab));
  return w.write(path);
}

}  // namespace tensorpc::tools
