// Element-wise ops on the CPU device against double-precision references:
// add/sub/mul/div with b broadcast over a's rows and dims 2/3, scale, silu,
// gelu (tanh form) and swiglu.
#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

namespace tensorpc::test {
namespace {

class ElementwiseTest : public CpuOpTest {};
INSTANTIATE_TEST_SUITE_P(Cpu, ElementwiseTest, ::testing::ValuesIn(all_cpu_configs()), CpuConfigName());

using BinaryBuilder = Tensor* (Context::*)(Tensor*, Tensor*);

// a is [32, 5, 3, 2]; each b shape is a's with some dims set to 1.
const Shape kA = {32, 5, 3, 2};
const std::vector<Shape> kBroadcastB = {
    {32, 5, 3, 2},  // same shape
    {32, 1, 1, 1},  // one row for every row of a
    {32, 5, 1, 1},  // one matrix for every (i2, i3)
    {32, 1, 3, 1},  // broadcast over rows and dim 3
    {32, 5, 1, 2},  // broadcast over dim 2 only
    {32, 5, 3, 1},  // broadcast over dim 3 only
};

void check_binary(CpuDevice& dev, BinaryBuilder build, const std::function<double(double, double)>& f,
                  bool b_is_divisor) {
  for (const Shape& bs : kBroadcastB) {
    SCOPED_TRACE("b " + shape_str(bs));
    Context ctx;
    Tensor* a = input(ctx, DType::f32, kA, "a");
    Tensor* b = input(ctx, DType::f32, bs, "b");
    Tensor* c = (ctx.*build)(a, b);
    ASSERT_EQ(c->type, DType::f32);
    ASSERT_EQ(shape_of(c), kA);

    GraphRun run(dev, {c});
    const int64_t nb = bs[0] * bs[1] * bs[2] * bs[3];
    const auto va = run.write(a, random_floats(a->nelements(), 1));
    const auto vb = run.write(b, b_is_divisor ? random_away_from_zero(nb, 2) : random_floats(nb, 2));
    run.compute();

    const HostTensor want = ref::binary(HostTensor(kA, va), HostTensor(bs, vb), f);
    EXPECT_TRUE(all_near(run.read(c), want.v, tolerance_for(DType::f32)));
  }
}

TEST_P(ElementwiseTest, AddBroadcastsBOverRowsAndDims23) {
  check_binary(dev(), &Context::add, [](double x, double y) { return x + y; }, false);
}

TEST_P(ElementwiseTest, SubBroadcastsBOverRowsAndDims23) {
  check_binary(dev(), &Context::sub, [](double x, double y) { return x - y; }, false);
}

TEST_P(ElementwiseTest, MulBroadcastsBOverRowsAndDims23) {
  check_binary(dev(), &Context::mul, [](double x, double y) { return x * y; }, false);
}

TEST_P(ElementwiseTest, DivBroadcastsBOverRowsAndDims23) {
  check_binary(dev(), &Context::div, [](double x, double y) { return x / y; }, true);
}

TEST_P(ElementwiseTest, AddReadsANonContiguousTransposedA) {
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {7, 32}, "x");  // transposed: [32, 7]
  Tensor* b = input(ctx, DType::f32, {32, 1}, "b");
  Tensor* c = ctx.add(ctx.transpose(x), b);
  ASSERT_EQ(shape_of(c), (Shape{32, 7, 1, 1}));

  GraphRun run(dev(), {c});
  const auto vx = run.write(x, random_floats(7 * 32, 3));
  const auto vb = run.write(b, random_floats(32, 4));
  run.compute();

  const HostTensor xt = ref::permute(HostTensor({7, 32, 1, 1}, vx), {1, 0, 2, 3});
  const HostTensor want = ref::binary(xt, HostTensor({32, 1, 1, 1}, vb), std::plus<double>());
  EXPECT_TRUE(all_near(run.read(c), want.v, tolerance_for(DType::f32)));
}

// Unary ops are checked on a [67, 3, 2] tensor: an odd row length exercises the
// tails of vectorised loops.
void check_unary(CpuDevice& dev, const std::function<Tensor*(Context&, Tensor*)>& build,
                 const std::function<double(double)>& f, float lo, float hi, Tolerance tol) {
  Context ctx;
  const Shape shape = {67, 3, 2, 1};
  Tensor* a = input(ctx, DType::f32, shape, "a");
  Tensor* c = build(ctx, a);
  ASSERT_EQ(c->type, DType::f32);
  ASSERT_EQ(shape_of(c), shape);

  GraphRun run(dev, {c});
  const auto va = run.write(a, random_floats(a->nelements(), 5, lo, hi));
  run.compute();
  EXPECT_TRUE(all_near(run.read(c), ref::unary(HostTensor(shape, va), f).v, tol));
}

TEST_P(ElementwiseTest, ScaleMultipliesByTheParam) {
  check_unary(
      dev(), [](Context& ctx, Tensor* a) { return ctx.scale(a, -0.125f); }, [](double x) { return -0.125 * x; },
      -4, 4, tolerance_for(DType::f32));
}

TEST_P(ElementwiseTest, SiluIsXTimesSigmoidX) {
  check_unary(
      dev(), [](Context& ctx, Tensor* a) { return ctx.silu(a); }, ref::silu, -8, 8, tolerance_for(DType::f32));
}

TEST_P(ElementwiseTest, GeluIsTheTanhApproximation) {
  check_unary(
      dev(), [](Context& ctx, Tensor* a) { return ctx.gelu(a); }, ref::gelu, -6, 6, tolerance_for(DType::f32));
}

TEST_P(ElementwiseTest, SigmoidIsOneOverOnePlusEToTheMinusX) {
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  check_unary(
      dev(), [](Context& ctx, Tensor* a) { return ctx.sigmoid(a); }, sigmoid, -12, 12, tolerance_for(DType::f32));
  // Saturates to exactly 0 and 1, never NaN.
  Context ctx;
  Tensor* a = input(ctx, DType::f32, {4}, "a");
  Tensor* s = ctx.sigmoid(a);
  GraphRun run(dev(), {s});
  run.write(a, {-std::numeric_limits<float>::infinity(), -200.0f, 200.0f, std::numeric_limits<float>::infinity()});
  run.compute();
  EXPECT_EQ(run.read(s), (std::vector<float>{0.0f, 0.0f, 1.0f, 1.0f}));
}

TEST_P(ElementwiseTest, SiluAndGeluStayFiniteForLargeInputs) {
  Context ctx;
  Tensor* a = input(ctx, DType::f32, {4}, "a");
  Tensor* s = ctx.silu(a);
  Tensor* g = ctx.gelu(a);
  GraphRun run(dev(), {s, g});
  const auto va = run.write(a, {-100.0f, -30.0f, 30.0f, 100.0f});
  run.compute();
  EXPECT_TRUE(all_near(run.read(s), ref::unary(HostTensor({4, 1, 1, 1}, va), ref::silu).v, {1e-5, 1e-6}));
  EXPECT_TRUE(all_near(run.read(g), ref::unary(HostTensor({4, 1, 1, 1}, va), ref::gelu).v, {1e-5, 1e-6}));
}

TEST_P(ElementwiseTest, SwigluIsSiluOfATimesB) {
  Context ctx;
  const Shape shape = {67, 5, 2, 1};
  Tensor* a = input(ctx, DType::f32, shape, "a");
  Tensor* b = input(ctx, DType::f32, shape, "b");
  Tensor* c = ctx.swiglu(a, b);
  ASSERT_EQ(shape_of(c), shape);

  GraphRun run(dev(), {c});
  const auto va = run.write(a, random_floats(a->nelements(), 6, -6, 6));
  const auto vb = run.write(b, random_floats(b->nelements(), 7, -2, 2));
  run.compute();
  const HostTensor want = ref::binary(HostTensor(shape, va), HostTensor(shape, vb),
                                      [](double x, double y) { return ref::silu(x) * y; });
  EXPECT_TRUE(all_near(run.read(c), want.v, tolerance_for(DType::f32)));
}

}  // namespace
}  // namespace tensorpc::test
