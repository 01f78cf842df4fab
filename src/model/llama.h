// The llama-family transformer: its hyper-parameters, its weights as tensors,
// its KV cache, and the graph of one forward step.
//
// build_llama_step() writes the forward pass as straight-line graph building,
// one block per piece of math (see llama.cpp in this folder). The graph's
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

#include "tensorpc/context.h"
#include "tensorpc/status.h"

namespace tensorpc {

struct LlamaHparams {
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;  // context the model was trained for
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // < n_head: grouped-query attention
  int64_t n_ff = 0;
  int64_t n_rot = 0;  // rotated dims per head (llama: the head dim)
  float rope_freq_base = 10000.0f;
  float norm_eps = 1e-5f;

  int64_t head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
  // Bytes of one KV-cache row (one position, all kv heads) in f32.
  int64_t kv_dim() const { return head_dim() * n_head_kv; }
  // Positive sizes, heads that divide the embedding and each other, n_rot even and ≤ head_dim.
  Status validate() const;
};

struct LlamaLayerWeights {
  Tensor* attn_norm = nullptr;  // f32 [n_embd]
  Tensor* wq = nullptr;         // [n_embd, n_embd]
  Tensor* wk = nullptr;         // [n_embd, kv_dim]
  Tensor* wv = nullptr;         // [n_embd, kv_dim]
  Tensor* wo = nullptr;         // [n_embd, n_embd]
  Tensor* ffn_norm = nullptr;   // f32 [n_embd]
  Tensor* ffn_gate = nullptr;   // [n_embd, n_ff]
  Tensor* ffn_up = nullptr;     // [n_embd, n_ff]
  Tensor* ffn_down = nullptr;   // [n_ff, n_embd]
};

struct LlamaWeights {
  Tensor* tok_embd = nullptr;     // [n_embd, n_vocab]
  std::vector<LlamaLayerWeights> layers;
  Tensor* output_norm = nullptr;  // f32 [n_embd]
  Tensor* output = nullptr;       // [n_embd, n_vocab]; the same tensor as tok_embd when tied
  // Every tensor present with the shape the hyper-parameters imply; errors name the tensor.
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

// The tensors of one forward step. The caller fills the three inputs:
//   tokens    i32 [n_tokens]         token ids
//   positions i32 [n_tokens]         their positions in the sequence
//   mask      f32 [n_kv, n_tokens]   0 where token t may attend to cache
//                                    position j (j ≤ positions[t]), -inf elsewhere
// and reads logits: f32 [n_vocab, n_out], for every token or only the last.
struct LlamaStep {
  Tensor* tokens = nullptr;
  Tensor* positions = nullptr;
  Tensor* mask = nullptr;
  Tensor* logits = nullptr;
  int64_t n_tokens = 0;
  int64_t n_kv = 0;
};

// Builds one forward step over n_tokens tokens that attends to the first
// n_kv cache positions (n_kv ≤ cache.n_ctx, and every position written so far
// plus this step's must be < n_kv). Throws Error (from the op builders) when
// shapes disagree; call validate() on the weights first for clear messages.
LlamaStep build_llama_step(Context& ctx, const LlamaHparams& hp, const LlamaWeights& w, const KvCache& cache,
                           int64_t n_tokens, int64_t n_kv, bool all_logits);

// The mask for tokens at `positions` attending over n_kv cache positions
// (row-major [n_tokens][n_kv], as the mask tensor stores it).
std::vector<float> causal_mask(const std::vector<int32_t>& positions, int64_t n_kv);

// The smallest n_kv that covers `end` positions, rounded up to a multiple of
// `granularity` and capped at n_ctx: steps share a graph until it grows.
int64_t kv_window(int64_t end, int64_t n_ctx, int64_t granularity = 32);

}  // namespace tensorpc
