// Every architecture tensorpc runs, against the straight-loops reference
// (reference_decoder.h): a small random model of each (random_model.h),
// opened from its GGUF bytes, placed on the CPU and run by a Generator —
// a prefill, then decode steps — gives the reference's logits. The RoPE
// variants (rope_freqs.weight, linear, YaRN) the same way. Then the files
// tensorpc refuses, each with an error that names why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "lab/random_model.h"
#include "model/arch/llama_model.h"
#include "model/arch/reference_checks.h"
#include "model/arch/reference_decoder.h"
#include "model/runtime/generator.h"
#include "model/runtime/placement.h"
#include "tensorpc/cpu_device.h"

namespace tensorpc {
namespace {

using reference::expect_logits_close;
using reference::Mat;
using reference::ReferenceConfig;
using reference::ReferenceDecoder;
using reference::ReferenceLayer;

// A small model: two layers (gemma2's window on layer 0, not on 1), GQA.
tools::RandomModelOptions small(const std::string& arch) {
  tools::RandomModelOptions o;
  o.arch = arch;
  o.n_embd = 64;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 96;
  o.n_ctx = 128;
  o.seed = 11;
  return o;
}

// A tensor's f32 values as the reference's doubles, rows [first, first + count)
// of it (all rows when count is 0).
Mat values(const LlamaModel& m, const std::string& name, int64_t first = 0, int64_t count = 0) {
  const GgufTensorInfo* info = m.file().tensor(name);
  EXPECT_NE(info, nullptr) << name;
  if (info == nullptr) return {};
  EXPECT_EQ(info->type, DType::f32) << name;
  const int64_t row = info->ne[0];
  if (count == 0) count = info->nelements() / row;
  std::vector<float> f(static_cast<size_t>(row * count));
  std::memcpy(f.data(), info->bytes.data() + 4 * first * row, 4 * f.size());
  return Mat(f.begin(), f.end());
}

// The reference with the file's weights; `c` says which features it computes.
ReferenceDecoder reference_of(const LlamaModel& m, const ReferenceConfig& c, bool fused_qkv, bool fused_gate_up) {
  ReferenceDecoder r;
  r.c = c;
  const int64_t Q = c.n_head * c.head_dim, KV = c.n_head_kv * c.head_dim;
  r.embd = values(m, "token_embd.weight");
  r.out_norm = values(m, "output_norm.weight");
  r.out = m.file().tensor("output.weight") != nullptr ? values(m, "output.weight") : r.embd;
  for (int64_t l = 0; l < m.hparams().n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    ReferenceLayer L;
    L.attn_norm = values(m, p + "attn_norm.weight");
    if (fused_qkv) {  // q's rows, k's, v's
      L.wq = values(m, p + "attn_qkv.weight", 0, Q);
      L.wk = values(m, p + "attn_qkv.weight", Q, KV);
      L.wv = values(m, p + "attn_qkv.weight", Q + KV, KV);
    } else {
      L.wq = values(m, p + "attn_q.weight");
      L.wk = values(m, p + "attn_k.weight");
      L.wv = values(m, p + "attn_v.weight");
    }
    if (c.qkv_bias) {
      L.bq = values(m, p + "attn_q.bias");
      L.bk = values(m, p + "attn_k.bias");
      L.bv = values(m, p + "attn_v.bias");
    }
    if (c.qk_norm) {
      L.q_norm = values(m, p + "attn_q_norm.weight");
      L.k_norm = values(m, p + "attn_k_norm.weight");
    }
    L.wo = values(m, p + "attn_output.weight");
    if (c.attn_output_bias) L.bo = values(m, p + "attn_output.bias");
    if (c.sinks) L.sinks = values(m, p + "attn_sinks.weight");
    // gpt-oss names its feed-forward norm post_attention_norm
    L.ffn_norm = values(m, p + (m.arch().name == "gpt-oss" ? "post_attention_norm.weight" : "ffn_norm.weight"));
    if (c.n_expert > 0) {
      L.router = values(m, p + "ffn_gate_inp.weight");
      if (c.expert_biases) L.router_b = values(m, p + "ffn_gate_inp.bias");
      // expert e: rows [e * rows, (e + 1) * rows) of each [in, rows, E] tensor
      const int64_t F = c.n_ff_exp, E = c.n_embd;
      for (int64_t e = 0; e < c.n_expert; ++e) {
        L.gate_e.push_back(values(m, p + "ffn_gate_exps.weight", e * F, F));
        L.up_e.push_back(values(m, p + "ffn_up_exps.weight", e * F, F));
        L.down_e.push_back(values(m, p + "ffn_down_exps.weight", e * E, E));
        if (c.expert_biases) {
          L.gate_b.push_back(values(m, p + "ffn_gate_exps.bias", e, 1));
          L.up_b.push_back(values(m, p + "ffn_up_exps.bias", e, 1));
          L.down_b.push_back(values(m, p + "ffn_down_exps.bias", e, 1));
        }
      }
      if (c.n_ff_shexp > 0) {
        L.shexp_gate_inp = values(m, p + "ffn_gate_inp_shexp.weight");
        L.shexp_gate = values(m, p + "ffn_gate_shexp.weight");
        L.shexp_up = values(m, p + "ffn_up_shexp.weight");
        L.shexp_down = values(m, p + "ffn_down_shexp.weight");
      }
    } else if (fused_gate_up) {  // the gate's rows, then up's
      L.gate = values(m, p + "ffn_up.weight", 0, c.n_ff);
      L.up = values(m, p + "ffn_up.weight", c.n_ff, c.n_ff);
    } else {
      L.gate = values(m, p + "ffn_gate.weight");
      L.up = values(m, p + "ffn_up.weight");
    }
    if (c.n_expert == 0) L.down = values(m, p + "ffn_down.weight");
    if (c.post_norms) {
      L.post_attn_norm = values(m, p + "post_attention_norm.weight");
      L.post_ffn_norm = values(m, p + "post_ffw_norm.weight");
    }
    r.layers.push_back(std::move(L));
  }
  return r;
}

// The sizes every case shares, from the options.
ReferenceConfig sizes(const tools::RandomModelOptions& o) {
  ReferenceConfig c;
  c.n_vocab = o.n_vocab;
  c.n_embd = o.n_embd;
  c.n_head = o.n_head;
  c.n_head_kv = o.n_head_kv;
  c.head_dim = o.n_head_dim > 0 ? o.n_head_dim : o.n_embd / o.n_head;
  c.n_ff = o.n_ff;
  c.n_rot = c.head_dim;
  c.freq_base = o.rope_freq_base;
  c.n_ctx_orig = o.n_ctx;
  return c;
}

// Gemma 2 with a window on its even layers and soft caps small enough to
// bend the random model's scores and logits.
std::pair<tools::RandomModelOptions, ReferenceConfig> gemma2_case() {
  auto o = small("gemma2");
  o.n_head_dim = 32;
  o.tied_output = true;
  o.sliding_window = 3;
  o.attn_softcap = 1.5f;
  o.final_softcap = 2.0f;
  ReferenceConfig c = sizes(o);
  c.neox = true;
  c.gelu = true;
  c.embedding_scale = true;
  c.post_norms = true;
  c.attn_softcap = 1.5;
  c.final_softcap = 2.0;
  c.window = 3;
  c.window_even_layers = true;
  return {o, c};
}

// A mixture of experts of each kind: n_expert experts, n_used a token.
std::pair<tools::RandomModelOptions, ReferenceConfig> moe_case(const std::string& arch, int64_t n_expert,
                                                               int64_t n_used) {
  auto o = small(arch);
  o.n_expert = n_expert;
  o.n_expert_used = n_used;
  o.n_ff_exp = arch == "llama" ? o.n_ff : 48;  // Mixtral's experts are feed_forward_length wide
  o.n_ff_shexp = 80;
  ReferenceConfig c = sizes(o);
  c.n_expert = n_expert;
  c.n_expert_used = n_used;
  c.n_ff_exp = o.n_ff_exp;
  c.neox = arch != "llama";
  if (arch == "qwen2moe") {
    c.qkv_bias = true;
    c.softmax_all = true;
    c.n_ff_shexp = o.n_ff_shexp;
  }
  if (arch == "qwen3moe") {
    o.n_head_dim = 32;
    c.head_dim = c.n_rot = 32;
    c.qk_norm = true;
  }
  if (arch == "gpt-oss") {
    o.n_head_dim = 32;  // q is 128 wide in a 64-wide model
    o.sliding_window = 3;
    c.head_dim = c.n_rot = 32;
    c.qkv_bias = true;
    c.attn_output_bias = true;
    c.sinks = true;
    c.expert_biases = true;
    c.clamped = true;
    c.window = 3;
    c.window_even_layers = true;
  }
  return {o, c};
}

// Opens the model, runs a prefill of 7 tokens and 5 decode steps on the CPU,
// and compares every token's logits with the reference's.
void expect_matches_reference(const tools::RandomModelOptions& o, ReferenceConfig c, bool fused_qkv = false,
                              bool fused_gate_up = false) {
  auto bytes = tools::random_model_bytes(o);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto model = LlamaModel::open_memory(bytes.value(), o.arch + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const LlamaModel& m = *model.value();
  ASSERT_EQ(m.arch().name, o.arch);
  if (o.rope_freqs) c.freq_factors = values(m, "rope_freqs.weight");
  ReferenceDecoder ref = reference_of(m, c, fused_qkv, fused_gate_up);

  CpuDevice cpu({.threads = 2});
  PlacementOptions po;
  po.n_ctx = 64;
  auto placement = ModelPlacement::create(m, {&cpu}, po);
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  GeneratorOptions go;
  go.kv_granularity = 16;
  Generator gen(m, *placement.value(), go);

  const std::vector<int32_t> prompt = {1, 17, 5, 300, 22, 9, 64};
  auto prefill = gen.eval_all(prompt);
  ASSERT_TRUE(prefill.ok()) << prefill.status().to_string();
  const auto n_vocab = static_cast<size_t>(o.n_vocab);
  for (size_t t = 0; t < prompt.size(); ++t) {
    const std::vector<float> got(prefill.value().begin() + t * n_vocab, prefill.value().begin() + (t + 1) * n_vocab);
    expect_logits_close(got, ref.forward(prompt[t], static_cast<int>(t)),
                        o.arch + " prefill token " + std::to_string(t));
  }
  int pos = static_cast<int>(prompt.size());
  for (int32_t token : {9, 31, 2, 310, 47}) {
    auto got = gen.eval(std::vector<int32_t>{token});
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    expect_logits_close(got.value(), ref.forward(token, pos), o.arch + " decode at " + std::to_string(pos));
    ++pos;
  }
}

// Three sequences sharing one generator's cache, run in batched steps that
// mix prefills of different lengths with decode steps, one sequence starting
// over mid-way: each entry's logits are the reference's for that sequence
// alone (a reference decoder per sequence).
void expect_batches_match_reference(const tools::RandomModelOptions& o, ReferenceConfig c) {
  auto bytes = tools::random_model_bytes(o);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto model = LlamaModel::open_memory(bytes.value(), o.arch + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const LlamaModel& m = *model.value();
  const ReferenceDecoder fresh = reference_of(m, c, false, false);
  std::vector<ReferenceDecoder> refs(3, fresh);
  std::vector<int> ref_pos(3, 0);

  CpuDevice cpu({.threads = 2});
  PlacementOptions po;
  po.n_ctx = 96;  // 32 positions a sequence
  auto placement = ModelPlacement::create(m, {&cpu}, po);
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  GeneratorOptions go;
  go.kv_granularity = 4;
  go.n_seq = 3;
  Generator gen(m, *placement.value(), go);
  ASSERT_EQ(gen.seq_ctx(), 32);

  // Each step: (sequence, tokens); a sequence of -1 tokens starts over.
  using Entry = std::pair<int64_t, std::vector<int32_t>>;
  const std::vector<std::vector<Entry>> steps = {
      {{0, {1, 17, 5, 300, 22}}, {1, {4, 9, 2}}},
      {{1, {8}}, {0, {31}}, {2, {7, 7, 100, 3}}},
      {{2, {12}}, {0, {2}}},
      {{1, {-1}}},
      {{1, {5, 6}}, {2, {99}}, {0, {47}}},
      {{0, {3}}, {1, {200}}, {2, {1}}},
  };
  for (size_t s = 0; s < steps.size(); ++s) {
    std::vector<SequenceTokens> batch;
    for (const auto& [seq, tokens] : steps[s]) {
      if (tokens[0] == -1) {
        ASSERT_TRUE(gen.rewind(seq, 0).ok());
        refs[static_cast<size_t>(seq)] = fresh;
        ref_pos[static_cast<size_t>(seq)] = 0;
        continue;
      }
      batch.push_back({seq, tokens});
    }
    if (batch.empty()) continue;
    auto got = gen.eval_batch(batch);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    const auto n_vocab = static_cast<size_t>(o.n_vocab);
    ASSERT_EQ(got.value().size(), batch.size() * n_vocab);
    for (size_t e = 0; e < batch.size(); ++e) {
      const auto seq = static_cast<size_t>(batch[e].seq);
      Mat want;
      for (int32_t t : batch[e].tokens) want = refs[seq].forward(t, ref_pos[seq]++);
      const std::vector<float> row(got.value().begin() + e * n_vocab, got.value().begin() + (e + 1) * n_vocab);
      expect_logits_close(row, want, o.arch + " step " + std::to_string(s) + " sequence " + std::to_string(seq));
      EXPECT_EQ(gen.position(batch[e].seq), ref_pos[seq]);
    }
  }
}

// ---- each architecture -------------------------------------------------------

TEST(ArchitectureForward, LlamaMatchesTheReference) {
  const auto o = small("llama");
  expect_matches_reference(o, sizes(o));
}

TEST(ArchitectureForward, MistralSlidingWindowOnLlamaMatchesTheReference) {
  auto o = small("llama");
  o.sliding_window = 4;  // shorter than the 12 positions run: every layer forgets
  ReferenceConfig c = sizes(o);
  c.window = 4;
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, Qwen2WithQkvBiasesMatchesTheReference) {
  auto o = small("qwen2");
  o.rope_freq_base = 1000000.0f;
  o.tied_output = true;
  ReferenceConfig c = sizes(o);
  c.neox = true;
  c.qkv_bias = true;
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, Qwen3WithPerHeadNormsAndItsOwnHeadDimMatchesTheReference) {
  auto o = small("qwen3");
  o.n_head_dim = 24;  // q is 96 wide, the embedding 64
  ReferenceConfig c = sizes(o);
  c.neox = true;
  c.qk_norm = true;
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, Phi3WithFusedMatricesMatchesTheReference) {
  auto o = small("phi3");
  o.sliding_window = 5;
  ReferenceConfig c = sizes(o);
  c.neox = true;
  c.window = 5;
  expect_matches_reference(o, c, /*fused_qkv=*/true, /*fused_gate_up=*/true);
}

TEST(ArchitectureForward, GemmaMatchesTheReference) {
  auto o = small("gemma");
  o.n_head_dim = 32;
  o.tied_output = true;
  ReferenceConfig c = sizes(o);
  c.neox = true;
  c.gelu = true;
  c.embedding_scale = true;
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, Gemma2WithSoftCapsPostNormsAndAlternateWindowsMatchesTheReference) {
  const auto [o, c] = gemma2_case();
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, MixtralExpertsOnLlamaMatchTheReference) {
  const auto [o, c] = moe_case("llama", 6, 2);
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, Qwen2MoeWithASharedExpertAndUnnormalisedWeightsMatchesTheReference) {
  const auto [o, c] = moe_case("qwen2moe", 6, 3);
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, Qwen3MoeMatchesTheReference) {
  const auto [o, c] = moe_case("qwen3moe", 8, 4);
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, GptOssWithSinksBiasesClampedSwigluAndAlternateWindowsMatchesTheReference) {
  const auto [o, c] = moe_case("gpt-oss", 4, 2);
  expect_matches_reference(o, c);
}

TEST(ArchitectureForward, OneExpertATokenMatchesTheReference) {
  const auto [o, c] = moe_case("qwen3moe", 5, 1);
  expect_matches_reference(o, c);
}

TEST(BatchedSequences, MixturesOfExpertsMatchTheReferencePerSequence) {
  for (const char* arch : {"qwen2moe", "gpt-oss"}) {
    const auto [o, c] = moe_case(arch, 6, 2);
    expect_batches_match_reference(o, c);
  }
}

TEST(BatchedSequences, LlamaWithGroupedQueryAttentionMatchesTheReferencePerSequence) {
  const auto o = small("llama");
  expect_batches_match_reference(o, sizes(o));
}

TEST(BatchedSequences, Gemma2SlidingWindowsAndSoftCapsMatchTheReferencePerSequence) {
  const auto [o, c] = gemma2_case();
  expect_batches_match_reference(o, c);
}

TEST(BatchedSequences, ASequencePastItsShareOfTheCacheIsRefusedAndTheOthersGoOn) {
  const auto o = small("llama");
  auto bytes = tools::random_model_bytes(o);
  ASSERT_TRUE(bytes.ok());
  auto model = LlamaModel::open_memory(bytes.value(), "llama.gguf");
  ASSERT_TRUE(model.ok());
  CpuDevice cpu({.threads = 1});
  PlacementOptions po;
  po.n_ctx = 16;
  auto placement = ModelPlacement::create(*model.value(), {&cpu}, po);
  ASSERT_TRUE(placement.ok());
  GeneratorOptions go;
  go.n_seq = 2;
  Generator gen(*model.value(), *placement.value(), go);
  const std::vector<int32_t> nine(9, 5), one = {3};
  const std::vector<SequenceTokens> too_long = {{0, one}, {1, nine}};
  auto refused = gen.eval_batch(too_long);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("do not fit the context of 8"), std::string::npos)
      << refused.status().to_string();
  EXPECT_EQ(gen.position(0), 0);
  const std::vector<SequenceTokens> twice = {{0, one}, {0, one}};
  EXPECT_FALSE(gen.eval_batch(twice).ok());
  const std::vector<SequenceTokens> fine = {{1, one}, {0, one}};
  auto ok = gen.eval_batch(fine);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(gen.position(0), 1);
  EXPECT_EQ(gen.position(1), 1);
}

// ---- RoPE variants -------------------------------------------------------------

TEST(RopeVariants, FrequencyFactorsFromRopeFreqsWeightMatchTheReference) {
  auto o = small("llama");
  o.rope_freqs = true;
  expect_matches_reference(o, sizes(o));  // the factors are read from the file
}

TEST(RopeVariants, LinearScalingMatchesTheReference) {
  auto o = small("llama");
  o.rope_scaling = "linear";
  o.rope_scaling_factor = 4.0f;
  ReferenceConfig c = sizes(o);
  c.freq_scale = 0.25;
  expect_matches_reference(o, c);
}

TEST(RopeVariants, YarnScalingMatchesTheReference) {
  for (const char* arch : {"llama", "qwen2"}) {  // the normal rotation and NeoX's
    auto o = small(arch);
    o.rope_scaling = "yarn";
    o.rope_scaling_factor = 4.0f;
    o.rope_original_context = 32;
    ReferenceConfig c = sizes(o);
    c.neox = std::string(arch) == "qwen2";
    c.qkv_bias = c.neox;
    c.freq_scale = 0.25;
    c.ext_factor = 1.0;
    c.n_ctx_orig = 32;
    expect_matches_reference(o, c);
  }
}

// ---- what is refused -------------------------------------------------------------

std::vector<uint8_t> bytes_of(const tools::RandomModelOptions& o) {
  auto bytes = tools::random_model_bytes(o);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  return bytes.ok() ? bytes.value() : std::vector<uint8_t>{};
}

std::string open_error(const std::vector<uint8_t>& bytes) {
  auto m = LlamaModel::open_memory(bytes, "test.gguf");
  EXPECT_FALSE(m.ok()) << "the file was accepted";
  return m.ok() ? std::string() : m.status().message();
}

// Overwrites the first `from` in the file (a key or tensor name, a string
// value) with `to`, of the same length.
void replace(std::vector<uint8_t>& bytes, const std::string& from, const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  const auto at = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
  ASSERT_NE(at, bytes.end()) << from;
  std::copy(to.begin(), to.end(), at);
}

TEST(ArchitectureRefusals, AnUnknownArchitectureIsRefusedListingTheOnesTensorpcRuns) {
  std::vector<uint8_t> bytes = bytes_of(small("llama"));
  // The value of general.architecture follows its key (type and length between).
  const std::string key = "general.architecture";
  const auto at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(at, bytes.end());
  const auto value = std::search(at, bytes.end(), std::begin("llama"), std::end("llama") - 1);
  std::copy_n("mamba", 5, value);
  const std::string why = open_error(bytes);
  EXPECT_NE(why.find("'mamba'"), std::string::npos) << why;
  EXPECT_NE(why.find("llama, qwen2, qwen3, phi3, gemma, gemma2"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, AnUnimplementedRopeScalingIsRefusedNamingTheKey) {
  auto o = small("phi3");
  o.rope_scaling = "longrope";
  const std::string why = open_error(bytes_of(o));
  EXPECT_NE(why.find("phi3.rope.scaling.type"), std::string::npos) << why;
  EXPECT_NE(why.find("longrope"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, AMissingBiasIsNamed) {
  std::vector<uint8_t> bytes = bytes_of(small("qwen2"));
  replace(bytes, "blk.1.attn_k.bias", "blk.1.attn_k.bixs");
  const std::string why = open_error(bytes);
  EXPECT_NE(why.find("tensor blk.1.attn_k.bias is missing"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, ATensorTheForwardPassWouldIgnoreIsRefused) {
  std::vector<uint8_t> bytes = bytes_of(small("qwen3"));
  replace(bytes, "blk.0.attn_q_norm.weight", "blk.0.attn_q_nxrm.weight");
  EXPECT_NE(open_error(bytes).find("blk.0.attn_q_norm.weight is missing"), std::string::npos);

  auto o = small("llama");
  o.rope_freqs = true;
  bytes = bytes_of(o);
  replace(bytes, "rope_freqs.weight", "rope_factors_long");  // phi3's longrope, here
  const std::string why = open_error(bytes);
  EXPECT_NE(why.find("rope_factors_long"), std::string::npos) << why;
  EXPECT_NE(why.find("longrope"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, AnUnknownKeyUnderTheArchitecturesPrefixIsRefusedNamingIt) {
  std::vector<uint8_t> bytes = bytes_of(small("gemma2"));
  replace(bytes, "gemma2.context_length", "gemma2.context_lengtx");
  const std::string why = open_error(bytes);
  EXPECT_NE(why.find("gemma2.context_lengtx"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, ASlidingWindowWhereTheArchitectureHasNoneIsRefused) {
  auto o = small("qwen2");
  o.sliding_window = 8;
  const std::string why = open_error(bytes_of(o));
  EXPECT_NE(why.find("qwen2.attention.sliding_window"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, ExpertsWhereTheArchitectureHasNoneAreRefused) {
  auto o = small("qwen2");
  o.n_expert = 4;
  const std::string why = open_error(bytes_of(o));
  EXPECT_NE(why.find("qwen2.expert_count is 4"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, AMixtureOfExpertsWithoutExpertsIsRefused) {
  // a qwen3moe file with a dense layout: no expert_count
  auto o = small("qwen3moe");
  o.n_expert = 0;
  const std::string why = open_error(bytes_of(o));
  EXPECT_NE(why.find("qwen3moe.expert_count is missing or 0"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, MoreExpertsUsedThanThereAreIsRefused) {
  auto o = small("qwen3moe");
  o.n_expert = 4;
  o.n_expert_used = 5;
  const std::string why = open_error(bytes_of(o));
  EXPECT_NE(why.find("5 experts used of 4"), std::string::npos) << why;
}

TEST(ArchitectureRefusals, AMissingExpertTensorIsNamed) {
  auto o = small("gpt-oss");
  o.n_expert = 4;
  std::vector<uint8_t> bytes = bytes_of(o);
  replace(bytes, "blk.1.ffn_up_exps.bias", "blk.1.ffn_up_exps.xxxx");
  const std::string why = open_error(bytes);
  EXPECT_TRUE(why.find("blk.1.ffn_up_exps.bias is missing") != std::string::npos ||
              why.find("blk.1.ffn_up_exps.xxxx") != std::string::npos)
      << why;
}

TEST(ArchitectureRefusals, KeysAreReadUnderTheArchitecturesOwnPrefixOnly) {
  // A llama file whose embedding length is under "qwen2.": llama's is missing.
  std::vector<uint8_t> bytes = bytes_of(small("llama"));
  replace(bytes, "llama.embedding_length", "qwen2.embedding_length");
  const std::string why = open_error(bytes);
  EXPECT_NE(why.find("llama.embedding_length"), std::string::npos) << why;
}

}  // namespace
}  // namespace tensorpc
