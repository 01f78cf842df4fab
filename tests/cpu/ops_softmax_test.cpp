// soft_max (with and without mask, with scale) and diag_mask_inf on the CPU
// device against double-precision references.
#include <limits>

#include "test_util.h"

namespace tensorpc::test {
namespace {

class SoftMaxTest : public CpuOpTest {};
INSTANTIATE_TEST_SUITE_P(Cpu, SoftMaxTest, ::testing::ValuesIn(all_cpu_configs()), CpuConfigName());

constexpr float kInf = std::numeric_limits<float>::infinity();
// Probabilities: 1e-5 relative, 1e-7 absolute.
constexpr Tolerance kProbTol = {1e-5, 1e-7};

TEST_P(SoftMaxTest, SoftMaxWithoutMaskNormalisesEachRow) {
  for (float scale : {1.0f, 0.125f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    const Shape shape = {67, 5, 3, 1};
    Context ctx;
    Tensor* x = input(ctx, DType::f32, shape, "x");
    Tensor* y = ctx.soft_max(x, nullptr, scale);
    GraphRun run(dev(), {y});
    const auto vx = run.write(x, random_floats(x->nelements(), 50, -5, 5));
    run.compute();
    EXPECT_TRUE(all_near(run.read(y), ref::soft_max(HostTensor(shape, vx), nullptr, scale).v, kProbTol));
  }
}

TEST_P(SoftMaxTest, SoftMaxIsStableForLargeInputs) {
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {4, 2}, "x");
  Tensor* y = ctx.soft_max(x);
  GraphRun run(dev(), {y});
  const auto vx = run.write(x, {1000, 999, 998, 1000, -1000, -1001, -1000, -2000});
  run.compute();
  EXPECT_TRUE(all_near(run.read(y), ref::soft_max(HostTensor({4, 2, 1, 1}, vx), nullptr, 1).v, kProbTol));
}

// mask [16, 7] (some -inf) is added to every [16, 7] matrix of x [16, 7, 3, 2].
TEST_P(SoftMaxTest, SoftMaxAddsTheMaskBroadcastOverDims2And3) {
  const Shape shape = {16, 7, 3, 2};
  Context ctx;
  Tensor* x = input(ctx, DType::f32, shape, "x");
  Tensor* mask = input(ctx, DType::f32, {16, 7}, "mask");
  Tensor* y = ctx.soft_max(x, mask, 0.25f);
  GraphRun run(dev(), {y});
  const auto vx = run.write(x, random_floats(x->nelements(), 51, -4, 4));
  auto vm = random_floats(mask->nelements(), 52, -2, 2);
  for (size_t i = 0; i < vm.size(); i += 3) vm[i] = -kInf;
  vm = run.write(mask, vm);
  run.compute();
  const HostTensor hm({16, 7, 1, 1}, vm);
  EXPECT_TRUE(all_near(run.read(y), ref::soft_max(HostTensor(shape, vx), &hm, 0.25).v, kProbTol));
}

// A mask with more rows than x (a KV-cache mask padded to a multiple) is read
// row for row; the extra rows are ignored.
TEST_P(SoftMaxTest, SoftMaxReadsTheFirstRowsOfATallerMask) {
  const Shape shape = {12, 5, 2, 1};
  Context ctx;
  Tensor* x = input(ctx, DType::f32, shape, "x");
  Tensor* mask = input(ctx, DType::f32, {12, 8}, "mask");
  Tensor* y = ctx.soft_max(x, mask);
  GraphRun run(dev(), {y});
  const auto vx = run.write(x, random_floats(x->nelements(), 53, -3, 3));
  const HostTensor causal = ref::causal_mask(12, 8, 4);
  const auto vm = run.write(mask, to_float(causal));
  run.compute();
  const HostTensor hm({12, 8, 1, 1}, vm);
  EXPECT_TRUE(all_near(run.read(y), ref::soft_max(HostTensor(shape, vx), &hm, 1).v, kProbTol));
}

TEST_P(SoftMaxTest, SoftMaxOfAFullyMaskedRowIsZerosNotNaN) {
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {8, 3}, "x");
  Tensor* mask = input(ctx, DType::f32, {8, 3}, "mask");
  Tensor* y = ctx.soft_max(x, mask, 0.5f);
  GraphRun run(dev(), {y});
  const auto vx = run.write(x, random_floats(x->nelements(), 54));
  std::vector<float> vm(24, 0.0f);
  for (int i = 8; i < 16; ++i) vm[i] = -kInf;  // row 1 fully masked
  run.write(mask, vm);
  run.compute();
  const auto got = run.read(y);
  for (int i = 8; i < 16; ++i) EXPECT_EQ(got[i], 0.0f) << "index " << i;
  const HostTensor hm({8, 3, 1, 1}, vm);
  EXPECT_TRUE(all_near(got, ref::soft_max(HostTensor({8, 3, 1, 1}, vx), &hm, 0.5).v, kProbTol));
}

TEST_P(SoftMaxTest, DiagMaskInfHidesEveryColumnPastNPastPlusRow) {
  for (int n_past : {0, 3}) {
    SCOPED_TRACE("n_past " + std::to_string(n_past));
    const Shape shape = {8, 5, 2, 1};
    Context ctx;
    Tensor* x = input(ctx, DType::f32, shape, "x");
    Tensor* y = ctx.diag_mask_inf(x, n_past);
    ASSERT_EQ(shape_of(y), shape);
    GraphRun run(dev(), {y});
    const auto vx = run.write(x, random_floats(x->nelements(), 55));
    run.compute();
    HostTensor want(shape, vx);
    TENSORPC_FOR_EACH_INDEX(shape, i0, i1, i2, i3) {
      if (i0 > n_past + i1) want(i0, i1, i2, i3) = -std::numeric_limits<double>::infinity();
    }
    EXPECT_TRUE(all_near(run.read(y), want.v, Tolerance{0, 0}));
  }
}

TEST_P(SoftMaxTest, DiagMaskInfThenSoftMaxEqualsSoftMaxWithACausalMask) {
  const Shape shape = {6, 4, 2, 1};
  const int n_past = 2;
  Context ctx;
  Tensor* x = input(ctx, DType::f32, shape, "x");
  Tensor* y = ctx.soft_max(ctx.diag_mask_inf(ctx.scale(x, 0.5f), n_past));
  GraphRun run(dev(), {y});
  const auto vx = run.write(x, random_floats(x->nelements(), 56, -3, 3));
  run.compute();
  const HostTensor mask = ref::causal_mask(6, 4, n_past);
  EXPECT_TRUE(all_near(run.read(y), ref::soft_max(HostTensor(shape, vx), &mask, 0.5).v, kProbTol));
}

}  // namespace
}  // namespace tensorpc::test
