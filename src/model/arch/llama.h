// The llama-family transformer: its hyper-parameters, its weights as tensors,
// its KV cache, and the graph of one forward step.
//
// build_llama_step() writes the forward pass as straight-line graph building,
// one block per piece of math (see llama.cpp in this folder), once for every
// architecture: the hyper-parameters name the model's ArchDescription
// (arch.h), and each optional piece of the pass is built where the
// description says the architecture has it. The graph's
// shape depends only on the number of tokens in the step and the number of
// cache positions attended over (n_kv), never on the position itself: new
// keys and values are written into the cache at positions given as data
// (set_rows), and a mask input hides what a token may not see. So every
// decode step with the same n_kv is the same graph, which schedulers and
// servers reuse instead of re-planning and re-sending.
//
// Ownership: weights and caches are tensors of the caller's contexts, placed
// in the caller's buffers; this file only builds graphs over them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/arch/arch.h"
#include "tensorpc/context.h"
#include "tensorpc/status.h"

namespace tensorpc {

// How an embedding pools a sequence's final hidden states into one vector:
// GGUF's <arch>.pooling_type, numbered as the file writes it. none keeps a
// vector per token.
enum class Pooling { none = 0, mean = 1, cls = 2, last = 3 };

struct LlamaHparams {
  const ArchDescription* arch = &kArchLlama;  // never null
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;  // context the model was trained for
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // < n_head: grouped-query attention
  int64_t n_ff = 0;
  int64_t n_head_dim = 0;  // attention.key_length; 0: n_embd / n_head
  int64_t n_rot = 0;       // rotated dims per head (llama: the head dim)
  float rope_freq_base = 10000.0f;
  float norm_eps = 1e-5f;

  // RoPE scaling (rope.scaling.*), as RopeParams takes it: positions times
  // rope_freq_scale (< 1: linear interpolation), and YaRN when
  // yarn_ext_factor > 0 (its ramp between rope_n_ctx_orig's wavelengths
  // yarn_beta_fast and yarn_beta_slow, and its magnitude yarn_attn_factor).
  float rope_freq_scale = 1.0f;
  int64_t rope_n_ctx_orig = 0;  // 0: n_ctx_train
  float yarn_ext_factor = 0.0f;
  float yarn_attn_factor = 1.0f;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;

  float attn_scale = 0.0f;     // scale of q·k; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;   // scores become c·tanh(scores/c) before the mask; 0: none
  float final_softcap = 0.0f;  // the same for the logits
  int64_t n_swa = 0;           // sliding window of the layers arch->sliding names; 0: none

  // Mixture of experts (arch->experts): n_expert > 0 makes every layer's
  // feed-forward a router over n_expert experts of n_ff_exp, n_expert_used
  // of them run for each token; qwen2moe's shared expert is n_ff_shexp wide.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;

  Pooling pooling = Pooling::mean;  // <arch>.pooling_type; mean when the file names none

  bool has_experts() const { return n_expert > 0; }
  int64_t head_dim() const { return n_head_dim > 0 ? n_head_dim : n_head > 0 ? n_embd / n_head : 0; }
  int64_t q_dim() const { return head_dim() * n_head; }
  // Values of one KV-cache row (one position, all kv heads).
  int64_t kv_dim() const { return head_dim() * n_head_kv; }
  float attention_scale() const;
  // Whether layer `il` attends only within the last n_swa positions.
  bool sliding(int64_t il) const;
  RopeParams rope() const;
  // Positive sizes, heads that divide the embedding and each other, n_rot even and ≤ head_dim.
  Status validate() const;
};

struct LlamaLayerWeights {
  Tensor* attn_norm = nullptr;  // f32 [n_embd]
  Tensor* wq = nullptr;         // [n_embd, q_dim]
  Tensor* wk = nullptr;         // [n_embd, kv_dim]
  Tensor* wv = nullptr;         // [n_embd, kv_dim]
  Tensor* wqkv = nullptr;       // fused_qkv: [n_embd, q_dim + 2 kv_dim] instead of wq, wk, wv
  Tensor* bq = nullptr;         // qkv_bias: f32 [q_dim]
  Tensor* bk = nullptr;         // qkv_bias: f32 [kv_dim]
  Tensor* bv = nullptr;         // qkv_bias: f32 [kv_dim]
  Tensor* q_norm = nullptr;     // qk_norm: f32 [head_dim]
  Tensor* k_norm = nullptr;     // qk_norm: f32 [head_dim]
  Tensor* wo = nullptr;         // [q_dim, n_embd]
  Tensor* bo = nullptr;         // attn_output_bias: f32 [n_embd]
  Tensor* sinks = nullptr;      // attn_sinks: f32 [n_head]
  Tensor* post_attn_norm = nullptr;  // post_norms: f32 [n_embd]
  Tensor* ffn_norm = nullptr;   // f32 [n_embd]
  Tensor* ffn_gate = nullptr;   // [n_embd, n_ff]; null when fused_gate_up
  Tensor* ffn_up = nullptr;     // [n_embd, n_ff]; fused_gate_up: [n_embd, 2 n_ff], the gate's rows first
  Tensor* ffn_down = nullptr;   // [n_ff, n_embd]
  Tensor* post_ffn_norm = nullptr;  // post_norms: f32 [n_embd]

  // Mixture of experts (instead of ffn_gate, ffn_up and ffn_down); E experts of n_ff_exp.
  Tensor* gate_inp = nullptr;        // the router: [n_embd, E]
  Tensor* gate_inp_b = nullptr;      // expert_biases: f32 [E]
  Tensor* gate_exps = nullptr;       // [n_embd, n_ff_exp, E]
  Tensor* up_exps = nullptr;         // [n_embd, n_ff_exp, E]
  Tensor* down_exps = nullptr;       // [n_ff_exp, n_embd, E]
  Tensor* gate_exps_b = nullptr;     // expert_biases: f32 [n_ff_exp, E]
  Tensor* up_exps_b = nullptr;       // expert_biases: f32 [n_ff_exp, E]
  Tensor* down_exps_b = nullptr;     // expert_biases: f32 [n_embd, E]
  Tensor* gate_inp_shexp = nullptr;  // shared_expert: the shared expert's gate, [n_embd]
  Tensor* gate_shexp = nullptr;      // shared_expert: [n_embd, n_ff_shexp]
  Tensor* up_shexp = nullptr;        // shared_expert: [n_embd, n_ff_shexp]
  Tensor* down_shexp = nullptr;      // shared_expert: [n_ff_shexp, n_embd]

  // Every tensor the layer has (those its architecture does not use are null
  // and left out): what placement uploads and counts.
  std::vector<Tensor*> tensors() const;
};

struct LlamaWeights {
  Tensor* tok_embd = nullptr;     // [n_embd, n_vocab]
  std::vector<LlamaLayerWeights> layers;
  Tensor* output_norm = nullptr;  // f32 [n_embd]
  Tensor* output = nullptr;       // [n_embd, n_vocab]; the same tensor as tok_embd when tied
  Tensor* rope_freqs = nullptr;   // optional f32 [n_rot/2]: RoPE's frequency i divided by rope_freqs[i]
  // Every tensor the architecture has, present with the shape the
  // hyper-parameters imply, and no other; errors name the tensor.
  Status validate(const LlamaHparams& hp) const;
};

// Keys and values of every layer. Keys: one row of kv_dim values per
// position. Values transposed: one row of n_ctx positions per value channel,
// so attention multiplies by V^T where it lies instead of transposing the
// whole window every step.
struct KvCache {
  int64_t n_ctx = 0;
  std::vector<Tensor*> k;  // per layer, [kv_dim, n_ctx], f32 or f16
  std::vector<Tensor*> v;  // per layer, [n_ctx, kv_dim], of k's type
};

// The tensors of one forward step. The caller fills the inputs:
//   tokens    i32 [n_tokens]         token ids
//   positions i32 [n_tokens]         their positions in their sequence
//   cells     i32 [n_tokens]         (shared caches only) the cache cell each
//                                    token's key and value go to; without it,
//                                    the cell is the position
//   out_rows  i32 [n_out]            (batches only) the tokens whose logits
//                                    the step returns, in that order
//   mask      f32 [n_kv, n_tokens]   0 where token t may attend to cache
//                                    cell j (its own sequence's cells up to its
//                                    position), -inf elsewhere
//   mask_swa  f32 [n_kv, n_tokens]   the same, and -inf where positions[t] - j ≥ n_swa
// (causal_mask and batch_mask make both). Each mask is there (non-null) when
// some layer reads it: mask_swa when some layer slides (hp.sliding), mask
// when some does not. The caller reads logits: f32 [n_vocab, n_out], for
// every token, the last only, or the rows out_rows names (or, with
// LlamaStepShape::hidden, `hidden` instead).
struct LlamaStep {
  Tensor* tokens = nullptr;
  Tensor* positions = nullptr;
  Tensor* cells = nullptr;
  Tensor* out_rows = nullptr;
  Tensor* mask = nullptr;
  Tensor* mask_swa = nullptr;
  Tensor* logits = nullptr;
  Tensor* hidden = nullptr;  // with LlamaStepShape::hidden, instead of logits
  int64_t n_tokens = 0;
  int64_t n_kv = 0;
};

// What a step computes besides its cache writes.
struct LlamaStepShape {
  int64_t n_tokens = 1;
  int64_t n_kv = 0;          // cache cells attended over
  bool all_logits = false;   // a row of logits for every token; else for the last
  int64_t n_out = 0;         // > 0: n_out rows, those the out_rows input names (overrides all_logits)
  bool cells = false;        // keys and values go to the cells input rather than to their positions
  // The step ends before the output projection: `hidden`, f32 [n_embd,
  // n_tokens], every token's final hidden state (after the output norm),
  // what embeddings pool; no logits (all_logits and n_out are ignored).
  bool hidden = false;
};

// Builds one forward step over n_tokens tokens that attends to the first
// n_kv cache cells (n_kv ≤ cache.n_ctx, and every cell written so far
// plus this step's must be < n_kv). Throws Error (from the op builders) when
// shapes disagree; call validate() on the weights first for clear messages.
LlamaStep build_llama_step(Context& ctx, const LlamaHparams& hp, const LlamaWeights& w, const KvCache& cache,
                           const LlamaStepShape& shape);
// One sequence at the cache's start: cells are positions.
LlamaStep build_llama_step(Context& ctx, const LlamaHparams& hp, const LlamaWeights& w, const KvCache& cache,
                           int64_t n_tokens, int64_t n_kv, bool all_logits);

// The mask for tokens at `positions` attending over n_kv cache positions
// (row-major [n_tokens][n_kv], as the mask tensor stores it); with a window
// w > 0, a token also sees only the w positions up to its own.
std::vector<float> causal_mask(const std::vector<int32_t>& positions, int64_t n_kv, int64_t window = 0);

// The smallest n_kv that covers `end` positions, rounded up to a multiple of
// `granularity` and capped at n_ctx: steps share a graph until it grows.
int64_t kv_window(int64_t end, int64_t n_ctx, int64_t granularity = 32);

// Several sequences sharing one cache, interleaved: position p of sequence s
// (of n_seq) lives in cell p * n_seq + s, so the cells in use stay a prefix
// of the cache whatever the mix of sequences, and a window over the longest
// sequence covers them all.
inline int64_t cache_cell(int64_t seq, int64_t position, int64_t n_seq) { return position * n_seq + seq; }
// The mask for tokens of sequences `seqs` at `positions` over n_kv cells laid
// out by cache_cell(): each token sees its own sequence's cells up to its
// position (with a window w > 0, only the last w of them).
std::vector<float> batch_mask(const std::vector<int32_t>& seqs, const std::vector<int32_t>& positions, int64_t n_seq,
                              int64_t n_kv, int64_t window = 0);

}  // namespace tensorpc
