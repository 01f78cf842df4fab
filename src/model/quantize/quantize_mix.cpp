// The quantization mixes and their per-tensor rules (see quantize_mix.h).
#include "model/quantize/quantize_mix.h"

#include <cctype>
#include <charconv>

namespace tensorpc {
namespace {

// llama.cpp's llama_ftype numbers.
constexpr QuantMixInfo kMixes[] = {
    {QuantMix::q4_0, "Q4_0", DType::q4_0, 2},
    {QuantMix::q4_1, "Q4_1", DType::q4_1, 3},
    {QuantMix::q5_0, "Q5_0", DType::q5_0, 8},
    {QuantMix::q5_1, "Q5_1", DType::q5_1, 9},
    {QuantMix::q8_0, "Q8_0", DType::q8_0, 7},
    {QuantMix::q2_K, "Q2_K", DType::q2_K, 10},
    {QuantMix::q3_K_M, "Q3_K_M", DType::q3_K, 12},
    {QuantMix::q4_K_S, "Q4_K_S", DType::q4_K, 14},
    {QuantMix::q4_K_M, "Q4_K_M", DType::q4_K, 15},
    {QuantMix::q5_K_S, "Q5_K_S", DType::q5_K, 16},
    {QuantMix::q5_K_M, "Q5_K_M", DType::q5_K, 17},
    {QuantMix::q6_K, "Q6_K", DType::q6_K, 18},
    {QuantMix::iq4_nl, "IQ4_NL", DType::iq4_nl, 25},
    {QuantMix::iq4_xs, "IQ4_XS", DType::iq4_xs, 30},
    {QuantMix::mxfp4_moe, "MXFP4_MOE", DType::mxfp4, 38},
    {QuantMix::f16, "F16", DType::f16, 1},
    {QuantMix::bf16, "BF16", DType::bf16, 32},
    {QuantMix::f32, "F32", DType::f32, 0},
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// The type the mix asks for, before any fallback (llama.cpp's llama_tensor_get_type for
// the llama architecture, with no importance matrix).
DType wanted_type(QuantMix mix, const QuantModelShape& shape, std::string_view name) {
  const DType base = mix_info(mix).base;
  if (mix == QuantMix::f16 || mix == QuantMix::bf16 || mix == QuantMix::f32) return base;
  const int64_t n = shape.n_layer;
  const int64_t i = tensor_layer(name);
  using M = QuantMix;

  if (mix == M::mxfp4_moe) return contains(name, "_exps.") ? DType::mxfp4 : DType::q8_0;
  if (name == "output.weight" || (!shape.has_output && name == "token_embd.weight")) {
    return mix == M::q8_0 ? DType::q8_0 : DType::q6_K;
  }
  // Mixtral's attention is a small part of a model of 8 experts: more bits cost little.
  const bool eight_experts = shape.n_expert == 8;
  if (eight_experts && (ends_with(name, "attn_v.weight") || ends_with(name, "attn_k.weight"))) return DType::q8_0;
  if (ends_with(name, "attn_v.weight")) {
    if (mix == M::q2_K) return shape.n_gqa >= 4 ? DType::q4_K : DType::q3_K;
    if (mix == M::q3_K_M) return i < 2 ? DType::q5_K : DType::q4_K;
    if ((mix == M::iq4_nl || mix == M::iq4_xs) && shape.n_gqa >= 4) return DType::q5_K;
    if ((mix == M::q4_K_M || mix == M::q5_K_M) && use_more_bits(i, n)) return DType::q6_K;
    if (mix == M::q4_K_S && i < 4) return DType::q5_K;
    return base;
  }
  if (contains(name, "ffn_down")) {
    if (mix == M::q2_K) return DType::q3_K;
    if (mix == M::q3_K_M) return i < n / 16 ? DType::q5_K : DType::q4_K;
    if ((mix == M::q4_K_M || mix == M::q5_K_M) && use_more_bits(i, n)) return DType::q6_K;
    if ((mix == M::iq4_nl || mix == M::iq4_xs) && i < n / 8) return DType::q5_K;
    if (mix == M::q4_K_S && i < n / 8) return DType::q5_K;
    return base;
  }
  if (ends_with(name, "attn_qkv.weight")) {  // phi3's fused q, k, v: a step up in the K mixes
    if (mix == M::q3_K_M) return DType::q4_K;
    if (mix == M::q4_K_M) return DType::q5_K;
    if (mix == M::q5_K_M) return DType::q6_K;
    return base;
  }
  if (ends_with(name, "attn_output.weight")) {
    if (eight_experts) {
      const bool bumped =
          mix == M::q2_K || mix == M::q3_K_M || mix == M::q4_K_S || mix == M::q4_K_M || mix == M::iq4_nl;
      return bumped ? DType::q5_K : base;
    }
    if (mix == M::q2_K) return DType::q3_K;
    if (mix == M::q3_K_M) return DType::q4_K;
  }
  return base;
}

}  // namespace

std::span<const QuantMixInfo> quant_mixes() { return kMixes; }

const QuantMixInfo& mix_info(QuantMix mix) {
  for (const QuantMixInfo& m : kMixes) {
    if (m.mix == mix) return m;
  }
  return kMixes[0];  // unreachable: every enumerator has an entry
}

std::optional<QuantMix> parse_quant_mix(std::string_view name) {
  for (const QuantMixInfo& m : kMixes) {
    const std::string_view want = m.name;
    if (want.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < want.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == static_cast<unsigned char>(want[i]);
    }
    if (same) return m.mix;
  }
  return std::nullopt;
}

std::string quant_mix_names() {
  std::string out;
  for (const QuantMixInfo& m : kMixes) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

int64_t tensor_layer(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int64_t layer = -1;
  const char* end = name.data() + name.size();
  const auto [p, ec] = std::from_chars(name.data() + 4, end, layer);
  return ec == std::errc() && p != end && *p == '.' ? layer : -1;
}

bool use_more_bits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

DType fallback_type(DType wanted, int64_t row_length) {
  if (row_length % block_size(wanted) == 0) return wanted;
  DType next = DType::f16;
  switch (wanted) {
    case DType::q2_K:
    case DType::q3_K:
    case DType::iq4_xs: next = DType::iq4_nl; break;
    case DType::q4_K: next = DType::q5_0; break;
    case DType::q5_K: next = DType::q5_1; break;
    case DType::q6_K: next = DType::q8_0; break;
    default: break;
  }
  return row_length % block_size(next) == 0 ? next : DType::f16;
}

TensorTypeChoice choose_tensor_type(QuantMix mix, const QuantModelShape& shape, std::string_view name, int n_dims,
                                    int64_t row_length, DType current) {
  if (current == DType::i32) return {current, current};
  // The router (ffn_gate_inp) picks experts by small differences of its
  // logits: it is kept exact.
  const bool is_matrix = n_dims >= 2 && ends_with(name, "weight") && !ends_with(name, "_norm.weight") &&
                         !ends_with(name, "ffn_gate_inp.weight");
  if (!is_matrix) return {DType::f32, DType::f32};
  const DType wanted = wanted_type(mix, shape, name);
  return {fallback_type(wanted, row_length), wanted};
}

}  // namespace tensorpc
