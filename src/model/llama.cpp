// The llama forward pass as a graph (see llama.h for the contract).
#include "model/llama.h"

#include <cmath>
#include <limits>
#include <string>

namespace tensorpc {
namespace {

Status shape_error(const char* name, const Tensor* t, std::initializer_list<int64_t> want) {
  std::string w = "[";
  for (int64_t n : want) w += (w.size() > 1 ? ", " : "") + std::to_string(n);
  w += "]";
  return invalid_argument(std::string("llama weights: ") + name + (t ? " is " + describe(*t) : " is missing") +
                          ", expected " + w);
}

Status check(const char* name, const Tensor* t, std::initializer_list<int64_t> want) {
  if (t == nullptr) return shape_error(name, t, want);
  int i = 0;
  for (int64_t n : want) {
    if (t->ne[i++] != n) return shape_error(name, t, want);
  }
  for (; i < kMaxDims; ++i) {
    if (t->ne[i] != 1) return shape_error(name, t, want);
  }
  return Status();
}

}  // namespace

Status LlamaHparams::validate() const {
  const auto bad = [](const std::string& what) { return invalid_argument("llama hyper-parameters: " + what); };
  if (n_vocab <= 0 || n_embd <= 0 || n_layer <= 0 || n_head <= 0 || n_head_kv <= 0 || n_ff <= 0) {
    return bad("vocabulary, embedding, layer, head and feed-forward sizes must be positive");
  }
  if (n_embd % n_head != 0) return bad("embedding " + std::to_string(n_embd) + " is not a multiple of " + std::to_string(n_head) + " heads");
  if (n_head % n_head_kv != 0) return bad(std::to_string(n_head) + " heads are not a multiple of " + std::to_string(n_head_kv) + " kv heads");
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim()) {
    return bad("rotated dims " + std::to_string(n_rot) + " must be even and at most the head dim " + std::to_string(head_dim()));
  }
  if (!(rope_freq_base > 0.0f) || !(norm_eps > 0.0f)) return bad("rope base and norm epsilon must be positive");
  return Status();
}

Status LlamaWeights::validate(const LlamaHparams& hp) const {
  TENSORPC_RETURN_IF_ERROR(check("token_embd.weight", tok_embd, {hp.n_embd, hp.n_vocab}));
  if (static_cast<int64_t>(layers.size()) != hp.n_layer) {
    return invalid_argument("llama weights: " + std::to_string(layers.size()) + " layers, expected " +
                            std::to_string(hp.n_layer));
  }
  for (const LlamaLayerWeights& l : layers) {
    TENSORPC_RETURN_IF_ERROR(check("attn_norm.weight", l.attn_norm, {hp.n_embd}));
    TENSORPC_RETURN_IF_ERROR(check("attn_q.weight", l.wq, {hp.n_embd, hp.n_embd}));
    TENSORPC_RETURN_IF_ERROR(check("attn_k.weight", l.wk, {hp.n_embd, hp.kv_dim()}));
    TENSORPC_RETURN_IF_ERROR(check("attn_v.weight", l.wv, {hp.n_embd, hp.kv_dim()}));
    TENSORPC_RETURN_IF_ERROR(check("attn_output.weight", l.wo, {hp.n_embd, hp.n_embd}));
    TENSORPC_RETURN_IF_ERROR(check("ffn_norm.weight", l.ffn_norm, {hp.n_embd}));
    TENSORPC_RETURN_IF_ERROR(check("ffn_gate.weight", l.ffn_gate, {hp.n_embd, hp.n_ff}));
    TENSORPC_RETURN_IF_ERROR(check("ffn_up.weight", l.ffn_up, {hp.n_embd, hp.n_ff}));
    TENSORPC_RETURN_IF_ERROR(check("ffn_down.weight", l.ffn_down, {hp.n_ff, hp.n_embd}));
  }
  TENSORPC_RETURN_IF_ERROR(check("output_norm.weight", output_norm, {hp.n_embd}));
  return check("output.weight", output, {hp.n_embd, hp.n_vocab});
}

LlamaStep build_llama_step(Context& ctx, const LlamaHparams& hp, const LlamaWeights& w, const KvCache& cache,
                           int64_t n_tokens, int64_t n_kv, bool all_logits) {
  const int64_t n = n_tokens;
  const int64_t hd = hp.head_dim();
  const int64_t row = hp.kv_dim();  // one cache row: all kv heads of one position
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(hd));

  LlamaStep step;
  step.n_tokens = n;
  step.n_kv = n_kv;
  step.tokens = ctx.new_tensor(DType::i32, {n}, "tokens");
  step.positions = ctx.new_tensor(DType::i32, {n}, "positions");
  step.mask = ctx.new_tensor(DType::f32, {n_kv, n}, "mask");
  for (Tensor* in : {step.tokens, step.positions, step.mask}) in->flags |= kFlagInput;

  // x = the embedding of each token: [n_embd, n]
  Tensor* x = ctx.get_rows(w.tok_embd, step.tokens);

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = w.layers[static_cast<size_t>(il)];
    Tensor* k_cache = cache.k[static_cast<size_t>(il)];
    Tensor* v_cache = cache.v[static_cast<size_t>(il)];

    // h = RMSNorm(x) * attn_norm
    Tensor* h = ctx.mul(ctx.rms_norm(x, hp.norm_eps), L.attn_norm);

    // q, k, v = Wq h, Wk h, Wv h, with RoPE on q and k at each token's position
    Tensor* q = ctx.reshape(ctx.mul_mat(L.wq, h), {hd, hp.n_head, n});
    Tensor* k = ctx.reshape(ctx.mul_mat(L.wk, h), {hd, hp.n_head_kv, n});
    Tensor* v = ctx.mul_mat(L.wv, h);  // [row, n]
    q = ctx.rope(q, step.positions, static_cast<int>(hp.n_rot), kRopeNormal, hp.rope_freq_base);
    k = ctx.rope(k, step.positions, static_cast<int>(hp.n_rot), kRopeNormal, hp.rope_freq_base);

    // cache[positions] = k, v. The views below read the cache through these
    // nodes, so the writes come first in the graph. The value cache is held
    // transposed (see KvCache): each token's values go in as a column.
    Tensor* k_all = ctx.set_rows(k_cache, ctx.reshape(k, {row, n}), step.positions);
    Tensor* v_all = ctx.set_rows(ctx.transpose(v_cache), v, step.positions);
    const uint64_t es = block_bytes(k_cache->type);
    const uint64_t es_ctx = es * static_cast<uint64_t>(cache.n_ctx);
    Tensor* K = ctx.view(k_all, {hd, n_kv, hp.n_head_kv}, {es, es * row, es * hd}, 0);  // [hd, n_kv, heads_kv]
    Tensor* Vt = ctx.view(v_all, {n_kv, hd, hp.n_head_kv}, {es, es_ctx, es_ctx * hd}, 0);  // [n_kv, hd, heads_kv]

    // scores = softmax(K·q / sqrt(hd) + mask), per head, and attn = V·scores
    // (V^T read where it lies), heads back together: [n_embd, n]. A kv head
    // serves `group` = n_head / n_head_kv consecutive query heads. Decoding one
    // token, those heads' queries are the columns of one product with the kv
    // head, so each head's keys and values are read once, not once per query
    // head; otherwise mul_mat broadcasts the kv head over its query heads.
    const int64_t group = hp.n_head / hp.n_head_kv;
    Tensor* attn = nullptr;
    if (n == 1) {
      Tensor* qg = ctx.reshape(q, {hd, group, hp.n_head_kv});                          // [hd, group, heads_kv]
      Tensor* kq = ctx.reshape(ctx.mul_mat(K, qg), {n_kv, 1, hp.n_head});              // [n_kv, 1, heads]
      Tensor* scores = ctx.soft_max(kq, step.mask, attn_scale);                         // [n_kv, 1, heads]
      Tensor* sg = ctx.reshape(scores, {n_kv, group, hp.n_head_kv});                    // [n_kv, group, heads_kv]
      attn = ctx.reshape(ctx.mul_mat(Vt, sg), {hp.n_embd, 1});                          // [hd, group, heads_kv]
    } else {
      Tensor* qh = ctx.permute(q, 0, 2, 1, 3);                                   // [hd, n, heads]
      Tensor* scores = ctx.soft_max(ctx.mul_mat(K, qh), step.mask, attn_scale);  // [n_kv, n, heads]
      attn = ctx.mul_mat(Vt, scores);                                            // [hd, n, heads]
      attn = ctx.reshape(ctx.cont(ctx.permute(attn, 0, 2, 1, 3)), {hp.n_embd, n});
    }

    // x = x + Wo attn
    x = ctx.add(x, ctx.mul_mat(L.wo, attn));

    // x = x + W_down (silu(W_gate h) * W_up h),  h = RMSNorm(x) * ffn_norm
    h = ctx.mul(ctx.rms_norm(x, hp.norm_eps), L.ffn_norm);
    Tensor* ffn = ctx.swiglu(ctx.mul_mat(L.ffn_gate, h), ctx.mul_mat(L.ffn_up, h));
    x = ctx.add(x, ctx.mul_mat(L.ffn_down, ffn));
  }

  // logits = W_out RMSNorm(x) * output_norm — for the last token only when
  // that is all generation needs
  if (!all_logits && n > 1) {
    x = ctx.view(x, {hp.n_embd, 1}, {x->nb[0], x->nb[1]}, static_cast<uint64_t>(n - 1) * x->nb[1]);
  }
  x = ctx.mul(ctx.rms_norm(x, hp.norm_eps), w.output_norm);
  step.logits = ctx.mul_mat(w.output, x);
  step.logits->name = "logits";
  return step;
}

std::vector<float> causal_mask(const std::vector<int32_t>& positions, int64_t n_kv) {
  std::vector<float> mask(positions.size() * static_cast<size_t>(n_kv), -std::numeric_limits<float>::infinity());
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int64_t j = 0; j <= positions[t] && j < n_kv; ++j) mask[t * static_cast<size_t>(n_kv) + j] = 0.0f;
  }
  return mask;
}

int64_t kv_window(int64_t end, int64_t n_ctx, int64_t granularity) {
  const int64_t rounded = (end + granularity - 1) / granularity * granularity;
  return rounded < n_ctx ? rounded : n_ctx;
}

}  // namespace tensorpc
