// ArchDescription: how one decoder-only transformer architecture differs
// from llama, written as data.
//
// Every architecture tensorpc runs is the same forward pass (llama.cpp in
// this folder): embedding, then per block RMSNorm → attention → residual add
// → RMSNorm → gated feed-forward → residual add, then RMSNorm and the output
// projection. What differs between architectures is which optional pieces
// that pass has — biases, per-head norms, fused matrices, extra norms, the
// gate's activation, scales and soft-caps, the RoPE rotation — and under
// which GGUF key prefix and tensor names a file stores them. A description
// says exactly that; the graph builder and the loader consult it, so a new
// architecture of this family is a new entry in kArchitectures (arch.cpp),
// not a new forward pass.
//
// Numbers that vary between models of one architecture (sizes, epsilon, RoPE
// base and scaling, soft-cap values, the sliding window) are hyper-parameters
// (LlamaHparams), read from the file under the description's prefix.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "tensorpc/context.h"

namespace tensorpc {

// The activation of the feed-forward gate: act(W_gate h) * (W_up h).
enum class GateActivation {
  silu,     // SwiGLU
  gelu,     // GeGLU, GELU in its tanh approximation
  clamped,  // gpt-oss: SwiGLU with the gate clamped above and up on both sides (Context::swiglu_clamp)
};

// Whether the feed-forward is a mixture of experts: a router (ffn_gate_inp)
// scores the experts for each token, the top `expert_used_count` of
// `expert_count` gated feed-forwards (ffn_{gate,up,down}_exps, one matrix of
// each per expert) run, and their outputs are summed with weights from the
// router.
enum class Experts {
  none,      // dense: a file that gives expert_count is refused
  optional,  // llama: experts when expert_count > 0 (Mixtral), dense otherwise
  always,    // the architecture is a mixture of experts (qwen2moe, qwen3moe, gpt-oss)
};

// How the chosen experts' outputs are weighted.
enum class ExpertWeights {
  // the softmax over the chosen experts' router logits alone (Mixtral,
  // Qwen3-MoE: the softmax over all, renormalised over the chosen; gpt-oss)
  softmax_chosen,
  // each chosen expert's probability in the softmax over all experts, not
  // renormalised (Qwen2-MoE)
  softmax_all,
};

// Which layers attend only within `<arch>.attention.sliding_window` positions
// when the file gives that key (LlamaHparams::n_swa).
enum class SlidingLayers {
  refused,  // the architecture has no sliding window: a file that gives one is refused
  all,      // every layer (Mistral files, which are llama; phi3)
  even,     // layers 0, 2, 4, … (gemma2); the others attend to the whole context
};

// The scale of the attention scores q·k.
enum class QueryScale {
  head_dim,  // 1/sqrt(head_dim)
  // gemma2: 1/sqrt(head_dim), except the 27B layout (46 blocks), whose
  // queries were trained with 1/sqrt(n_embd / n_head)
  gemma2,
};

struct ArchDescription {
  std::string_view name;        // general.architecture, and the prefix of its keys
  int rope_mode = kRopeNormal;  // kRopeNormal: pairs (2i, 2i+1); kRopeNeox: pairs (i, i + n_rot/2)
  bool qkv_bias = false;        // blk.N.attn_{q,k,v}.bias, added to the projections
  bool qk_norm = false;         // blk.N.attn_{q,k}_norm.weight: RMSNorm of each head of q and k, before RoPE
  bool fused_qkv = false;       // blk.N.attn_qkv.weight: the rows of q, k and v in one matrix, in that order
  bool fused_gate_up = false;   // blk.N.ffn_up.weight holds the gate's rows, then the up rows; no ffn_gate
  bool post_norms = false;      // blk.N.post_attention_norm / post_ffw_norm: RMSNorm of each branch before its add
  GateActivation activation = GateActivation::silu;
  bool embedding_scale = false;  // the embedding times sqrt(n_embd)
  bool logit_softcaps = false;   // <arch>.attn_logit_softcapping and <arch>.final_logit_softcapping
  SlidingLayers sliding = SlidingLayers::refused;
  QueryScale query_scale = QueryScale::head_dim;
  bool attn_output_bias = false;  // blk.N.attn_output.bias (gpt-oss)
  bool attn_sinks = false;        // blk.N.attn_sinks.weight: one logit per head that joins its softmax (gpt-oss)
  // The name of the feed-forward's norm in a layer (gpt-oss calls it post_attention_norm).
  std::string_view ffn_norm = "ffn_norm";

  Experts experts = Experts::none;
  ExpertWeights expert_weights = ExpertWeights::softmax_chosen;
  bool expert_biases = false;  // ffn_gate_inp.bias and ffn_{gate,up,down}_exps.bias (gpt-oss)
  // qwen2moe: a shared expert every token runs (ffn_{gate,up,down}_shexp),
  // its output scaled by sigmoid(ffn_gate_inp_shexp · h)
  bool shared_expert = false;
};

// The fewest tensors one layer of the architecture has (llama: 9).
int tensors_per_layer(const ArchDescription& arch);

// The llama description: what a LlamaHparams made by hand describes.
extern const ArchDescription kArchLlama;

// Every architecture tensorpc runs, in the order they are listed to users.
std::span<const ArchDescription> architectures();
// The description of general.architecture `name`; null for one tensorpc does not run.
const ArchDescription* find_architecture(std::string_view name);
// "llama, qwen2, …": for error messages and help.
std::string architecture_names();

}  // namespace tensorpc
