// The architectures tensorpc runs (see arch.h). Each entry lists only what
// differs from llama; docs/architecture.md ("Architectures") says what each
// field does to the forward pass.
#include "model/arch/arch.h"

namespace tensorpc {

const ArchDescription kArchLlama = {
    .name = "llama",  // Mistral files are llama too, some with a sliding window; Mixtral with experts
    .sliding = SlidingLayers::all,
    .experts = Experts::optional,
};

namespace {

const ArchDescription kArchitectures[] = {
    kArchLlama,
    {
        .name = "qwen2",
        .rope_mode = kRopeNeox,
        .qkv_bias = true,
    },
    {
        .name = "qwen3",
        .rope_mode = kRopeNeox,
        .qk_norm = true,
    },
    {
        .name = "phi3",
        .rope_mode = kRopeNeox,
        .fused_qkv = true,
        .fused_gate_up = true,
        .sliding = SlidingLayers::all,
    },
    {
        // The (1 + w) of gemma's RMSNorm is in the file's norm weights
        // already (GGUF converters add the 1), so its norms are plain.
        .name = "gemma",
        .rope_mode = kRopeNeox,
        .activation = GateActivation::gelu,
        .embedding_scale = true,
    },
    {
        .name = "gemma2",
        .rope_mode = kRopeNeox,
        .post_norms = true,
        .activation = GateActivation::gelu,
        .embedding_scale = true,
        .logit_softcaps = true,
        .sliding = SlidingLayers::even,
        .query_scale = QueryScale::gemma2,
    },
    {
        .name = "qwen2moe",
        .rope_mode = kRopeNeox,
        .qkv_bias = true,
        .experts = Experts::always,
        .expert_weights = ExpertWeights::softmax_all,
        .shared_expert = true,
    },
    {
        .name = "qwen3moe",
        .rope_mode = kRopeNeox,
        .qk_norm = true,
        .experts = Experts::always,
    },
    {
        .name = "gpt-oss",
        .rope_mode = kRopeNeox,
        .qkv_bias = true,
        .activation = GateActivation::clamped,
        .sliding = SlidingLayers::even,
        .attn_output_bias = true,
        .attn_sinks = true,
        .ffn_norm = "post_attention_norm",
        .experts = Experts::always,
        .expert_biases = true,
    },
};

}  // namespace

int tensors_per_layer(const ArchDescription& a) {
  // attn_norm, attn_output, ffn_norm, ffn_up, ffn_down, and what the description adds
  // (experts: the router too, and each part's biases or the shared expert)
  const int ffn = a.experts == Experts::always ? 4 + (a.expert_biases ? 4 : 0) + (a.shared_expert ? 4 : 0)
                                               : 2 + (a.fused_gate_up ? 0 : 1);
  return 3 + ffn + (a.fused_qkv ? 1 : 3) + (a.qkv_bias ? 3 : 0) + (a.qk_norm ? 2 : 0) + (a.post_norms ? 2 : 0) +
         (a.attn_output_bias ? 1 : 0) + (a.attn_sinks ? 1 : 0);
}

std::span<const ArchDescription> architectures() { return kArchitectures; }

const ArchDescription* find_architecture(std::string_view name) {
  for (const ArchDescription& a : kArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string architecture_names() {
  std::string out;
  for (const ArchDescription& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

}  // namespace tensorpc
