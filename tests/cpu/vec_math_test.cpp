// Specification tests for the vectorisable f32 math of the CPU kernels (src/cpu/vec_math.h):
// vec_exp against std::exp in double over the whole float range and at its edges, and the
// lane-split reductions sum_f64 and max_f32.
#include "cpu/vec_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace tensorpc::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kMaxRelError = 2e-7;
constexpr double kSmallestDenormal = 0x1p-149;

// |got - e^x| within kMaxRelError of e^x, plus one denormal step where e^x is that small.
::testing::AssertionResult ExpIsAccurate(float x, float got) {
  const double want = std::exp(static_cast<double>(x));
  const double allowed = kMaxRelError * want + (want < 0x1p-126 ? kSmallestDenormal : 0.0);
  if (std::fabs(got - want) <= allowed) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "vec_exp(" << x << ") = " << got << ", want " << want;
}

// Every 97th float from `from` up to (not including) `to`, both of one sign, stepping through
// the bit patterns so that every binade is sampled alike.
std::vector<float> floats_between(float from, float to) {
  std::vector<float> v;
  const uint32_t b0 = std::bit_cast<uint32_t>(from);
  const uint32_t b1 = std::bit_cast<uint32_t>(to);
  const int32_t dir = b1 > b0 ? 1 : -1;
  for (uint32_t b = b0; dir > 0 ? b < b1 : b > b1; b += dir * 97) v.push_back(std::bit_cast<float>(b));
  return v;
}

TEST(VecExp, IsWithin2e7RelativeOfStdExpOverTheFiniteRange) {
  for (const auto& [from, to] : {std::pair{-87.3f, -0.0f}, std::pair{0.0f, 88.72f}}) {
    const std::vector<float> xs = floats_between(from, to);
    ASSERT_GT(xs.size(), 1000000u);
    std::vector<float> ys(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) ys[i] = vec_exp(xs[i]);  // vectorised
    int failures = 0;
    for (size_t i = 0; i < xs.size() && failures < 5; ++i) {
      const auto ok = ExpIsAccurate(xs[i], ys[i]);
      EXPECT_TRUE(ok);
      failures += !ok;
    }
  }
}

TEST(VecExp, RoundsDenormalResultsToWithinOneStep) {
  for (float x = -103.9f; x < -87.3f; x += 0.0137f) EXPECT_TRUE(ExpIsAccurate(x, vec_exp(x)));
  EXPECT_TRUE(ExpIsAccurate(-100.0f, vec_exp(-100.0f)));
  EXPECT_GT(vec_exp(-100.0f), 0.0f);
  EXPECT_LT(vec_exp(-100.0f), 0x1p-126f);  // a denormal, not flushed to zero
  EXPECT_EQ(vec_exp(-103.9f), 0x1p-149f);  // e^-103.9 ~ 1.3e-45 rounds to the smallest denormal
}

TEST(VecExp, HandlesTheEdgesOfTheRange) {
  EXPECT_EQ(vec_exp(0.0f), 1.0f);
  EXPECT_EQ(vec_exp(-0.0f), 1.0f);
  EXPECT_TRUE(ExpIsAccurate(-87.3f, vec_exp(-87.3f)));  // near the smallest normal result
  EXPECT_TRUE(ExpIsAccurate(88.7f, vec_exp(88.7f)));    // near the largest finite result
  EXPECT_TRUE(std::isfinite(vec_exp(88.72f)));
  EXPECT_EQ(vec_exp(88.73f), kInf);
  EXPECT_EQ(vec_exp(89.0f), kInf);
  EXPECT_EQ(vec_exp(1000.0f), kInf);
  EXPECT_EQ(vec_exp(kInf), kInf);
  EXPECT_EQ(vec_exp(-105.0f), 0.0f);
  EXPECT_EQ(vec_exp(-1000.0f), 0.0f);
  EXPECT_EQ(vec_exp(-kInf), 0.0f);
  EXPECT_TRUE(std::isnan(vec_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(vec_exp(-std::numeric_limits<float>::quiet_NaN())));
}

// Kernels use vectorised loops for dense rows and scalar loops for strided ones; both must
// give the same bits.
TEST(VecExp, GivesTheSameBitsInAVectorisedLoopAsOneAtATime) {
  float (*volatile scalar)(float) = [](float x) { return vec_exp(x); };
  std::vector<float> xs;
  for (float x = -110.0f; x < 95.0f; x += 0.173f) xs.push_back(x);
  xs.insert(xs.end(), {-kInf, kInf, 0.0f, -0.0f});
  std::vector<float> ys(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) ys[i] = vec_exp(xs[i]);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(ys[i], scalar(xs[i])) << "x = " << xs[i];
}

TEST(VecReductions, SumF64AddsEveryElementIncludingTheTail) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 0.5f;
  EXPECT_DOUBLE_EQ(sum_f64(x.data(), 37), 37 * 36 / 2 + 18.5);
  EXPECT_EQ(sum_f64(x.data(), 0), 0.0);
}

TEST(VecReductions, MaxF32FindsTheMaximumAnywhereAndIgnoresNaN) {
  for (size_t at : {0u, 5u, 16u, 33u, 36u}) {
    std::vector<float> x(37, -3.0f);
    x[at] = 7.0f;
    x[(at + 1) % x.size()] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(max_f32(x.data(), 37), 7.0f) << "maximum at " << at;
  }
  const std::vector<float> masked(20, -kInf);
  EXPECT_EQ(max_f32(masked.data(), 20), -kInf);
  EXPECT_EQ(max_f32(masked.data(), 0), -kInf);
}

}  // namespace
}  // namespace tensorpc::cpu
