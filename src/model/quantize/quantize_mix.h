// Quantization mixes: the names a user gives `tensorpc quantize` (Q4_K_M,
// Q8_0, …) and, for each, which type every tensor of a llama-family model
// gets — the same per-tensor choices llama.cpp's llama-quantize makes, so a
// file made here matches one made there in types and `general.file_type`.
//
// The rules, for a tensor that is quantized at all (two or more dims, a name
// ending in "weight" that is not a norm; everything else — norms, qwen2's
// biases, rope_freqs — is kept in f32):
//   - output.weight (token_embd.weight when there is no output): q6_K, or
//     q8_0 for Q8_0; F16/BF16 keep their base type;
//   - attn_v.weight and ffn_down.weight of some layers get more bits in the
//     Q2_K, Q3_K_M, Q4_K_S, Q4_K_M, Q5_K_M, IQ4_NL and IQ4_XS mixes (see
//     choose_tensor_type in quantize_mix.cpp, one line per rule);
//   - attn_output.weight: q3_K in Q2_K, q4_K in Q3_K_M;
//   - mixtures of experts: the experts (ffn_{gate,up,down}_exps) follow the
//     rules of the dense ffn_gate, ffn_up and ffn_down; the router
//     (ffn_gate_inp.weight) stays f32; with exactly 8 experts (Mixtral),
//     attn_k and attn_v get q8_0 and attn_output q5_K in Q2_K, Q3_K_M,
//     Q4_K_S, Q4_K_M and IQ4_NL;
//   - attn_qkv.weight (phi3's fused q, k and v): q4_K in Q3_K_M, q5_K in
//     Q4_K_M, q6_K in Q5_K_M;
//   - everything else, token_embd included: the mix's base type.
// MXFP4_MOE (gpt-oss's own form) has no per-layer rules: the experts'
// matrices (three dims: ffn_{gate,up,down}_exps) are mxfp4, every other
// matrix q8_0.
// A type whose block does not divide the row length falls back to one that
// does (fallback_type), as llama.cpp does.
//
// Pure functions of names and shapes: no files are read here (quantize_model.h
// does the conversion).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tensorpc/dtype.h"

namespace tensorpc {

enum class QuantMix {
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  q8_0,
  q2_K,
  q3_K_M,
  q4_K_S,
  q4_K_M,
  q5_K_S,
  q5_K_M,
  q6_K,
  iq4_nl,
  iq4_xs,
  mxfp4_moe,
  f16,
  bf16,
  f32,
};

struct QuantMixInfo {
  QuantMix mix;
  const char* name;    // as a user types it: "Q4_K_M"
  DType base;          // the type of most matrices
  uint32_t file_type;  // llama.cpp's llama_ftype, written as general.file_type
};

// Every mix, in the order they are listed to users.
std::span<const QuantMixInfo> quant_mixes();
const QuantMixInfo& mix_info(QuantMix mix);
// "q4_k_m", "Q4_K_M": case-insensitive; nullopt for anything else.
std::optional<QuantMix> parse_quant_mix(std::string_view name);
// "Q4_0, Q4_1, …, BF16": for error messages and help.
std::string quant_mix_names();

// What the mix rules need to know of the model.
struct QuantModelShape {
  int64_t n_layer = 0;     // blocks: use_more_bits and the "first layers" rules count in them
  int64_t n_gqa = 1;       // query heads per kv head: Q2_K and IQ4 give attn_v more bits at 4 or more
  bool has_output = true;  // false: token_embd is also the output projection and is treated as output.weight
  int64_t n_expert = 0;    // <arch>.expert_count: 8 gives attention more bits
};

// N of a tensor named "blk.N.…", or -1 for a tensor outside the blocks.
int64_t tensor_layer(std::string_view name);

// Whether a layer of n gets more bits in the _M mixes: the first and last
// eighth, and every third layer between.
bool use_more_bits(int64_t layer, int64_t n_layer);

// The first type after `wanted` whose block divides `row_length`: wanted
// itself when it fits; q2_K, q3_K, iq4_xs → iq4_nl; q4_K → q5_0; q5_K →
// q5_1; q6_K → q8_0; and f16 when even that does not fit (a row that is not
// a multiple of 32).
DType fallback_type(DType wanted, int64_t row_length);

struct TensorTypeChoice {
  DType type;    // what the tensor is written as
  DType wanted;  // what the mix asked for; differs from type after a fallback
  bool fell_back() const { return type != wanted; }
};

// The type of tensor `name` (n_dims dims, rows of row_length) of a model of
// `shape` quantized with `mix`. `current` is its type in the input: i32
// tensors keep it (they hold indices, not weights).
TensorTypeChoice choose_tensor_type(QuantMix mix, const QuantModelShape& shape, std::string_view name, int n_dims,
                                    int64_t row_length, DType current);

}  // namespace tensorpc
