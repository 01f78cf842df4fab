// rms_norm, norm and rope on the CPU device against double-precision references.
#include "test_util.h"

namespace tensorpc::test {
namespace {

class NormRopeTest : public CpuOpTest {};
INSTANTIATE_TEST_SUITE_P(Cpu, NormRopeTest, ::testing::ValuesIn(all_cpu_configs()), CpuConfigName());

// Norm outputs are of order 1: 1e-5 relative plus 1e-5 absolute.
constexpr Tolerance kNormTol = {1e-5, 1e-5};

TEST_P(NormRopeTest, RmsNormDividesEachRowByItsRootMeanSquare) {
  for (int64_t n : {67, 4096}) {
    for (float eps : {1e-6f, 1e-5f}) {
      SCOPED_TRACE("row length " + std::to_string(n) + ", eps " + std::to_string(eps));
      const Shape shape = {n, 3, 2, 1};
      Context ctx;
      Tensor* x = input(ctx, DType::f32, shape, "x");
      Tensor* y = ctx.rms_norm(x, eps);
      ASSERT_EQ(shape_of(y), shape);
      GraphRun run(dev(), {y});
      const auto vx = run.write(x, random_floats(x->nelements(), 40, -2, 2));
      run.compute();
      EXPECT_TRUE(all_near(run.read(y), ref::rms_norm(HostTensor(shape, vx), eps).v, kNormTol));
    }
  }
}

TEST_P(NormRopeTest, RmsNormOfAZeroRowIsZeroThanksToEps) {
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {32}, "x");
  Tensor* y = ctx.rms_norm(x, 1e-5f);
  GraphRun run(dev(), {y});
  run.write(x, std::vector<float>(32, 0.0f));
  run.compute();
  EXPECT_TRUE(all_near(run.read(y), std::vector<double>(32, 0.0), Tolerance{0, 0}));
}

// Rows centred away from zero (mean about 3) show whether the variance is
// computed around the mean.
TEST_P(NormRopeTest, NormCentresAndScalesEachRow) {
  for (int64_t n : {67, 4096}) {
    SCOPED_TRACE("row length " + std::to_string(n));
    const Shape shape = {n, 4, 1, 2};
    Context ctx;
    Tensor* x = input(ctx, DType::f32, shape, "x");
    Tensor* y = ctx.norm(x, 1e-5f);
    ASSERT_EQ(shape_of(y), shape);
    GraphRun run(dev(), {y});
    const auto vx = run.write(x, random_floats(x->nelements(), 41, 2, 4));
    run.compute();
    EXPECT_TRUE(all_near(run.read(y), ref::norm(HostTensor(shape, vx), 1e-5).v, kNormTol));
  }
}

struct RopeCase {
  int n_dims;
  int mode;
  float freq_base;
  float freq_scale;
};

std::string rope_case_name(const RopeCase& c) {
  return std::string(c.mode == kRopeNeox ? "neox" : "normal") + " n_dims " + std::to_string(c.n_dims) +
         " freq_base " + std::to_string(c.freq_base) + " freq_scale " + std::to_string(c.freq_scale);
}

// x [64, 3, 6] (head dim, heads, tokens) at positions out of order, some far
// apart. Angles are exact functions of the position, so the tolerance does
// not grow with it.
TEST_P(NormRopeTest, RopeRotatesPairsByPositionTimesFrequency) {
  const int64_t D = 64, H = 3, T = 6;
  const std::vector<int32_t> positions = {7, 0, 4000, 3, 1, 513};
  for (const RopeCase& c : {RopeCase{64, kRopeNormal, 10000, 1}, RopeCase{32, kRopeNormal, 10000, 1},
                            RopeCase{64, kRopeNeox, 10000, 1}, RopeCase{32, kRopeNeox, 10000, 1},
                            RopeCase{32, kRopeNormal, 500000, 1}, RopeCase{16, kRopeNeox, 500000, 1},
                            RopeCase{48, kRopeNeox, 500000, 0.25f}, RopeCase{2, kRopeNormal, 10000, 0.5f}}) {
    SCOPED_TRACE(rope_case_name(c));
    Context ctx;
    Tensor* x = input(ctx, DType::f32, {D, H, T}, "x");
    Tensor* pos = input(ctx, DType::i32, {T}, "positions");
    Tensor* y = ctx.rope(x, pos, c.n_dims, c.mode, c.freq_base, c.freq_scale);
    ASSERT_EQ(shape_of(y), (Shape{D, H, T, 1}));
    GraphRun run(dev(), {y});
    const auto vx = run.write(x, random_floats(x->nelements(), 42));
    run.write_i32(pos, positions);
    run.compute();
    const HostTensor want =
        ref::rope(HostTensor({D, H, T, 1}, vx), positions, c.n_dims, c.mode, c.freq_base, c.freq_scale);
    EXPECT_TRUE(all_near(run.read(y), want.v, Tolerance{1e-5, 1e-6}));
  }
}

TEST_P(NormRopeTest, RopeAtPositionZeroIsTheIdentity) {
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {32, 2, 1}, "x");
  Tensor* pos = input(ctx, DType::i32, {1}, "positions");
  Tensor* y = ctx.rope(x, pos, 32, kRopeNeox);
  GraphRun run(dev(), {y});
  const auto vx = run.write(x, random_floats(x->nelements(), 43));
  run.write_i32(pos, {0});
  run.compute();
  EXPECT_TRUE(all_near(run.read(y), to_double(vx), Tolerance{0, 0}));
}

// rope of a permuted (non-contiguous) x: the kernel reads through nb.
TEST_P(NormRopeTest, RopeReadsANonContiguousX) {
  const int64_t D = 32, H = 4, T = 3;
  Context ctx;
  Tensor* x0 = input(ctx, DType::f32, {D, T, H}, "x0");
  Tensor* x = ctx.permute(x0, 0, 2, 1, 3);  // [D, H, T]
  Tensor* pos = input(ctx, DType::i32, {T}, "positions");
  Tensor* y = ctx.rope(x, pos, 16, kRopeNormal);
  GraphRun run(dev(), {y});
  const auto vx = run.write(x0, random_floats(x0->nelements(), 44));
  run.write_i32(pos, {2, 9, 1});
  run.compute();
  const HostTensor hx = ref::permute(HostTensor({D, T, H, 1}, vx), {0, 2, 1, 3});
  const HostTensor want = ref::rope(hx, {2, 9, 1}, 16, kRopeNormal, 10000, 1);
  EXPECT_TRUE(all_near(run.read(y), want.v, Tolerance{1e-5, 1e-6}));
}

}  // namespace
}  // namespace tensorpc::test
