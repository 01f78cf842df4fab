// Every architecture's forward pass placed wholly on the Vulkan device (the
// only device of its placement: the scheduler refuses a node it cannot put
// there, so every node of every step runs on it) against the same model on
// the CPU device: the logits of a prefill and of decode steps.
#include "lab/random_model.h"
#include "model/arch/llama_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/placement.h"
#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

// The logits of a 7-token prefill (every token's), then of 5 decode steps,
// with the model placed on dev alone.
std::vector<std::vector<float>> logits_on(Device& dev, const LlamaModel& m, DType cache_type) {
  PlacementOptions po;
  po.n_ctx = 64;
  po.cache_type = cache_type;
  auto placement = ModelPlacement::create(m, {&dev}, po);
  EXPECT_TRUE(placement.ok()) << placement.status().to_string();
  if (!placement.ok()) return {};
  GeneratorOptions go;
  go.kv_granularity = 16;
  Generator gen(m, *placement.value(), go);
  std::vector<std::vector<float>> out;
  const std::vector<int32_t> prompt = {1, 17, 5, 300, 22, 9, 64};
  auto prefill = gen.eval_all(prompt);
  EXPECT_TRUE(prefill.ok()) << prefill.status().to_string();
  if (!prefill.ok()) return {};
  out.push_back(std::move(prefill).value());
  for (int32_t token : {9, 31, 2, 310, 47}) {
    auto got = gen.eval(std::vector<int32_t>{token});
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    if (!got.ok()) return {};
    out.push_back(std::move(got).value());
  }
  return out;
}

// Two layers, 64 wide, 4 heads over 2 KV heads, weights of `type`.
tools::RandomModelOptions small(const std::string& arch, DType type) {
  return {.n_layer = 2, .n_ff = 96, .n_ctx = 128, .type = type, .seed = 11, .arch = arch};
}

void expect_same_logits(Device& vulkan, const tools::RandomModelOptions& o, DType cache_type, Tolerance tol) {
  auto bytes = tools::random_model_bytes(o);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto model = LlamaModel::open_memory(bytes.value(), o.arch + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  CpuDevice cpu({.threads = 1});
  const auto want = logits_on(cpu, *model.value(), cache_type);
  const auto got = logits_on(vulkan, *model.value(), cache_type);
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) EXPECT_TRUE(all_near(got[s], to_double(want[s]), tol)) << "step " << s;
}

// Every architecture with its own pieces: sliding windows, biases, per-head
// norms, fused matrices, GELU and soft caps, frequency factors and YaRN.
std::vector<tools::RandomModelOptions> every_architecture(DType type) {
  std::vector<tools::RandomModelOptions> cases;
  cases.push_back(small("llama", type));
  cases.push_back(small("llama", type));
  cases.back().sliding_window = 4;
  cases.back().rope_freqs = true;
  cases.push_back(small("qwen2", type));
  cases.back().rope_scaling = "yarn";
  cases.back().rope_scaling_factor = 4.0f;
  cases.back().rope_original_context = 32;
  cases.push_back(small("qwen3", type));
  cases.back().n_head_dim = 32;
  cases.push_back(small("phi3", type));
  cases.back().sliding_window = 5;
  cases.push_back(small("gemma", type));
  cases.back().n_head_dim = 32;
  cases.back().tied_output = true;
  cases.push_back(small("gemma2", type));
  cases.back().n_head_dim = 32;
  cases.back().tied_output = true;
  cases.back().sliding_window = 3;
  cases.back().attn_softcap = 1.5f;
  cases.back().final_softcap = 2.0f;
  return cases;
}

TEST(VulkanArchitectures, EveryArchitectureWithF32WeightsMatchesTheCpuDevice) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (const auto& o : every_architecture(DType::f32)) {
    SCOPED_TRACE(o.arch);
    expect_same_logits(*dev, o, DType::f32, {1e-4, 1e-4});
    expect_same_logits(*dev, o, DType::f16, {2e-3, 2e-3});
  }
}

// The CPU device rounds activations to 8 bits before each q8_0 product.
TEST(VulkanArchitectures, EveryArchitectureWithQ8_0WeightsStaysNearTheCpuDevice) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (const auto& o : every_architecture(DType::q8_0)) {
    SCOPED_TRACE(o.arch);
    expect_same_logits(*dev, o, DType::f16, {5e-2, 1.5e-1});
  }
}

// Every mixture-of-experts architecture: four experts of 32, two a token
// (qwen2moe with its gated shared expert, gpt-oss with sinks, clamped SwiGLU
// and its experts' biases), the router, top_k_ids and mul_mat_id on the device.
std::vector<tools::RandomModelOptions> every_moe_architecture(DType type) {
  std::vector<tools::RandomModelOptions> cases;
  for (const char* arch : {"llama", "qwen2moe", "qwen3moe", "gpt-oss"}) {
    cases.push_back(small(arch, type));
    cases.back().n_expert = 4;
    cases.back().n_expert_used = 2;
    cases.back().n_ff_exp = 32;
  }
  return cases;
}

TEST(VulkanArchitectures, EveryMixtureOfExpertsArchitectureMatchesTheCpuDevice) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (const auto& o : every_moe_architecture(DType::f32)) {
    SCOPED_TRACE(o.arch);
    expect_same_logits(*dev, o, DType::f32, {1e-4, 1e-4});
  }
  for (const auto& o : every_moe_architecture(DType::q8_0)) {
    SCOPED_TRACE(o.arch + " q8_0");
    expect_same_logits(*dev, o, DType::f16, {5e-2, 1.5e-1});
  }
}

}  // namespace
}  // namespace tensorpc::test
