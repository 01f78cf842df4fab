// The forward pass of every architecture as one graph (see llama.h for the
// contract, arch.h for what differs between architectures).
#include "model/arch/llama.h"

#include <algorithm>
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

float LlamaHparams::attention_scale() const {
  return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim()));
}

bool LlamaHparams::sliding(int64_t il) const {
  if (n_swa <= 0) return false;
  switch (arch->sliding) {
    case SlidingLayers::all: return true;
    case SlidingLayers::even: return il % 2 == 0;
    case SlidingLayers::refused: return false;
  }
  return false;
}

RopeParams LlamaHparams::rope() const {
  RopeParams p;
  p.n_dims = static_cast<int>(n_rot);
  p.mode = arch->rope_mode;
  p.freq_base = rope_freq_base;
  p.freq_scale = rope_freq_scale;
  p.n_ctx_orig = static_cast<int>(rope_n_ctx_orig > 0 ? rope_n_ctx_orig : n_ctx_train);
  p.ext_factor = yarn_ext_factor;
  p.attn_factor = yarn_attn_factor;
  p.beta_fast = yarn_beta_fast;
  p.beta_slow = yarn_beta_slow;
  return p;
}

Status LlamaHparams::validate() const {
  const auto bad = [](const std::string& what) { return invalid_argument("llama hyper-parameters: " + what); };
  if (arch == nullptr) return bad("no architecture");
  if (n_vocab <= 0 || n_embd <= 0 || n_layer <= 0 || n_head <= 0 || n_head_kv <= 0 || n_ff <= 0 || n_head_dim < 0) {
    return bad("vocabulary, embedding, layer, head and feed-forward sizes must be positive");
  }
  if (n_head_dim == 0 && n_embd % n_head != 0) {
    return bad("embedding " + std::to_string(n_embd) + " is not a multiple of " + std::to_string(n_head) + " heads");
  }
  if (n_head % n_head_kv != 0) return bad(std::to_string(n_head) + " heads are not a multiple of " + std::to_string(n_head_kv) + " kv heads");
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim()) {
    return bad("rotated dims " + std::to_string(n_rot) + " must be even and at most the head dim " + std::to_string(head_dim()));
  }
  if (!(norm_eps > 0.0f)) return bad("the norm epsilon must be positive");
  const auto positive = [](float x) { return std::isfinite(x) && x > 0.0f; };
  if (!positive(rope_freq_base) || !positive(rope_freq_scale) || !(yarn_ext_factor >= 0.0f && yarn_ext_factor <= 1.0f) ||
      !positive(yarn_attn_factor) || !positive(yarn_beta_fast) || !positive(yarn_beta_slow)) {
    return bad("rope scaling: the frequency base and scale, the YaRN attention factor and betas must be finite and "
               "positive, the extrapolation factor in [0, 1]");
  }
  if (yarn_ext_factor > 0.0f && !(rope_freq_base > 1.0f)) return bad("YaRN needs a rope frequency base above 1");
  if (!(attn_scale >= 0.0f) || !(attn_softcap >= 0.0f) || !(final_softcap >= 0.0f) || n_swa < 0) {
    return bad("attention scale, soft-caps and sliding window must not be negative");
  }
  if (n_expert < 0 || (n_expert == 0 && (n_expert_used != 0 || arch->experts == Experts::always))) {
    return bad("a " + std::string(arch->name) + " model needs a positive expert count");
  }
  if (has_experts()) {
    if (arch->experts == Experts::none) return bad(std::string(arch->name) + " has no experts");
    if (n_expert_used < 1 || n_expert_used > n_expert) {
      return bad(std::to_string(n_expert_used) + " experts used of " + std::to_string(n_expert) +
                 ": must be at least 1 and at most the expert count");
    }
    if (n_ff_exp <= 0 || (arch->shared_expert && n_ff_shexp <= 0)) {
      return bad("the experts' feed-forward sizes must be positive");
    }
  }
  return Status();
}

std::vector<Tensor*> LlamaLayerWeights::tensors() const {
  std::vector<Tensor*> out;
  for (Tensor* t : {attn_norm,
                    wq,
                    wk,
                    wv,
                    wqkv,
                    bq,
                    bk,
                    bv,
                    q_norm,
                    k_norm,
                    wo,
                    bo,
                    sinks,
                    post_attn_norm,
                    ffn_norm,
                    ffn_gate,
                    ffn_up,
                    ffn_down,
                    post_ffn_norm,
                    gate_inp,
                    gate_inp_b,
                    gate_exps,
                    up_exps,
                    down_exps,
                    gate_exps_b,
                    up_exps_b,
                    down_exps_b,
                    gate_inp_shexp,
                    gate_shexp,
                    up_shexp,
                    down_shexp}) {
    if (t != nullptr) out.push_back(t);
  }
  return out;
}

Status LlamaWeights::validate(const LlamaHparams& hp) const {
  const ArchDescription& a = *hp.arch;
  const int64_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim(), F = hp.n_ff;
  const bool moe = hp.has_experts();
  // A tensor the architecture has must be there with its shape; one it does
  // not have must not be, so that nothing in a file is silently left out.
  const auto has = [&](bool wanted, const char* name, const Tensor* t, std::initializer_list<int64_t> want) {
    if (wanted) return check(name, t, want);
    if (t != nullptr) {
      return invalid_argument(std::string("llama weights: ") + name + " is there, but a " + std::string(a.name) +
                              " model has none");
    }
    return Status();
  };
  TENSORPC_RETURN_IF_ERROR(check("token_embd.weight", tok_embd, {E, hp.n_vocab}));
  if (static_cast<int64_t>(layers.size()) != hp.n_layer) {
    return invalid_argument("llama weights: " + std::to_string(layers.size()) + " layers, expected " +
                            std::to_string(hp.n_layer));
  }
  for (const LlamaLayerWeights& l : layers) {
    TENSORPC_RETURN_IF_ERROR(check("attn_norm.weight", l.attn_norm, {E}));
    TENSORPC_RETURN_IF_ERROR(has(a.fused_qkv, "attn_qkv.weight", l.wqkv, {E, Q + 2 * KV}));
    TENSORPC_RETURN_IF_ERROR(has(!a.fused_qkv, "attn_q.weight", l.wq, {E, Q}));
    TENSORPC_RETURN_IF_ERROR(has(!a.fused_qkv, "attn_k.weight", l.wk, {E, KV}));
    TENSORPC_RETURN_IF_ERROR(has(!a.fused_qkv, "attn_v.weight", l.wv, {E, KV}));
    TENSORPC_RETURN_IF_ERROR(has(a.qkv_bias, "attn_q.bias", l.bq, {Q}));
    TENSORPC_RETURN_IF_ERROR(has(a.qkv_bias, "attn_k.bias", l.bk, {KV}));
    TENSORPC_RETURN_IF_ERROR(has(a.qkv_bias, "attn_v.bias", l.bv, {KV}));
    TENSORPC_RETURN_IF_ERROR(has(a.qk_norm, "attn_q_norm.weight", l.q_norm, {hp.head_dim()}));
    TENSORPC_RETURN_IF_ERROR(has(a.qk_norm, "attn_k_norm.weight", l.k_norm, {hp.head_dim()}));
    TENSORPC_RETURN_IF_ERROR(check("attn_output.weight", l.wo, {Q, E}));
    TENSORPC_RETURN_IF_ERROR(has(a.attn_output_bias, "attn_output.bias", l.bo, {E}));
    TENSORPC_RETURN_IF_ERROR(has(a.attn_sinks, "attn_sinks.weight", l.sinks, {hp.n_head}));
    TENSORPC_RETURN_IF_ERROR(has(a.post_norms, "post_attention_norm.weight", l.post_attn_norm, {E}));
    TENSORPC_RETURN_IF_ERROR(check("ffn_norm.weight", l.ffn_norm, {E}));
    TENSORPC_RETURN_IF_ERROR(has(!moe && !a.fused_gate_up, "ffn_gate.weight", l.ffn_gate, {E, F}));
    TENSORPC_RETURN_IF_ERROR(has(!moe, "ffn_up.weight", l.ffn_up, {E, a.fused_gate_up ? 2 * F : F}));
    TENSORPC_RETURN_IF_ERROR(has(!moe, "ffn_down.weight", l.ffn_down, {F, E}));
    TENSORPC_RETURN_IF_ERROR(has(a.post_norms, "post_ffw_norm.weight", l.post_ffn_norm, {E}));
    const int64_t X = hp.n_expert, FX = hp.n_ff_exp, FS = hp.n_ff_shexp;
    TENSORPC_RETURN_IF_ERROR(has(moe, "ffn_gate_inp.weight", l.gate_inp, {E, X}));
    TENSORPC_RETURN_IF_ERROR(has(moe, "ffn_gate_exps.weight", l.gate_exps, {E, FX, X}));
    TENSORPC_RETURN_IF_ERROR(has(moe, "ffn_up_exps.weight", l.up_exps, {E, FX, X}));
    TENSORPC_RETURN_IF_ERROR(has(moe, "ffn_down_exps.weight", l.down_exps, {FX, E, X}));
    const bool biases = moe && a.expert_biases;
    TENSORPC_RETURN_IF_ERROR(has(biases, "ffn_gate_inp.bias", l.gate_inp_b, {X}));
    TENSORPC_RETURN_IF_ERROR(has(biases, "ffn_gate_exps.bias", l.gate_exps_b, {FX, X}));
    TENSORPC_RETURN_IF_ERROR(has(biases, "ffn_up_exps.bias", l.up_exps_b, {FX, X}));
    TENSORPC_RETURN_IF_ERROR(has(biases, "ffn_down_exps.bias", l.down_exps_b, {E, X}));
    const bool shared = moe && a.shared_expert;
    TENSORPC_RETURN_IF_ERROR(has(shared, "ffn_gate_inp_shexp.weight", l.gate_inp_shexp, {E}));
    TENSORPC_RETURN_IF_ERROR(has(shared, "ffn_gate_shexp.weight", l.gate_shexp, {E, FS}));
    TENSORPC_RETURN_IF_ERROR(has(shared, "ffn_up_shexp.weight", l.up_shexp, {E, FS}));
    TENSORPC_RETURN_IF_ERROR(has(shared, "ffn_down_shexp.weight", l.down_shexp, {FS, E}));
  }
  TENSORPC_RETURN_IF_ERROR(check("output_norm.weight", output_norm, {E}));
  TENSORPC_RETURN_IF_ERROR(check("output.weight", output, {E, hp.n_vocab}));
  if (rope_freqs != nullptr) TENSORPC_RETURN_IF_ERROR(check("rope_freqs.weight", rope_freqs, {hp.n_rot / 2}));
  return Status();
}

namespace {

// Rows [first, first + count) of a [k, n] matrix of results, as a contiguous
// [count, n] tensor: one of the parts of a fused projection.
Tensor* rows_of(Context& ctx, Tensor* m, int64_t first, int64_t count) {
  const uint64_t es = m->nb[0];
  return ctx.cont(ctx.view(m, {count, m->ne[1]}, {es, m->nb[1]}, static_cast<uint64_t>(first) * es));
}

// c · tanh(x / c): a soft cap at ±c. `pre` scales x first (folded into the division).
Tensor* soft_cap(Context& ctx, Tensor* x, float c, float pre = 1.0f) {
  return ctx.scale(ctx.tanh(ctx.scale(x, pre / c)), c);
}

// act(gate) * up, the architecture's gate activation (gpt-oss: its clamped
// SwiGLU, with the model's constants).
Tensor* gated(Context& ctx, const ArchDescription& arch, Tensor* gate, Tensor* up) {
  switch (arch.activation) {
    case GateActivation::silu: return ctx.swiglu(gate, up);
    case GateActivation::gelu: return ctx.mul(ctx.gelu(gate), up);
    case GateActivation::clamped: return ctx.swiglu_clamp(gate, up, /*alpha=*/1.702f, /*limit=*/7.0f);
  }
  return nullptr;
}

// Each token's rows of per-expert vectors b [m, E] for the experts ids [k, n]
// chose: [m, k, n] (gpt-oss's expert biases).
Tensor* expert_rows(Context& ctx, Tensor* b, Tensor* ids) {
  const int64_t k = ids->ne[0], n = ids->ne[1];
  return ctx.reshape(ctx.get_rows(b, ctx.reshape(ids, {k * n})), {b->ne[0], k, n});
}

// The mixture-of-experts feed-forward of h [n_embd, n]: [n_embd, n].
Tensor* experts_ffn(Context& ctx, const LlamaHparams& hp, const LlamaLayerWeights& L, Tensor* h) {
  const ArchDescription& arch = *hp.arch;
  const int64_t n = h->ne[1], k = hp.n_expert_used, X = hp.n_expert;

  // The router: a logit per expert (+ bias), the k largest choose; the
  // weights are the softmax over the chosen logits, or (qwen2moe) the chosen
  // experts' probabilities in the softmax over all.
  Tensor* logits = ctx.mul_mat(L.gate_inp, h);  // [X, n]
  if (L.gate_inp_b != nullptr) logits = ctx.add(logits, L.gate_inp_b);
  Tensor* ids = ctx.top_k_ids(logits, static_cast<int>(k));  // [k, n]
  Tensor* weights = nullptr;                                 // [1, k, n]
  if (arch.expert_weights == ExpertWeights::softmax_all) {
    weights = ctx.get_rows(ctx.reshape(ctx.soft_max(logits), {1, X, n}), ids);
  } else {
    Tensor* chosen = ctx.get_rows(ctx.reshape(logits, {1, X, n}), ids);
    weights = ctx.reshape(ctx.soft_max(ctx.reshape(chosen, {k, n})), {1, k, n});
  }

  // y_s = W_down,e (act(W_gate,e h) * W_up,e h) for each chosen expert e of
  // slot s (+ its biases), only the chosen experts' rows read
  Tensor* x = ctx.reshape(h, {hp.n_embd, 1, n});
  Tensor* gate = ctx.mul_mat_id(L.gate_exps, x, ids);  // [n_ff_exp, k, n]
  Tensor* up = ctx.mul_mat_id(L.up_exps, x, ids);
  if (arch.expert_biases) {
    gate = ctx.add(gate, expert_rows(ctx, L.gate_exps_b, ids));
    up = ctx.add(up, expert_rows(ctx, L.up_exps_b, ids));
  }
  Tensor* y = ctx.mul_mat_id(L.down_exps, gated(ctx, arch, gate, up), ids);  // [n_embd, k, n]
  if (arch.expert_biases) y = ctx.add(y, expert_rows(ctx, L.down_exps_b, ids));

  // out = sum_s weight_s y_s
  y = ctx.mul(y, weights);
  const auto slot = [&](int64_t s) {
    return ctx.view(y, {hp.n_embd, n}, {y->nb[0], y->nb[2]}, static_cast<uint64_t>(s) * y->nb[1]);
  };
  Tensor* out = k == 1 ? ctx.cont(slot(0)) : ctx.add(slot(0), slot(1));
  for (int64_t s = 2; s < k; ++s) out = ctx.add(out, slot(s));

  // qwen2moe: + sigmoid(w_shexp · h) * W_down (act(W_gate h) * W_up h), the shared expert
  if (arch.shared_expert) {
    Tensor* shared =
        ctx.mul_mat(L.down_shexp, gated(ctx, arch, ctx.mul_mat(L.gate_shexp, h), ctx.mul_mat(L.up_shexp, h)));
    out = ctx.add(out, ctx.mul(shared, ctx.sigmoid(ctx.mul_mat(L.gate_inp_shexp, h))));
  }
  return out;
}

}  // namespace

LlamaStep build_llama_step(Context& ctx, const LlamaHparams& hp, const LlamaWeights& w, const KvCache& cache,
                           int64_t n_tokens, int64_t n_kv, bool all_logits) {
  return build_llama_step(ctx, hp, w, cache, LlamaStepShape{.n_tokens = n_tokens, .n_kv = n_kv, .all_logits = all_logits});
}

LlamaStep build_llama_step(Context& ctx, const LlamaHparams& hp, const LlamaWeights& w, const KvCache& cache,
                           const LlamaStepShape& shape) {
  const ArchDescription& arch = *hp.arch;
  const int64_t n = shape.n_tokens;
  const int64_t n_kv = shape.n_kv;
  const int64_t hd = hp.head_dim();
  const int64_t row = hp.kv_dim();  // one cache row: all kv heads of one position
  const float attn_scale = hp.attention_scale();
  const RopeParams rope = hp.rope();

  LlamaStep step;
  step.n_tokens = n;
  step.n_kv = n_kv;
  step.tokens = ctx.new_tensor(DType::i32, {n}, "tokens");
  step.positions = ctx.new_tensor(DType::i32, {n}, "positions");
  for (Tensor* in : {step.tokens, step.positions}) in->flags |= kFlagInput;
  if (shape.cells) {
    step.cells = ctx.new_tensor(DType::i32, {n}, "cells");
    step.cells->flags |= kFlagInput;
  }
  if (shape.n_out > 0 && !shape.hidden) {
    step.out_rows = ctx.new_tensor(DType::i32, {shape.n_out}, "out_rows");
    step.out_rows->flags |= kFlagInput;
  }
  Tensor* cells = shape.cells ? step.cells : step.positions;
  // Each mask exists when some layer reads it.
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Tensor*& mask = hp.sliding(il) ? step.mask_swa : step.mask;
    if (mask != nullptr) continue;
    mask = ctx.new_tensor(DType::f32, {n_kv, n}, hp.sliding(il) ? "mask_swa" : "mask");
    mask->flags |= kFlagInput;
  }

  // x = the embedding of each token: [n_embd, n] (gemma: times sqrt(n_embd))
  Tensor* x = ctx.get_rows(w.tok_embd, step.tokens);
  if (arch.embedding_scale) x = ctx.scale(x, std::sqrt(static_cast<float>(hp.n_embd)));

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = w.layers[static_cast<size_t>(il)];
    Tensor* k_cache = cache.k[static_cast<size_t>(il)];
    Tensor* v_cache = cache.v[static_cast<size_t>(il)];
    Tensor* mask = hp.sliding(il) ? step.mask_swa : step.mask;

    // h = RMSNorm(x) * attn_norm
    Tensor* h = ctx.mul(ctx.rms_norm(x, hp.norm_eps), L.attn_norm);

    // q, k, v = Wq h + bq, Wk h + bk, Wv h + bv (phi3: one fused matrix,
    // q's rows, then k's, then v's; the biases only where the architecture has them)
    Tensor *q = nullptr, *k = nullptr, *v = nullptr;
    if (arch.fused_qkv) {
      Tensor* qkv = ctx.mul_mat(L.wqkv, h);  // [q_dim + 2 row, n]
      q = rows_of(ctx, qkv, 0, hp.q_dim());
      k = rows_of(ctx, qkv, hp.q_dim(), row);
      v = rows_of(ctx, qkv, hp.q_dim() + row, row);
    } else {
      q = ctx.mul_mat(L.wq, h);
      k = ctx.mul_mat(L.wk, h);
      v = ctx.mul_mat(L.wv, h);  // [row, n]
    }
    if (arch.qkv_bias) {
      q = ctx.add(q, L.bq);
      k = ctx.add(k, L.bk);
      v = ctx.add(v, L.bv);
    }
    q = ctx.reshape(q, {hd, hp.n_head, n});
    k = ctx.reshape(k, {hd, hp.n_head_kv, n});

    // qwen3: q, k = RMSNorm(each head) * q_norm, k_norm
    if (arch.qk_norm) {
      q = ctx.mul(ctx.rms_norm(q, hp.norm_eps), L.q_norm);
      k = ctx.mul(ctx.rms_norm(k, hp.norm_eps), L.k_norm);
    }

    // RoPE on q and k at each token's position: the architecture's rotation,
    // the file's frequency factors and scaling
    q = ctx.rope(q, step.positions, rope, w.rope_freqs);
    k = ctx.rope(k, step.positions, rope, w.rope_freqs);

    // cache[cells] = k, v. The views below read the cache through these
    // nodes, so the writes come first in the graph. The value cache is held
    // transposed (see KvCache): each token's values go in as a column.
    Tensor* k_all = ctx.set_rows(k_cache, ctx.reshape(k, {row, n}), cells);
    Tensor* v_all = ctx.set_rows(ctx.transpose(v_cache), v, cells);
    const uint64_t es = block_bytes(k_cache->type);
    const uint64_t es_ctx = es * static_cast<uint64_t>(cache.n_ctx);
    Tensor* K = ctx.view(k_all, {hd, n_kv, hp.n_head_kv}, {es, es * row, es * hd}, 0);  // [hd, n_kv, heads_kv]
    Tensor* Vt = ctx.view(v_all, {n_kv, hd, hp.n_head_kv}, {es, es_ctx, es_ctx * hd}, 0);  // [n_kv, hd, heads_kv]

    // scores = softmax(K·q * attn_scale + mask), per head (gemma2: the
    // scaled scores soft-capped first), and attn = V·scores (V^T read where
    // it lies), heads back together: [q_dim, n]. A kv head serves `group` =
    // n_head / n_head_kv consecutive query heads. Decoding one token, those
    // heads' queries are the columns of one product with the kv head, so each
    // head's keys and values are read once, not once per query head;
    // otherwise mul_mat broadcasts the kv head over its query heads.
    // (gpt-oss: each head's sink logit joins its softmax.)
    const auto scores_of = [&](Tensor* kq) {
      if (hp.attn_softcap > 0.0f) {
        return ctx.soft_max(soft_cap(ctx, kq, hp.attn_softcap, attn_scale), mask, 1.0f, L.sinks);
      }
      return ctx.soft_max(kq, mask, attn_scale, L.sinks);
    };
    const int64_t group = hp.n_head / hp.n_head_kv;
    Tensor* attn = nullptr;
    if (n == 1) {
      Tensor* qg = ctx.reshape(q, {hd, group, hp.n_head_kv});                 // [hd, group, heads_kv]
      Tensor* kq = ctx.reshape(ctx.mul_mat(K, qg), {n_kv, 1, hp.n_head});     // [n_kv, 1, heads]
      Tensor* sg = ctx.reshape(scores_of(kq), {n_kv, group, hp.n_head_kv});   // [n_kv, group, heads_kv]
      attn = ctx.reshape(ctx.mul_mat(Vt, sg), {hp.q_dim(), 1});               // [hd, group, heads_kv]
    } else {
      Tensor* qh = ctx.permute(q, 0, 2, 1, 3);               // [hd, n, heads]
      Tensor* scores = scores_of(ctx.mul_mat(K, qh));        // [n_kv, n, heads]
      attn = ctx.mul_mat(Vt, scores);                        // [hd, n, heads]
      attn = ctx.reshape(ctx.cont(ctx.permute(attn, 0, 2, 1, 3)), {hp.q_dim(), n});
    }

    // x = x + Wo attn (+ bo) (gemma2: x + RMSNorm(Wo attn) * post_attention_norm)
    Tensor* o = ctx.mul_mat(L.wo, attn);
    if (arch.attn_output_bias) o = ctx.add(o, L.bo);
    if (arch.post_norms) o = ctx.mul(ctx.rms_norm(o, hp.norm_eps), L.post_attn_norm);
    x = ctx.add(x, o);

    // x = x + W_down (act(W_gate h) * W_up h),  h = RMSNorm(x) * ffn_norm,
    // act = silu or gelu (phi3: gate and up are the two halves of one
    // product; gemma2: the branch RMSNorm-ed * post_ffw_norm before the add;
    // mixtures of experts: the chosen experts' feed-forwards, weighted)
    h = ctx.mul(ctx.rms_norm(x, hp.norm_eps), L.ffn_norm);
    Tensor* d = nullptr;
    if (hp.has_experts()) {
      d = experts_ffn(ctx, hp, L, h);
    } else {
      Tensor *gate = nullptr, *up = nullptr;
      if (arch.fused_gate_up) {
        Tensor* gu = ctx.mul_mat(L.ffn_up, h);  // [2 n_ff, n]
        gate = rows_of(ctx, gu, 0, hp.n_ff);
        up = rows_of(ctx, gu, hp.n_ff, hp.n_ff);
      } else {
        gate = ctx.mul_mat(L.ffn_gate, h);
        up = ctx.mul_mat(L.ffn_up, h);
      }
      d = ctx.mul_mat(L.ffn_down, gated(ctx, arch, gate, up));
    }
    if (arch.post_norms) d = ctx.mul(ctx.rms_norm(d, hp.norm_eps), L.post_ffn_norm);
    x = ctx.add(x, d);
  }

  // hidden = RMSNorm(x) * output_norm for every token: the last hidden
  // state, which embeddings pool; the step ends there
  if (shape.hidden) {
    step.hidden = ctx.mul(ctx.rms_norm(x, hp.norm_eps), w.output_norm);
    step.hidden->name = "hidden";
    return step;
  }

  // logits = W_out RMSNorm(x) * output_norm — for the last token only when
  // that is all generation needs, for the rows a batch names (each
  // sequence's last token) when it has several (gemma2: soft-capped)
  if (step.out_rows != nullptr) {
    x = ctx.get_rows(x, step.out_rows);
  } else if (!shape.all_logits && n > 1) {
    x = ctx.view(x, {hp.n_embd, 1}, {x->nb[0], x->nb[1]}, static_cast<uint64_t>(n - 1) * x->nb[1]);
  }
  x = ctx.mul(ctx.rms_norm(x, hp.norm_eps), w.output_norm);
  step.logits = ctx.mul_mat(w.output, x);
  if (hp.final_softcap > 0.0f) step.logits = soft_cap(ctx, step.logits, hp.final_softcap);
  step.logits->name = "logits";
  return step;
}

std::vector<float> causal_mask(const std::vector<int32_t>& positions, int64_t n_kv, int64_t window) {
  // One sequence: its cells are its positions.
  return batch_mask(std::vector<int32_t>(positions.size(), 0), positions, /*n_seq=*/1, n_kv, window);
}

std::vector<float> batch_mask(const std::vector<int32_t>& seqs, const std::vector<int32_t>& positions, int64_t n_seq,
                              int64_t n_kv, int64_t window) {
  std::vector<float> mask(positions.size() * static_cast<size_t>(n_kv), -std::numeric_limits<float>::infinity());
  for (size_t t = 0; t < positions.size(); ++t) {
    const int64_t first = window > 0 ? std::max<int64_t>(0, positions[t] - window + 1) : 0;
    for (int64_t p = first; p <= positions[t]; ++p) {
      const int64_t j = cache_cell(seqs[t], p, n_seq);
      if (j < n_kv) mask[t * static_cast<size_t>(n_kv) + static_cast<size_t>(j)] = 0.0f;
    }
  }
  return mask;
}

int64_t kv_window(int64_t end, int64_t n_ctx, int64_t granularity) {
  const int64_t rounded = (end + granularity - 1) / granularity * granularity;
  return rounded < n_ctx ? rounded : n_ctx;
}

}  // namespace tensorpc
