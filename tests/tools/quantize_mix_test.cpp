// The quantization mixes of `tensorpc quantize` (src/model/quantize/quantize_mix.h):
// names, llama ftypes, which type each tensor gets in each mix — the rules
// of llama.cpp's llama-quantize — and the fallbacks for rows a block does not
// divide.
#include "model/quantize/quantize_mix.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace tensorpc {
namespace {

// A 32-layer model with rows of 4096: every K type fits, so no fallbacks.
constexpr QuantModelShape kBig{.n_layer = 32, .n_gqa = 1, .has_output = true};

DType type_of(QuantMix mix, const std::string& name, const QuantModelShape& shape = kBig, int64_t row = 4096) {
  return choose_tensor_type(mix, shape, name, 2, row, DType::f16).type;
}
std::string blk(int layer, const char* tensor) { return "blk." + std::to_string(layer) + "." + tensor; }

TEST(QuantizeMix, NamesParseInAnyCaseAndUnknownOnesDoNot) {
  EXPECT_EQ(parse_quant_mix("Q4_K_M"), QuantMix::q4_K_M);
  EXPECT_EQ(parse_quant_mix("q4_k_m"), QuantMix::q4_K_M);
  EXPECT_EQ(parse_quant_mix("iq4_Nl"), QuantMix::iq4_nl);
  EXPECT_EQ(parse_quant_mix("bf16"), QuantMix::bf16);
  EXPECT_EQ(parse_quant_mix("f32"), QuantMix::f32);
  for (const char* bad : {"", "Q4_K", "Q3_K_S", "q4_0 ", "f64", "Q4_K_MM"}) EXPECT_FALSE(parse_quant_mix(bad)) << bad;
  EXPECT_EQ(quant_mix_names(),
            "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_M, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, "
            "MXFP4_MOE, F16, "
            "BF16, F32");
  for (const QuantMixInfo& m : quant_mixes()) EXPECT_EQ(parse_quant_mix(m.name), m.mix) << m.name;
}

TEST(QuantizeMix, FileTypesAreLlamaCppFtypes) {
  const std::map<std::string, uint32_t> want = {
      {"Q4_0", 2},    {"Q4_1", 3},    {"Q5_0", 8},       {"Q5_1", 9},    {"Q8_0", 7},    {"Q2_K", 10},
      {"Q3_K_M", 12}, {"Q4_K_S", 14}, {"Q4_K_M", 15},    {"Q5_K_S", 16}, {"Q5_K_M", 17}, {"Q6_K", 18},
      {"IQ4_NL", 25}, {"IQ4_XS", 30}, {"MXFP4_MOE", 38}, {"F16", 1},     {"BF16", 32},   {"F32", 0}};
  for (const QuantMixInfo& m : quant_mixes()) EXPECT_EQ(m.file_type, want.at(m.name)) << m.name;
}

TEST(QuantizeMix, NormsAndOtherOneDimensionalTensorsStayF32AndIndicesKeepTheirType) {
  for (const QuantMixInfo& m : quant_mixes()) {
    EXPECT_EQ(choose_tensor_type(m.mix, kBig, "blk.0.attn_norm.weight", 1, 4096, DType::f16).type, DType::f32);
    EXPECT_EQ(choose_tensor_type(m.mix, kBig, "output_norm.weight", 1, 4096, DType::f32).type, DType::f32);
    EXPECT_EQ(choose_tensor_type(m.mix, kBig, "blk.0.attn_q.bias", 1, 4096, DType::f32).type, DType::f32);
    EXPECT_EQ(choose_tensor_type(m.mix, kBig, "rope_freqs.idx", 2, 64, DType::i32).type, DType::i32);
  }
}

TEST(QuantizeMix, OutputGetsQ6KExceptInQ8_0AndTheFloatMixes) {
  for (const QuantMixInfo& m : quant_mixes()) {
    if (m.mix == QuantMix::mxfp4_moe) continue;  // its own rules, below
    const DType want = m.mix == QuantMix::q8_0 ? DType::q8_0 : is_quantized(m.base) ? DType::q6_K : m.base;
    EXPECT_EQ(type_of(m.mix, "output.weight"), want) << m.name;
    EXPECT_EQ(type_of(m.mix, "token_embd.weight"), m.base) << m.name;  // the embedding is the base type
    EXPECT_EQ(type_of(m.mix, blk(7, "attn_q.weight")), m.base) << m.name;
    EXPECT_EQ(type_of(m.mix, blk(7, "ffn_gate.weight")), m.base) << m.name;
  }
  // Tied embeddings: token_embd is the output projection too.
  const QuantModelShape tied{.n_layer = 32, .n_gqa = 1, .has_output = false};
  EXPECT_EQ(type_of(QuantMix::q4_K_M, "token_embd.weight", tied), DType::q6_K);
}

TEST(QuantizeMix, TheMMixesGiveMoreBitsToAttnVAndFfnDownOnUseMoreBitsLayers) {
  // n = 32: the first 4, the last 4, and every third layer from 6.
  std::vector<int> more;
  for (int i = 0; i < 32; ++i) {
    if (use_more_bits(i, 32)) more.push_back(i);
  }
  EXPECT_EQ(more, (std::vector<int>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  for (QuantMix mix : {QuantMix::q4_K_M, QuantMix::q5_K_M}) {
    const DType base = mix_info(mix).base;
    for (int i = 0; i < 32; ++i) {
      const DType want = use_more_bits(i, 32) ? DType::q6_K : base;
      EXPECT_EQ(type_of(mix, blk(i, "attn_v.weight")), want) << mix_info(mix).name << " layer " << i;
      EXPECT_EQ(type_of(mix, blk(i, "ffn_down.weight")), want) << mix_info(mix).name << " layer " << i;
      EXPECT_EQ(type_of(mix, blk(i, "attn_k.weight")), base);
    }
  }
}

TEST(QuantizeMix, Q3_K_MQ4_K_SAndQ2_KFollowLlamaQuantize) {
  for (int i = 0; i < 32; ++i) {
    // Q3_K_M: attn_v q5_K on the first two layers, else q4_K; ffn_down q5_K below n/16, else q4_K.
    EXPECT_EQ(type_of(QuantMix::q3_K_M, blk(i, "attn_v.weight")), i < 2 ? DType::q5_K : DType::q4_K) << i;
    EXPECT_EQ(type_of(QuantMix::q3_K_M, blk(i, "ffn_down.weight")), i < 2 ? DType::q5_K : DType::q4_K) << i;
    EXPECT_EQ(type_of(QuantMix::q3_K_M, blk(i, "attn_output.weight")), DType::q4_K);
    EXPECT_EQ(type_of(QuantMix::q3_K_M, blk(i, "attn_q.weight")), DType::q3_K);
    // Q4_K_S: q5_K for attn_v of the first four layers and ffn_down below n/8.
    EXPECT_EQ(type_of(QuantMix::q4_K_S, blk(i, "attn_v.weight")), i < 4 ? DType::q5_K : DType::q4_K) << i;
    EXPECT_EQ(type_of(QuantMix::q4_K_S, blk(i, "ffn_down.weight")), i < 4 ? DType::q5_K : DType::q4_K) << i;
    // Q5_K_S, Q6_K: nothing but the output changes.
    EXPECT_EQ(type_of(QuantMix::q5_K_S, blk(i, "attn_v.weight")), DType::q5_K);
    EXPECT_EQ(type_of(QuantMix::q6_K, blk(i, "ffn_down.weight")), DType::q6_K);
    // Q2_K: attn_v q3_K (q4_K with 4+ query heads per kv head), ffn_down and attn_output q3_K.
    EXPECT_EQ(type_of(QuantMix::q2_K, blk(i, "attn_v.weight")), DType::q3_K);
    EXPECT_EQ(type_of(QuantMix::q2_K, blk(i, "ffn_down.weight")), DType::q3_K);
    EXPECT_EQ(type_of(QuantMix::q2_K, blk(i, "attn_output.weight")), DType::q3_K);
    EXPECT_EQ(type_of(QuantMix::q2_K, blk(i, "ffn_up.weight")), DType::q2_K);
  }
  const QuantModelShape gqa8{.n_layer = 32, .n_gqa = 8, .has_output = true};
  EXPECT_EQ(type_of(QuantMix::q2_K, blk(5, "attn_v.weight"), gqa8), DType::q4_K);
  // IQ4_NL and IQ4_XS: attn_v q5_K with 4+ query heads per kv head, ffn_down q5_K below n/8.
  for (QuantMix mix : {QuantMix::iq4_nl, QuantMix::iq4_xs}) {
    EXPECT_EQ(type_of(mix, blk(5, "attn_v.weight"), gqa8), DType::q5_K);
    EXPECT_EQ(type_of(mix, blk(5, "attn_v.weight")), mix_info(mix).base);
    EXPECT_EQ(type_of(mix, blk(3, "ffn_down.weight")), DType::q5_K);
    EXPECT_EQ(type_of(mix, blk(4, "ffn_down.weight")), mix_info(mix).base);
  }
  // MXFP4_MOE: the experts mxfp4, every other matrix q8_0 (the output too), no per-layer exceptions.
  for (const char* name : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
    EXPECT_EQ(type_of(QuantMix::mxfp4_moe, blk(0, name), gqa8), DType::mxfp4) << name;
  }
  for (const char* name : {"attn_v.weight", "ffn_down.weight", "attn_output.weight", "ffn_up_shexp.weight"}) {
    EXPECT_EQ(type_of(QuantMix::mxfp4_moe, blk(0, name), gqa8), DType::q8_0) << name;
  }
  EXPECT_EQ(type_of(QuantMix::mxfp4_moe, "output.weight", gqa8), DType::q8_0);
  EXPECT_EQ(type_of(QuantMix::mxfp4_moe, "token_embd.weight", gqa8), DType::q8_0);
}

TEST(QuantizeMix, RowsABlockDoesNotDivideFallBackAsLlamaQuantizeDoes) {
  EXPECT_EQ(fallback_type(DType::q4_K, 4096), DType::q4_K);  // fits: no fallback
  EXPECT_EQ(fallback_type(DType::q2_K, 128), DType::iq4_nl);
  EXPECT_EQ(fallback_type(DType::q3_K, 128), DType::iq4_nl);
  EXPECT_EQ(fallback_type(DType::iq4_xs, 128), DType::iq4_nl);
  EXPECT_EQ(fallback_type(DType::q4_K, 384), DType::q5_0);
  EXPECT_EQ(fallback_type(DType::q5_K, 128), DType::q5_1);
  EXPECT_EQ(fallback_type(DType::q6_K, 128), DType::q8_0);
  for (DType t : {DType::q6_K, DType::q4_K, DType::q8_0, DType::q4_0, DType::iq4_nl}) {
    EXPECT_EQ(fallback_type(t, 48), DType::f16) << name_of(t);  // not a multiple of 32
  }
  EXPECT_EQ(fallback_type(DType::f16, 7), DType::f16);
  const TensorTypeChoice c = choose_tensor_type(QuantMix::q4_K_M, kBig, "blk.9.attn_q.weight", 2, 128, DType::f16);
  EXPECT_TRUE(c.fell_back());
  EXPECT_EQ(c.wanted, DType::q4_K);
  EXPECT_EQ(c.type, DType::q5_0);
}

// Other architectures' tensors: phi3's fused q, k, v a step above the base
// in the K mixes (as llama-quantize does), its fused gate and up like ffn_up;
// qwen2's biases and qwen3's per-head norms (one dim) stay f32.
TEST(QuantizeMix, FusedAttentionGetsMoreBitsAndBiasesAndHeadNormsStayF32) {
  EXPECT_EQ(type_of(QuantMix::q4_K_M, blk(3, "attn_qkv.weight")), DType::q5_K);
  EXPECT_EQ(type_of(QuantMix::q5_K_M, blk(3, "attn_qkv.weight")), DType::q6_K);
  EXPECT_EQ(type_of(QuantMix::q3_K_M, blk(3, "attn_qkv.weight")), DType::q4_K);
  EXPECT_EQ(type_of(QuantMix::q8_0, blk(3, "attn_qkv.weight")), DType::q8_0);
  EXPECT_EQ(type_of(QuantMix::q4_K_M, blk(3, "ffn_up.weight")), DType::q4_K);
  for (const char* vec : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_q_norm.weight", "post_ffw_norm.weight"}) {
    EXPECT_EQ(choose_tensor_type(QuantMix::q4_K_M, kBig, blk(0, vec), 1, 128, DType::f32).type, DType::f32) << vec;
  }
  EXPECT_EQ(choose_tensor_type(QuantMix::q4_0, kBig, "rope_freqs.weight", 1, 64, DType::f32).type, DType::f32);
}

TEST(QuantizeMix, ExpertsFollowTheDenseRulesAndTheRouterStaysF32) {
  constexpr QuantModelShape kMoe{.n_layer = 48, .n_gqa = 8, .has_output = true, .n_expert = 128};
  const auto exps = [&](QuantMix mix, int layer, const char* tensor) {
    return choose_tensor_type(mix, kMoe, blk(layer, tensor), 3, 2048, DType::bf16).type;
  };
  // ffn_down_exps: the ffn_down rules (q6_K on use_more_bits layers in Q4_K_M)
  EXPECT_EQ(exps(QuantMix::q4_K_M, 0, "ffn_down_exps.weight"), DType::q6_K);
  EXPECT_EQ(exps(QuantMix::q4_K_M, 7, "ffn_down_exps.weight"), DType::q4_K);
  EXPECT_EQ(exps(QuantMix::q2_K, 7, "ffn_down_exps.weight"), DType::q3_K);
  EXPECT_EQ(exps(QuantMix::q4_K_M, 7, "ffn_gate_exps.weight"), DType::q4_K);
  EXPECT_EQ(exps(QuantMix::q8_0, 7, "ffn_up_exps.weight"), DType::q8_0);
  for (QuantMix mix : {QuantMix::q4_0, QuantMix::q4_K_M, QuantMix::iq4_xs}) {
    EXPECT_EQ(choose_tensor_type(mix, kMoe, blk(5, "ffn_gate_inp.weight"), 2, 2048, DType::bf16).type, DType::f32);
  }
  // 128 experts: attention as in a dense model
  EXPECT_EQ(type_of(QuantMix::q4_K_M, blk(5, "attn_k.weight"), kMoe), DType::q4_K);
}

TEST(QuantizeMix, EightExpertsGiveAttentionMoreBits) {
  constexpr QuantModelShape kMixtral{.n_layer = 32, .n_gqa = 4, .has_output = true, .n_expert = 8};
  for (QuantMix mix : {QuantMix::q4_0, QuantMix::q2_K, QuantMix::q4_K_M, QuantMix::iq4_xs}) {
    EXPECT_EQ(type_of(mix, blk(9, "attn_v.weight"), kMixtral), DType::q8_0);
    EXPECT_EQ(type_of(mix, blk(9, "attn_k.weight"), kMixtral), DType::q8_0);
  }
  EXPECT_EQ(type_of(QuantMix::q4_K_M, blk(9, "attn_output.weight"), kMixtral), DType::q5_K);
  EXPECT_EQ(type_of(QuantMix::q2_K, blk(9, "attn_output.weight"), kMixtral), DType::q5_K);
  EXPECT_EQ(type_of(QuantMix::q5_K_M, blk(9, "attn_output.weight"), kMixtral), DType::q5_K);
  EXPECT_EQ(type_of(QuantMix::q8_0, blk(9, "attn_output.weight"), kMixtral), DType::q8_0);
  EXPECT_EQ(type_of(QuantMix::q4_K_M, blk(9, "attn_q.weight"), kMixtral), DType::q4_K);
}

}  // namespace
}  // namespace tensorpc
