// tanh on the CPU device against std::tanh: across the range, near zero
// (where a formula through e^2x would cancel), at and beyond saturation, and
// for the special values.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace tensorpc::test {
namespace {

class TanhTest : public CpuOpTest {};
INSTANTIATE_TEST_SUITE_P(Cpu, TanhTest, ::testing::ValuesIn(all_cpu_configs()), CpuConfigName());

std::vector<float> run_tanh(Device& dev, const std::vector<float>& values) {
  Context ctx;
  Tensor* a = input(ctx, DType::f32, {static_cast<int64_t>(values.size())}, "a");
  Tensor* y = ctx.tanh(a);
  GraphRun run(dev, {y});
  run.write(a, values);
  run.compute();
  return run.read(y);
}

std::vector<double> std_tanh(const std::vector<float>& values) {
  std::vector<double> out;
  for (float v : values) out.push_back(std::tanh(static_cast<double>(v)));
  return out;
}

// A few ulp everywhere, relative: small inputs keep their digits.
constexpr Tolerance kTanhTol = {5e-7, 0};

TEST_P(TanhTest, MatchesStdTanhAcrossTheRange) {
  Context ctx;
  const int64_t n = 4096;
  Tensor* a = input(ctx, DType::f32, {n / 4, 4}, "a");
  Tensor* y = ctx.tanh(a);
  ASSERT_EQ(shape_of(y), (Shape{n / 4, 4, 1, 1}));
  GraphRun run(dev(), {y});
  const auto va = run.write(a, random_floats(n, 60, -6, 6));
  run.compute();
  EXPECT_TRUE(all_near(run.read(y), std_tanh(va), kTanhTol));
}

TEST_P(TanhTest, KeepsTheDigitsOfSmallInputs) {
  std::vector<float> values;
  for (float v = 1e-30f; v < 1.0f; v *= 1.37f) {
    values.push_back(v);
    values.push_back(-v);
  }
  for (float v : {0.2499999f, 0.25f, 0.2500001f}) values.push_back(v);  // the switch between the two forms
  EXPECT_TRUE(all_near(run_tanh(dev(), values), std_tanh(values), kTanhTol));
}

TEST_P(TanhTest, SaturatesToPlusOrMinusOneForLargeInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {8.0f, -8.0f, 9.1f, -9.1f, 20.0f, -20.0f, 88.0f, -100.0f, 1e30f, -3e38f, inf, -inf};
  const auto got = run_tanh(dev(), values);
  EXPECT_TRUE(all_near(got, std_tanh(values), kTanhTol));
  for (size_t i = 4; i < values.size(); ++i) EXPECT_EQ(got[i], values[i] > 0 ? 1.0f : -1.0f) << values[i];
}

TEST_P(TanhTest, PassesNaNThroughAndKeepsTheSignOfZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto got = run_tanh(dev(), {nan, -nan, 0.0f, -0.0f});
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_TRUE(std::isnan(got[1]));
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_FALSE(std::signbit(got[2]));
  EXPECT_EQ(got[3], 0.0f);
  EXPECT_TRUE(std::signbit(got[3]));
}

// A transposed (strided) input goes through the kernel's strided path and
// gives the same values.
TEST_P(TanhTest, ReadsANonContiguousInput) {
  Context ctx;
  Tensor* a = input(ctx, DType::f32, {5, 12}, "a");
  Tensor* y = ctx.tanh(ctx.transpose(a));
  GraphRun run(dev(), {y});
  const auto va = run.write(a, random_floats(a->nelements(), 61, -3, 3));
  run.compute();
  HostTensor want = ref::permute(HostTensor({5, 12, 1, 1}, va), {1, 0, 2, 3});
  for (double& v : want.v) v = std::tanh(v);
  EXPECT_TRUE(all_near(run.read(y), want.v, kTanhTol));
}

}  // namespace
}  // namespace tensorpc::test
