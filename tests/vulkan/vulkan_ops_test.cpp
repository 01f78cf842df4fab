// The Vulkan device's ops against the CPU device: odd shapes, views,
// broadcasts, one token and many, each within a tolerance for its types.
#include <functional>

#include "tensorpc/scheduler.h"
#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

constexpr Tolerance kF32{1e-4, 1e-5};
constexpr Tolerance kF16{2e-3, 1e-4};

using BinaryBuilder = Tensor* (Context::*)(Tensor*, Tensor*);

TEST(VulkanOps, BinaryOpsBroadcastBOverRowsAndDims23) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  const Shape a_shape = {37, 5, 3, 2};
  const std::vector<Shape> b_shapes = {{37, 5, 3, 2}, {37, 1, 1, 1}, {1, 5, 3, 2}, {37, 5, 1, 2}, {37, 1, 3, 1}};
  for (BinaryBuilder op : {&Context::add, &Context::sub, &Context::mul}) {
    for (const Shape& bs : b_shapes) {
      SCOPED_TRACE("b " + shape_str(bs));
      EXPECT_TRUE(same_as_cpu(
          *dev,
          [&](Context& ctx) -> std::vector<Tensor*> {
            return {(ctx.*op)(input(ctx, DType::f32, a_shape), input(ctx, DType::f32, bs))};
          },
          kF32));
    }
  }
}

TEST(VulkanOps, DivScaleAndActivationsOnATransposedView) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  EXPECT_TRUE(same_as_cpu(
      *dev,
      [](Context& ctx) -> std::vector<Tensor*> {
        Tensor* x = ctx.transpose(input(ctx, DType::f32, {13, 29}));  // [29, 13], strided rows
        Tensor* b = input(ctx, DType::f32, {29, 1});
        return {ctx.div(x, ctx.add(ctx.mul(b, b), ctx.scale(ctx.silu(b), 0.0f))),
                ctx.scale(x, -2.5f),
                ctx.silu(x),
                ctx.gelu(x),
                ctx.tanh(ctx.scale(x, 3.0f)),
                ctx.swiglu(x, ctx.cont(x))};
      },
      kF32));
}

TEST(VulkanOps, RmsNormAndNormOnOddRows) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int64_t n : {1, 7, 129, 1000}) {
    SCOPED_TRACE("row " + std::to_string(n));
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* x = input(ctx, DType::f32, {n, 3, 2});
          return {ctx.rms_norm(x, 1e-6f), ctx.norm(x, 1e-5f), ctx.rms_norm(ctx.permute(x, 0, 2, 1, 3), 1e-6f)};
        },
        kF32));
  }
}

TEST(VulkanOps, SoftMaxWithScaleAndMaskBroadcastOverDims23) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int64_t n : {1, 5, 200}) {
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* x = input(ctx, DType::f32, {n, 4, 3});
          Tensor* mask = input(ctx, DType::f32, {n, 6});
          return {ctx.soft_max(x, nullptr, 0.5f), ctx.soft_max(x, mask, 0.125f)};
        },
        kF32));
  }
}

TEST(VulkanOps, GetRowsFromF32AndF16) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::f32, DType::f16}) {
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* table = input(ctx, DType::f32, {19, 11, 3});
          Tensor* typed = type == DType::f32 ? table : ctx.cast(table, type);
          return {ctx.get_rows(typed, input(ctx, DType::i32, {6, 3})),
                  ctx.get_rows(typed, input(ctx, DType::i32, {1, 1}))};
        },
        kF32, /*index_range=*/11));
  }
}

TEST(VulkanOps, CpyCastsBetweenF32F16AndBf16ThroughViews) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(name_of(type));
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* x = input(ctx, DType::f32, {9, 7, 5});
          Tensor* half = ctx.cast(ctx.permute(x, 2, 0, 1, 3), type);
          Tensor* back = ctx.cast(ctx.transpose(half), DType::f32);
          return {back, ctx.cont(ctx.permute(x, 1, 2, 0, 3)), ctx.cast(ctx.view(x, {4, 7}, {4, 9 * 4}, 8), DType::f32),
                  ctx.cast(ctx.cast(x, DType::f16), DType::bf16)};
        },
        type == DType::f16 ? kF16 : Tolerance{0, 0}));
  }
}

// K of 67 (no run of b aligned), and 66 with b's rows 68 apart (aligned
// vec4s up to a tail of 2).
TEST(VulkanOps, MulMatF32AndF16OneTokenAndMany) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::f32, DType::f16}) {
    for (int64_t k : {67, 66}) {
      for (int64_t n : {1, 3, 17, 40}) {
        SCOPED_TRACE(std::string(name_of(type)) + " K " + std::to_string(k) + " N " + std::to_string(n));
        EXPECT_TRUE(same_as_cpu(*dev,
                                [&](Context& ctx) -> std::vector<Tensor*> {
                                  Tensor* w = input(ctx, DType::f32, {k, 23});
                                  Tensor* typed = type == DType::f32 ? w : ctx.cast(w, type);
                                  Tensor* b = k == 67
                                                  ? input(ctx, DType::f32, {k, n})
                                                  : ctx.view(input(ctx, DType::f32, {68, n}), {k, n}, {4, 4 * 68}, 0);
                                  return {ctx.mul_mat(typed, b)};
                                },
                                {1e-4, 1e-4}));
      }
    }
  }
}

// The matrix-vector path's groups of rows spread over x and y where x's
// group count (65,535 on most devices) is not enough: more rows than a
// vocabulary has.
TEST(VulkanOps, MulMatOfMoreRowsThanOneDimensionsGroupsHolds) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  EXPECT_TRUE(same_as_cpu(
      *dev,
      [&](Context& ctx) -> std::vector<Tensor*> {
        Tensor* a = ctx.cast(input(ctx, DType::f32, {16, 600000}), DType::f16);
        Tensor* y = ctx.mul_mat(a, input(ctx, DType::f32, {16, 1}));
        EXPECT_TRUE(dev->supports(*y));
        return {y};
      },
      kF16));
}

TEST(VulkanOps, MulMatBroadcastsAOverDims2And3) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int64_t n : {1, 9}) {
    EXPECT_TRUE(same_as_cpu(*dev,
                            [&](Context& ctx) -> std::vector<Tensor*> {
                              Tensor* a = input(ctx, DType::f32, {32, 10, 2, 1});
                              Tensor* b = input(ctx, DType::f32, {32, n, 4, 3});
                              return {ctx.mul_mat(a, b),
                                      ctx.mul_mat(ctx.cast(a, DType::f16),
                                                  ctx.permute(input(ctx, DType::f32, {32, 4, n, 3}), 0, 2, 1, 3))};
                            },
                            {1e-4, 1e-4}));
  }
}

// The angle is a float on the device and a double on the CPU: at positions
// below 1000 they differ by under 1e-4 radians.
constexpr Tolerance kRope{1e-4, 3e-4};

// 3 f^2 + 1: frequency factors in [1, 4] from a leaf in [-1, 1].
Tensor* frequency_factors(Context& ctx, int64_t n) {
  Tensor* f = input(ctx, DType::f32, {n});
  return ctx.add(ctx.scale(ctx.mul(f, f), 3.0f), ctx.div(f, f));
}

TEST(VulkanOps, RopeNormalAndNeoxWholeAndPartialHeadsOneTokenAndMany) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int mode : {kRopeNormal, kRopeNeox}) {
    for (int64_t tokens : {1, 7}) {
      SCOPED_TRACE("mode " + std::to_string(mode) + " tokens " + std::to_string(tokens));
      EXPECT_TRUE(same_as_cpu(
          *dev,
          [&](Context& ctx) -> std::vector<Tensor*> {
            Tensor* x = input(ctx, DType::f32, {18, 3, tokens});
            Tensor* pos = input(ctx, DType::i32, {tokens});
            // A head-major view: x's dims 1 and 2 swapped, as a K cache read back.
            Tensor* strided = ctx.permute(input(ctx, DType::f32, {18, tokens, 3}), 0, 2, 1, 3);
            return {ctx.rope(x, pos, 18, mode), ctx.rope(x, pos, 10, mode, 500000.0f, 0.25f),
                    ctx.rope(strided, pos, 18, mode, 10000.0f)};
          },
          kRope, /*index_range=*/997));
    }
  }
}

// At positions up to 32k the device's float angle (position times a float
// rate, brought into [-pi, pi]) moves the results from the CPU device's
// (double) by under 1e-4 on lavapipe.
TEST(VulkanOps, RopeAtPositionsUpTo32kStaysWithinTheFloatAngleError) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  EXPECT_TRUE(same_as_cpu(
      *dev,
      [](Context& ctx) -> std::vector<Tensor*> {
        return {ctx.rope(input(ctx, DType::f32, {8, 1, 6600}), input(ctx, DType::i32, {6600}), 8, kRopeNeox)};
      },
      {0, 3e-4}, /*index_range=*/32768));
}

TEST(VulkanOps, RopeWithFrequencyFactorsAndYarn) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int mode : {kRopeNormal, kRopeNeox}) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* x = input(ctx, DType::f32, {32, 2, 5});
          Tensor* pos = input(ctx, DType::i32, {5});
          RopeParams yarn{.n_dims = 32,
                          .mode = mode,
                          .freq_base = 10000.0f,
                          .freq_scale = 0.25f,
                          .n_ctx_orig = 64,
                          .ext_factor = 1.0f,
                          .attn_factor = 0.9f};
          RopeParams partial{.n_dims = 24, .mode = mode, .freq_base = 10000.0f, .attn_factor = 1.5f};
          return {ctx.rope(x, pos, RopeParams{.n_dims = 32, .mode = mode}, frequency_factors(ctx, 16)),
                  ctx.rope(x, pos, yarn), ctx.rope(x, pos, yarn, frequency_factors(ctx, 16)),
                  ctx.rope(x, pos, partial, frequency_factors(ctx, 12))};
        },
        kRope, /*index_range=*/997));
  }
}

TEST(VulkanOps, SetRowsWritesEveryCacheTypeAndSkipsRowsOutsideIt) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
    SCOPED_TRACE(name_of(type));
    const bool quantized = is_quantized(type);
    // Indices 0, 5, 10, 4, 9, 3 into 7 rows: 10 and 9 are skipped. Rows of 96:
    // three blocks of a block type. bf16 and the block types are rounded as
    // the CPU device rounds them, bit for bit.
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* rows = input(ctx, DType::i32, {6});
          Tensor* one = input(ctx, DType::i32, {1});
          std::vector<Tensor*> out = {ctx.set_rows(input(ctx, type, {96, 7}), input(ctx, DType::f32, {96, 6}), rows),
                                      ctx.set_rows(input(ctx, type, {96, 7}), input(ctx, DType::f32, {96, 1}), one)};
          if (quantized) {  // blocks of zeros: d 0
            out.push_back(
                ctx.set_rows(input(ctx, type, {64, 7}), ctx.scale(input(ctx, DType::f32, {64, 6}), 0.0f), rows));
          } else {  // a row lands as a column
            Tensor* transposed_cache = ctx.transpose(input(ctx, type, {7, 19}));
            out.push_back(ctx.set_rows(transposed_cache, ctx.transpose(input(ctx, DType::f32, {6, 19})), rows));
          }
          return out;
        },
        type == DType::f16 ? kF16 : Tolerance{0, 0}, /*index_range=*/11));
  }
}

TEST(VulkanOps, DiagMaskInfKeepsColumnsUpToNPastPlusRow) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int n_past : {0, 3, 40}) {
    SCOPED_TRACE("n_past " + std::to_string(n_past));
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* x = input(ctx, DType::f32, {13, 5, 3});
          return {ctx.diag_mask_inf(x, n_past), ctx.diag_mask_inf(ctx.permute(x, 0, 2, 1, 3), n_past)};
        },
        kF32));
  }
}

TEST(VulkanOps, ConcatF32AndI32AlongEachDim) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::f32, DType::i32}) {
    for (int dim = 0; dim < 4; ++dim) {
      SCOPED_TRACE(std::string(name_of(type)) + " dim " + std::to_string(dim));
      std::array<int64_t, 4> a_shape = {5, 3, 2, 2}, b_shape = a_shape;
      b_shape[static_cast<size_t>(dim)] = 3;
      EXPECT_TRUE(same_as_cpu(
          *dev,
          [&](Context& ctx) -> std::vector<Tensor*> {
            Tensor* a = input(ctx, type, a_shape);
            // b through a view: its dims 0 and 1 swapped back.
            std::array<int64_t, 4> swapped = {b_shape[1], b_shape[0], b_shape[2], b_shape[3]};
            Tensor* b = ctx.transpose(input(ctx, type, swapped));
            return {ctx.concat(a, b, dim)};
          },
          kF32, /*index_range=*/1000));
    }
  }
}

TEST(VulkanOps, ArgmaxTakesTheFirstOfEqualMaximaOnLongAndStridedRows) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int64_t n : {1, 7, 1000}) {
    SCOPED_TRACE("row " + std::to_string(n));
    EXPECT_TRUE(same_as_cpu(*dev,
                            [&](Context& ctx) -> std::vector<Tensor*> {
                              Tensor* x = input(ctx, DType::f32, {n, 4, 3});
                              return {ctx.argmax(x), ctx.argmax(ctx.scale(x, 0.0f)),
                                      ctx.argmax(ctx.diag_mask_inf(x, 1)), ctx.argmax(ctx.transpose(x))};
                            },
                            {0, 0}));
  }
}

// Every weight type the CPU device runs beyond f32 and f16.
constexpr DType kWeightTypes[] = {DType::bf16, DType::q8_0,   DType::q4_0,  DType::q4_1, DType::q5_0,
                                  DType::q5_1, DType::q2_K,   DType::q3_K,  DType::q4_K, DType::q5_K,
                                  DType::q6_K, DType::iq4_nl, DType::iq4_xs};

// mul_mat of a bf16 or block-typed weight: dequantized, the f32 sums match the CPU
// device's mul_mat of the dequantized weights; the CPU's own mul_mat of the
// block type rounds b to its 8-bit dot type first (each value by up to
// 1/254 of its block's largest), which moves a sum of 512 products of values
// in [-1, 1] by about 0.02 (one standard deviation), 0.07 at worst here.
constexpr Tolerance kDequantized{1e-4, 1e-4};
constexpr Tolerance kDotTypeRounding{2e-2, 1e-1};

TEST(VulkanOps, MulMatEveryWeightTypeOneTokenAndMany) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : kWeightTypes) {
    for (int64_t n : {1, 3, 17}) {
      SCOPED_TRACE(std::string(name_of(type)) + " N " + std::to_string(n));
      const auto build = [&](bool dequantize) {
        return [&, dequantize](Context& ctx) -> std::vector<Tensor*> {
          Tensor* w = input(ctx, type, {512, 23});
          Tensor* b = input(ctx, DType::f32, {512, n});
          return {ctx.mul_mat(dequantize ? ctx.cast(w, DType::f32) : w, b)};
        };
      };
      EXPECT_TRUE(matches_cpu(*dev, build(false), build(true), kDequantized));
      EXPECT_TRUE(matches_cpu(*dev, build(false), build(false), kDotTypeRounding));
    }
  }
}

// mul_mat of n tokens by a [k, 45] weight of type viewed `offset` bytes
// into its tensor, whose bytes are built here (random blocks after zero
// bytes, every bit pattern of codes and packed scales), against the sums of
// the decoded weights.
::testing::AssertionResult offset_weight_matches(Device& dev, DType type, int64_t k, uint64_t offset, int64_t n = 1) {
  constexpr int64_t kRows = 45;
  const uint64_t row = row_bytes(type, k);
  Context ctx;
  Tensor* whole = input(ctx, type, {k, kRows + 1});
  Tensor* w = ctx.view(whole, {k, kRows}, {block_bytes(type), row}, offset);
  Tensor* b = input(ctx, DType::f32, {k, n});
  Tensor* out = ctx.mul_mat(w, b);
  out->flags |= kFlagOutput;
  GraphRun run(dev, {out});
  const std::vector<uint8_t> blocks = random_encoded(type, k * kRows, 7);
  std::vector<uint8_t> bytes(whole->nbytes(), 0);
  std::copy(blocks.begin(), blocks.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset));
  run.write_raw(whole, bytes);
  const std::vector<float> bv = run.write(b, random_floats(k * n, 8));
  run.compute();
  const HostTensor want =
      ref::mul_mat(HostTensor({k, kRows, 1, 1}, decode(type, blocks.data(), k * kRows)), HostTensor({k, n, 1, 1}, bv));
  return all_near(run.read(out), want.v, kDequantized);
}

// The matrix-vector path gives a row 4 to 32 lanes by K, summed through
// subgroup shuffles where the device has them (on lavapipe 8 lanes a
// subgroup: a row within part of one, within one, over four) and through
// shared memory where it has not (a device opened without them); the runs of
// b and of a plain a are read as vec4s where they are aligned, a block
// type's words as u32 pairs, put together where its blocks start at odd words.
TEST(VulkanOps, MulMatOneTokenSumsRowsWithAndWithoutSubgroupOps) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  auto portable = open_vulkan_device({.index = 0, .no_subgroup_ops = true});
  ASSERT_TRUE(portable.ok()) << portable.status().to_string();
  const std::vector<std::pair<DType, int64_t>> cases = {{DType::f16, 32},   {DType::f16, 64},  {DType::f16, 520},
                                                        {DType::q8_0, 32},  {DType::q8_0, 64}, {DType::q8_0, 512},
                                                        {DType::q4_K, 256}, {DType::q4_K, 768}};
  for (Device* d : {dev.get(), portable.value().get()}) {
    for (const auto& [type, k] : cases) {
      SCOPED_TRACE(std::string(d == dev.get() ? "subgroups " : "portable ") + name_of(type) + " K " +
                   std::to_string(k));
      const auto build = [&](bool dequantize) {
        return [&, dequantize](Context& ctx) -> std::vector<Tensor*> {
          Tensor* w = input(ctx, type, {k, 45});
          return {ctx.mul_mat(dequantize ? ctx.cast(w, DType::f32) : w, input(ctx, DType::f32, {k, 1}))};
        };
      };
      EXPECT_TRUE(matches_cpu(*d, build(false), build(true), kDequantized));
      // b one float into a larger tensor: its runs are not aligned vec4s.
      const auto shifted = [&](bool dequantize) {
        return [&, dequantize](Context& ctx) -> std::vector<Tensor*> {
          Tensor* w = input(ctx, type, {k, 45});
          Tensor* b = ctx.view(input(ctx, DType::f32, {k + 1, 1}), {k, 1}, {4, static_cast<uint64_t>(4 * (k + 1))}, 4);
          return {ctx.mul_mat(dequantize ? ctx.cast(w, DType::f32) : w, b)};
        };
      };
      EXPECT_TRUE(matches_cpu(*d, shifted(false), shifted(true), kDequantized));
      // The weight one 16-bit word into a larger tensor: a block type's
      // blocks start at odd words, f16's runs are not aligned vec4s.
      EXPECT_TRUE(offset_weight_matches(*d, type, k, 2));
    }
  }
}

// Every block type's units and runs (quant.glsl's unit_codes, block_run) on
// random bytes, and f16's runs, one token (the vector path) and 5 (the
// tiles), the weight 16, 8, 4 and 2 bytes into its tensor: a q4_K or q5_K
// block, or an f16 run, at a multiple of 16 bytes, of 8, blocks at even
// words, at odd ones.
TEST(VulkanOps, MulMatEveryWeightTypeAtEvenAndOddWords) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  std::vector<DType> types = {DType::f16};
  for (DType type : kWeightTypes) {
    if (type != DType::bf16) types.push_back(type);
  }
  for (DType type : types) {
    for (uint64_t offset : {16, 8, 4, 2}) {
      for (int64_t n : {1, 5}) {
        SCOPED_TRACE(std::string(name_of(type)) + " offset " + std::to_string(offset) + " N " + std::to_string(n));
        EXPECT_TRUE(offset_weight_matches(*dev, type, 512, offset, n));
      }
    }
  }
}

// Prefill's tiled product over more than one tile each way, with partial
// tiles at both edges, for a plain and a block-typed weight.
TEST(VulkanOps, MulMatTilesCoverShapesPastOneTile) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::f16, DType::q8_0}) {
    SCOPED_TRACE(name_of(type));
    const auto build = [&](bool dequantize) {
      return [&, dequantize](Context& ctx) -> std::vector<Tensor*> {
        Tensor* w = input(ctx, type, {96, 150});
        return {ctx.mul_mat(dequantize ? ctx.cast(w, DType::f32) : w, input(ctx, DType::f32, {96, 131}))};
      };
    };
    EXPECT_TRUE(matches_cpu(*dev, build(false), build(true), kDequantized));
  }
}

TEST(VulkanOps, MulMatBlockTypesBroadcastOverDims2And3) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : {DType::q8_0, DType::q4_K}) {
    for (int64_t n : {1, 9}) {
      SCOPED_TRACE(std::string(name_of(type)) + " N " + std::to_string(n));
      const auto build = [&](bool dequantize) {
        return [&, dequantize](Context& ctx) -> std::vector<Tensor*> {
          Tensor* w = input(ctx, type, {256, 10, 2, 1});
          Tensor* b = ctx.permute(input(ctx, DType::f32, {256, 4, n, 3}), 0, 2, 1, 3);
          return {ctx.mul_mat(dequantize ? ctx.cast(w, DType::f32) : w, b)};
        };
      };
      EXPECT_TRUE(matches_cpu(*dev, build(false), build(true), kDequantized));
    }
  }
}

TEST(VulkanOps, GetRowsFromEveryWeightType) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType type : kWeightTypes) {
    SCOPED_TRACE(name_of(type));
    EXPECT_TRUE(same_as_cpu(
        *dev,
        [&](Context& ctx) -> std::vector<Tensor*> {
          Tensor* table = input(ctx, type, {256, 11, 3});
          return {ctx.get_rows(table, input(ctx, DType::i32, {6, 3})),
                  ctx.get_rows(table, input(ctx, DType::i32, {1, 1}))};
        },
        kF32, /*index_range=*/11));
  }
}

// top_k and top_k_ids (the indices alone, of rows over up to 4 dims).
TEST(VulkanOps, TopKAndTopKIdsOnShortAndLongRowsUpToTheLargestK) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  for (int64_t n : {1, 7, 300, 5000}) {
    for (int64_t k : {int64_t{1}, std::min<int64_t>(n, 5), std::min<int64_t>(n, 1024)}) {
      SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k));
      EXPECT_TRUE(same_as_cpu(*dev,
                              [&](Context& ctx) -> std::vector<Tensor*> {
                                Tensor* x = input(ctx, DType::f32, {n, 3, 2});
                                Tensor* x4 = input(ctx, DType::f32, {n, 2, 1, 3});
                                const int kk = static_cast<int>(k);
                                return {ctx.top_k(x, kk), ctx.top_k(ctx.permute(x, 0, 2, 1, 3), kk),
                                        ctx.top_k_ids(x4, kk), ctx.top_k_ids(ctx.permute(x4, 0, 3, 2, 1), kk)};
                              },
                              {0, 0}));
    }
  }
}

TEST(VulkanOps, TopKAndTopKIdsBreakTiesByLowerIndexAndRankNanBelowMinusInf) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  EXPECT_TRUE(
      same_as_cpu(*dev,
                  [](Context& ctx) -> std::vector<Tensor*> {
                    Tensor* x = input(ctx, DType::f32, {600, 4});
                    Tensor* zeros = ctx.scale(x, 0.0f);        // +0 and -0: equal
                    Tensor* masked = ctx.diag_mask_inf(x, 2);  // rows of 3 to 6 numbers, the rest -inf
                    Tensor* nan = ctx.div(zeros, zeros);
                    Tensor* with_nan = ctx.concat(nan, masked, 0);
                    return {ctx.top_k(zeros, 300),     ctx.top_k(masked, 40),     ctx.top_k(with_nan, 600),
                            ctx.top_k_ids(zeros, 300), ctx.top_k_ids(masked, 40), ctx.top_k_ids(with_nan, 600)};
                  },
                  {0, 0}));
}

TEST(VulkanOps, AGraphRunTwiceGivesTheSameValues) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  EXPECT_TRUE(same_as_cpu(
      *dev,
      [](Context& ctx) -> std::vector<Tensor*> {
        Tensor* x = input(ctx, DType::f32, {64, 5});
        Tensor* w = input(ctx, DType::f32, {64, 48});
        Tensor* h = ctx.mul_mat(w, ctx.rms_norm(x, 1e-6f));
        return {ctx.soft_max(ctx.add(h, ctx.silu(h)), nullptr, 0.3f)};
      },
      {1e-4, 1e-5}, 1, /*runs=*/2));
}

TEST(VulkanOps, SupportsIsFalseForWhatItDoesNotCompute) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {64, 4});
  Tensor* q = ctx.new_tensor(DType::q8_0, {64, 4});
  Tensor* pos = ctx.new_tensor(DType::i32, {4});
  EXPECT_TRUE(dev->supports(*x));
  EXPECT_TRUE(dev->supports(*ctx.transpose(x)));
  EXPECT_TRUE(dev->supports(*ctx.add(x, x)));
  EXPECT_TRUE(dev->supports(*ctx.mul_mat(q, x)));
  EXPECT_TRUE(dev->supports(*ctx.get_rows(q, pos)));
  EXPECT_FALSE(dev->supports(*ctx.cast(q, DType::f32)));
  EXPECT_TRUE(dev->supports(*ctx.rope(ctx.reshape(x, {16, 4, 4}), pos, 16, 0)));
  EXPECT_TRUE(dev->supports(*ctx.top_k(x, 3)));
  EXPECT_FALSE(dev->supports(*ctx.top_k(ctx.new_tensor(DType::f32, {2000}), 1025)));
  EXPECT_TRUE(dev->supports(*ctx.argmax(x)));
  EXPECT_TRUE(dev->supports(*ctx.set_rows(q, x, pos)));
  EXPECT_FALSE(
      dev->supports(*ctx.set_rows(ctx.new_tensor(DType::q4_K, {256, 4}), ctx.new_tensor(DType::f32, {256, 4}), pos)));
  EXPECT_FALSE(dev->supports(*ctx.cast(x, DType::q8_0)));
  // mxfp4 has no dequantizer in shaders/quant.glsl: what reads it is left to a CPU.
  Tensor* mx = ctx.new_tensor(DType::mxfp4, {64, 4});
  EXPECT_FALSE(dev->supports(*ctx.mul_mat(mx, x)));
  EXPECT_FALSE(dev->supports(*ctx.get_rows(mx, pos)));
  // The mixture-of-experts ops and soft_max's sinks have shaders; experts of
  // mxfp4 have none, nor has top_k_ids past the largest k.
  Tensor* heads = ctx.new_tensor(DType::f32, {16, 4, 2});
  Tensor* sinks = ctx.new_tensor(DType::f32, {2});
  EXPECT_TRUE(dev->supports(*ctx.soft_max(heads, ctx.new_tensor(DType::f32, {16, 4}), 0.5f)));
  EXPECT_TRUE(dev->supports(*ctx.soft_max(heads, nullptr, 0.5f, sinks)));
  EXPECT_TRUE(dev->supports(*ctx.soft_max(heads, ctx.new_tensor(DType::f32, {16, 4}), 0.5f, sinks)));
  Tensor* tokens = ctx.new_tensor(DType::f32, {64, 1, 4});
  Tensor* ids = ctx.new_tensor(DType::i32, {2, 4});
  EXPECT_TRUE(dev->supports(*ctx.mul_mat_id(ctx.new_tensor(DType::q8_0, {64, 8, 3}), tokens, ids)));
  EXPECT_TRUE(dev->supports(*ctx.mul_mat_id(ctx.new_tensor(DType::f32, {64, 8, 3}), tokens, ids)));
  EXPECT_FALSE(dev->supports(*ctx.mul_mat_id(ctx.new_tensor(DType::mxfp4, {64, 8, 3}), tokens, ids)));
  EXPECT_TRUE(dev->supports(*ctx.top_k_ids(x, 3)));
  EXPECT_FALSE(dev->supports(*ctx.top_k_ids(ctx.new_tensor(DType::f32, {2000}), 1025)));
  EXPECT_TRUE(dev->supports(*ctx.swiglu_clamp(x, x, 1.702f, 7.0f)));
  EXPECT_TRUE(dev->supports(*ctx.sigmoid(x)));
}

// A scheduler over the GPU and the CPU puts the mixture-of-experts nodes and
// soft_max with sinks on the GPU, but for the product of experts of mxfp4,
// which their weights (in the CPU's memory; the GPU has no shader for them)
// keep on the CPU; the result is the CPU's alone. The other experts are
// weights in the GPU's memory, as a model places them.
TEST(VulkanOps, TheSchedulerRunsTheMoeOpsAndSinksOnTheGpuAndMxfp4ExpertsOnTheCpu) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(gpu);
  CpuDevice cpu({.threads = 2});
  std::vector<std::unique_ptr<Buffer>> weights;
  uint32_t seed = 5;
  const auto experts = [&](Context& c, Device& dev, DType type, std::initializer_list<int64_t> ne) {
    Tensor* w = c.new_tensor(type, ne);
    w->flags |= kFlagWeight;
    auto buffer = dev.allocate(w->nbytes());
    check(buffer.status(), "allocate");
    check(buffer.value()->place(*w, 0), "place");
    const auto bytes = random_encoded(type, w->nelements(), seed++);
    check(buffer.value()->set(*w, bytes.data(), 0, bytes.size()), "set");
    weights.push_back(std::move(buffer).value());
    return w;
  };
  const auto build = [&](Context& c, Device& experts_device) {
    Tensor* x = input(c, DType::f32, {64, 3}, "x");
    Tensor* router = input(c, DType::f32, {64, 4}, "router");
    Tensor* ids = c.top_k_ids(c.mul_mat(router, x), 2);  // [2, 3]
    Tensor* xb = c.reshape(x, {64, 1, 3});
    Tensor* g = c.mul_mat_id(experts(c, experts_device, DType::f32, {64, 96, 4}), xb, ids);
    Tensor* u = c.mul_mat_id(experts(c, experts_device, DType::f32, {64, 96, 4}), xb, ids);
    Tensor* y = c.mul_mat_id(experts(c, cpu, DType::mxfp4, {96, 64, 4}), c.swiglu_clamp(g, u, 1.702f, 7.0f), ids);
    Tensor* scores = c.reshape(c.mul_mat(input(c, DType::f32, {64, 128}, "wq"), x), {64, 2, 3});
    Tensor* p = c.soft_max(scores, nullptr, 0.5f, input(c, DType::f32, {3}, "sinks"));
    Tensor* out = c.add(y, p);  // [64, 2, 3]
    out->flags |= kFlagOutput;
    return out;
  };
  const auto fill = [](const Graph& g) {
    uint32_t input_seed = 50;
    for (Tensor* leaf : g.leafs()) {
      if (leaf->flags & kFlagInput)
        check(write_from_f32(*leaf, random_floats(leaf->nelements(), input_seed++)), "write");
    }
  };
  const auto run = [&](const std::vector<Device*>& devices,
                       const std::function<void(const Scheduler&, const Graph&)>& look) {
    Context ctx;
    Tensor* out = build(ctx, *devices.front());
    Graph g = Graph::build({out});
    Scheduler sched(devices);
    check(sched.allocate(g), "allocate");
    fill(g);
    std::vector<float> values(static_cast<size_t>(out->nelements()));
    check(sched.compute_and_read(g, *out, values.data()), "compute_and_read");
    look(sched, g);
    return values;
  };
  const std::vector<float> want = run({&cpu}, [](const Scheduler&, const Graph&) {});
  seed = 5;  // the same experts again
  const std::vector<float> got = run({gpu.get(), &cpu}, [](const Scheduler& s, const Graph& g) {
    const std::vector<int>& device = s.last_plan()->node_device;
    ASSERT_EQ(device.size(), g.nodes().size());
    int moe_nodes = 0;
    for (size_t i = 0; i < device.size(); ++i) {
      const Tensor& n = *g.nodes()[i];
      const bool moe = n.op == Op::mul_mat_id || n.op == Op::top_k_ids || n.op == Op::swiglu_clamp ||
                       (n.op == Op::soft_max && n.src[2] != nullptr);
      if (!moe) continue;
      ++moe_nodes;
      const int want_device = n.op == Op::mul_mat_id && n.src[0]->type == DType::mxfp4 ? 1 : 0;
      EXPECT_EQ(device[i], want_device) << "node " << i << " " << name_of(n.op) << "\n" << s.describe();
    }
    EXPECT_EQ(moe_nodes, 6) << s.describe();
  });
  EXPECT_TRUE(all_near(got, to_double(want), {1e-4, 1e-4}));
}

}  // namespace
}  // namespace tensorpc::test
