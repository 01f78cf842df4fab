// The llama forward pass on the Vulkan device against the CPU device: the
// same weights and cache types on both, a prefill then decode steps, every
// node of both graphs on the Vulkan device (its stream refuses a node it does
// not support).
#include <random>

#include "model/arch/tiny_llama.h"
#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

// The types of a TinyLlama: its weights' (norms are f32), its cache's, and
// the type its weights' values are rounded through (a block type, for f32
// weights holding a block type's values).
struct ModelTypes {
  DType weights = DType::f32;
  DType cache = DType::f32;
  DType values = DType::f32;
};

// Values rounded through `type`.
std::vector<float> rounded(const std::vector<float>& v, DType type) {
  const DTypeTraits& t = traits(type);
  std::vector<uint8_t> bytes(v.size() / static_cast<size_t>(t.block_size) * t.block_bytes);
  t.from_float(v.data(), bytes.data(), static_cast<int64_t>(v.size()));
  std::vector<float> out(v.size());
  t.to_float(bytes.data(), out.data(), static_cast<int64_t>(v.size()));
  return out;
}

// A two-layer model with seeded weights and a cache, in one buffer of a device.
class TinyLlama {
 public:
  TinyLlama(Device& dev, ModelTypes types) : dev_(dev), hp_(tiny_llama_hparams()) {
    std::mt19937 rng(7);
    std::vector<std::pair<Tensor*, std::vector<float>>> values;
    w_ = tiny_llama_weights(hp_, [&](std::initializer_list<int64_t> ne, bool norm) {
      Tensor* t = ctx_.new_tensor(norm ? DType::f32 : types.weights, ne);
      std::normal_distribution<float> d(norm ? 1.0f : 0.0f, norm ? 0.1f : 0.15f);
      std::vector<float> v(static_cast<size_t>(t->nelements()));
      for (float& x : v) x = d(rng);
      values.push_back({t, norm ? std::move(v) : rounded(v, types.values)});
      return t;
    });
    cache_.n_ctx = 64;
    std::vector<Tensor*> all;
    for (auto& [t, v] : values) all.push_back(t);
    for (int l = 0; l < hp_.n_layer; ++l) {
      cache_.k.push_back(ctx_.new_tensor(types.cache, {hp_.kv_dim(), cache_.n_ctx}));
      cache_.v.push_back(ctx_.new_tensor(types.cache, {cache_.n_ctx, hp_.kv_dim()}));
      all.push_back(cache_.k.back());
      all.push_back(cache_.v.back());
    }
    const uint64_t align = std::max<uint64_t>(64, dev.alignment());
    uint64_t bytes = 0;
    for (Tensor* t : all) bytes += (t->nbytes() + align - 1) / align * align;
    buffer_ = dev.allocate(bytes).value();
    EXPECT_TRUE(buffer_->clear(0).ok());  // an empty cache holds zeros
    uint64_t off = 0;
    for (Tensor* t : all) {
      EXPECT_TRUE(buffer_->place(*t, off).ok());
      off += (t->nbytes() + align - 1) / align * align;
    }
    for (auto& [t, v] : values) EXPECT_TRUE(write_from_f32(*t, v).ok());
  }

  // One step of `tokens` from position `pos`; the logits of every token.
  std::vector<float> step(const std::vector<int32_t>& tokens, int pos) {
    return run_llama_step(dev_, hp_, w_, cache_, tokens, pos, /*all_logits=*/true);
  }

 private:
  Device& dev_;
  LlamaHparams hp_;
  Context ctx_;
  LlamaWeights w_;
  KvCache cache_;
  std::unique_ptr<Buffer> buffer_;
};

// Logits of a prefill of 5 tokens, then of 3 decode steps: the model of
// `types` on the Vulkan device against that of `cpu_types` on the CPU.
void expect_same_logits(Device& vulkan, ModelTypes types, ModelTypes cpu_types, Tolerance tol) {
  CpuDevice cpu(CpuDeviceOptions{.threads = 1});
  TinyLlama on_cpu(cpu, cpu_types), on_vulkan(vulkan, types);
  const std::vector<std::vector<int32_t>> steps = {{1, 7, 3, 40, 12}, {5}, {47}, {0}};
  int pos = 0;
  for (const auto& tokens : steps) {
    SCOPED_TRACE("step at " + std::to_string(pos));
    const std::vector<float> want = on_cpu.step(tokens, pos);
    EXPECT_TRUE(all_near(on_vulkan.step(tokens, pos), to_double(want), tol));
    pos += static_cast<int>(tokens.size());
  }
}

TEST(VulkanLlama, PrefillAndDecodeLogitsMatchTheCpuDeviceWithF32Weights) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  expect_same_logits(*dev, {}, {}, {1e-4, 1e-4});
}

TEST(VulkanLlama, PrefillAndDecodeLogitsMatchTheCpuDeviceWithF16WeightsAndCache) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  const ModelTypes f16{DType::f16, DType::f16, DType::f16};
  expect_same_logits(*dev, f16, f16, {1e-3, 1e-3});
}

// Block-typed weights are dequantized and multiplied in f32: the logits are
// the CPU device's with f32 weights of the same values. The CPU device's own
// block-typed products round the activations to 8 bits first, which moves
// these logits (about 1 in size) by up to 0.11.
TEST(VulkanLlama, PrefillAndDecodeLogitsWithBlockTypedWeights) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::q8_0, DType::q4_0}) {
    SCOPED_TRACE(name_of(type));
    const ModelTypes quantized{type, DType::f16, type};
    expect_same_logits(*dev, quantized, {DType::f32, DType::f16, type}, {1e-3, 1e-3});
    expect_same_logits(*dev, quantized, quantized, {5e-2, 1.5e-1});
  }
}

}  // namespace
}  // namespace tensorpc::test
