// The Vulkan device's mixture-of-experts ops and attention sinks against the
// CPU device: mul_mat_id for every weight type its shader reads, one token
// and many, ids out of range and through views; swiglu_clamp; sigmoid;
// soft_max with sinks (top_k_ids: vulkan_ops_test.cpp, beside top_k).
#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

constexpr Tolerance kF32{1e-4, 1e-5};
// mul_mat_id of a weight against the CPU device's of the dequantized weight
// (the CPU's own product of a block type rounds b to its 8-bit dot type).
constexpr Tolerance kDequantized{1e-4, 1e-4};

// Every weight type mul_mat_id's shader reads (shaders/quant.glsl).
constexpr DType kExpertTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,   DType::q4_0,
                                  DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K,   DType::q3_K,
                                  DType::q4_K, DType::q5_K, DType::q6_K, DType::iq4_nl, DType::iq4_xs};

// mul_mat_id of experts [K, M, E] of `type` by b [K, n_b, T] and the ids that
// ids_of makes, against the CPU's of the experts dequantized to f32. The i32
// leaves hold i * 5 % index_range.
::testing::AssertionResult mul_mat_id_matches(Device& dev, DType type, int64_t K, int64_t M, int64_t E, int64_t n_b,
                                              int64_t T, const std::function<Tensor*(Context&)>& ids_of,
                                              int32_t index_range) {
  const auto build = [&](bool dequantize) {
    return [&, dequantize](Context& ctx) -> std::vector<Tensor*> {
      Tensor* experts = input(ctx, type, {K, M, E});
      Tensor* b = input(ctx, DType::f32, {K, n_b, T});
      return {ctx.mul_mat_id(dequantize ? ctx.cast(experts, DType::f32) : experts, b, ids_of(ctx))};
    };
  };
  return matches_cpu(dev, build(false), build(true), kDequantized, index_range);
}

// ids [k, T] from a leaf.
std::function<Tensor*(Context&)> leaf_ids(int64_t k, int64_t T) {
  return [=](Context& ctx) { return input(ctx, DType::i32, {k, T}); };
}

// Five experts, three chosen a token, ids i * 5 % 7: 5 and 6 are out of
// range and give rows of zeros. Rows of 256 (one block of the 256-value
// types), 23 of them; one token and three take a workgroup an output, nine
// the tiles.
TEST(VulkanMoeOps, MulMatIdEveryWeightTypeOneSlotRowAndOnePerSlot) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : kExpertTypes) {
    for (int64_t T : {1, 3, 9}) {
      for (int64_t n_b : {int64_t{1}, int64_t{3}}) {
        SCOPED_TRACE(std::string(name_of(type)) + " T " + std::to_string(T) + " n_b " + std::to_string(n_b));
        EXPECT_TRUE(mul_mat_id_matches(*dev, type, 256, 23, 5, n_b, T, leaf_ids(3, T), 7));
      }
    }
  }
}

// Tiles past one each way (150 rows, 2 x 40 pairs) with partial edges, and
// the ids through views: every token the same two experts (a row of ids
// repeated by a zero stride), and ids transposed from [T, k].
TEST(VulkanMoeOps, MulMatIdTilesPastOneTileAndIdsThroughViews) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::f16, DType::q8_0}) {
    for (int64_t T : {1, 40}) {
      SCOPED_TRACE(std::string(name_of(type)) + " T " + std::to_string(T));
      const auto same = [T](Context& ctx) { return ctx.view(input(ctx, DType::i32, {2}), {2, T}, {4, 0}, 0); };
      const auto transposed = [T](Context& ctx) { return ctx.transpose(input(ctx, DType::i32, {T, 2})); };
      EXPECT_TRUE(mul_mat_id_matches(*dev, type, 96, 150, 4, 1, T, same, 4));
      EXPECT_TRUE(mul_mat_id_matches(*dev, type, 96, 150, 4, 2, T, transposed, 5));
      EXPECT_TRUE(mul_mat_id_matches(*dev, type, 96, 150, 4, 2, T, leaf_ids(2, T), 3));
    }
  }
}

// Eight experts, two a token, ids i * 5 % 8: over four tokens every pair
// has an expert of its own.
TEST(VulkanMoeOps, MulMatIdEveryPairADifferentExpert) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int64_t n_b : {int64_t{1}, int64_t{2}}) {
    EXPECT_TRUE(mul_mat_id_matches(*dev, DType::q4_K, 256, 17, 8, n_b, 4, leaf_ids(2, 4), 8));
  }
}

// The router on the device: top_k_ids of its logits, and of the logits plus a
// large bias per expert, which makes every token choose the same two; then
// the experts' products.
TEST(VulkanMoeOps, MulMatIdOfTheDevicesOwnRouterAndOfEveryTokenChoosingTheSameExperts) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int64_t T : {1, 12}) {
    SCOPED_TRACE("T " + std::to_string(T));
    const auto build = [T](bool dequantize) {
      return [=](Context& ctx) -> std::vector<Tensor*> {
        Tensor* x = input(ctx, DType::f32, {64, 1, T});
        Tensor* logits = ctx.mul_mat(input(ctx, DType::f32, {64, 4}), ctx.reshape(x, {64, T}));
        Tensor* ids = ctx.top_k_ids(logits, 2);
        Tensor* same = ctx.top_k_ids(ctx.add(logits, ctx.scale(input(ctx, DType::f32, {4, 1}), 1000.0f)), 2);
        Tensor* experts = input(ctx, DType::q8_0, {64, 40, 4});
        Tensor* w = dequantize ? ctx.cast(experts, DType::f32) : experts;
        return {ids, same, ctx.mul_mat_id(w, x, ids), ctx.mul_mat_id(w, x, same)};
      };
    };
    EXPECT_TRUE(matches_cpu(*dev, build(false), build(true), kDequantized));
  }
}

// Gates and ups in [-10, 10] against a limit of 7, NaN ones (which count as
// the limit), through a transposed view; sigmoid out to where e^-x overflows.
TEST(VulkanMoeOps, SwigluClampBeyondTheLimitAndSigmoid) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  EXPECT_TRUE(same_as_cpu(
      *dev,
      [](Context& ctx) -> std::vector<Tensor*> {
        Tensor* g = ctx.scale(input(ctx, DType::f32, {37, 5}), 10.0f);
        Tensor* u = ctx.scale(input(ctx, DType::f32, {37, 5}), 10.0f);
        Tensor* zeros = ctx.scale(g, 0.0f);
        Tensor* nan = ctx.div(zeros, zeros);
        Tensor* t = ctx.transpose(ctx.scale(input(ctx, DType::f32, {5, 37}), 10.0f));
        return {ctx.swiglu_clamp(g, u, 1.702f, 7.0f),
                ctx.swiglu_clamp(t, u, 0.5f, 2.5f),
                ctx.swiglu_clamp(nan, u, 1.702f, 7.0f),
                ctx.swiglu_clamp(g, nan, 1.702f, 7.0f),
                ctx.sigmoid(g),
                ctx.sigmoid(ctx.scale(g, 20.0f)),
                ctx.sigmoid(t)};
      },
      kF32));
}

// Sinks of heads with and without a mask, and with a mask whose last rows
// are fully masked (all zeros, the sink taking everything); sinks of 20
// and more take most of each row.
TEST(VulkanMoeOps, SoftMaxWithSinksWithAndWithoutMaskAndFullyMaskedRows) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int64_t n : {1, 5, 200}) {
    SCOPED_TRACE("row " + std::to_string(n));
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* x = input(ctx, DType::f32, {n, 6, 3});
          Tensor* sinks = input(ctx, DType::f32, {3});
          Tensor* mask = input(ctx, DType::f32, {n, 6});
          // Row r masks columns below r: rows n and past it, every column.
          Tensor* causal = ctx.cont(ctx.transpose(ctx.diag_mask_inf(input(ctx, DType::f32, {6, n}), 0)));
          return {ctx.soft_max(x, nullptr, 0.5f, sinks), ctx.soft_max(x, mask, 0.125f, sinks),
                  ctx.soft_max(x, causal, 1.0f, sinks), ctx.soft_max(x, causal, 1.0f, ctx.scale(sinks, 20.0f)),
                  ctx.soft_max(ctx.permute(x, 0, 2, 1, 3), nullptr, 1.0f, input(ctx, DType::f32, {6}))};
        },
        kF32));
  }
}

}  // namespace
}  // namespace tensorpc::test
