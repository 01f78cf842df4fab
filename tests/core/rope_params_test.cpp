// rope's parameters: what Context::rope accepts and how it packs them into
// the node (op.h), and that validate_node — what a server runs on a node from
// the wire — refuses every malformed rope node with an error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/validate.h"
#include "tensorpc/context.h"
#include "test_util.h"

namespace tensorpc {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

::testing::AssertionResult names_all(const std::string& msg, std::initializer_list<std::string> needles) {
  for (const std::string& n : needles) {
    if (msg.find(n) == std::string::npos)
      return ::testing::AssertionFailure() << "\"" << msg << "\" does not name \"" << n << "\"";
  }
  return ::testing::AssertionSuccess();
}

class RopeParamsTest : public ::testing::Test {
 protected:
  // Passes when building throws an Error whose message names every needle.
  ::testing::AssertionResult build_refused(const RopeParams& p, Tensor* factors,
                                           std::initializer_list<std::string> needles) {
    try {
      ctx.rope(x, pos, p, factors);
    } catch (const Error& e) {
      if (e.status().code() != StatusCode::invalid_argument) return ::testing::AssertionFailure() << e.what();
      return names_all(e.what(), needles);
    }
    return ::testing::AssertionFailure() << "was built";
  }
  ::testing::AssertionResult node_refused(const Tensor& node, std::initializer_list<std::string> needles) {
    const Status s = validate_node(node);
    if (s.ok()) return ::testing::AssertionFailure() << "was accepted";
    if (s.code() != StatusCode::invalid_argument) return ::testing::AssertionFailure() << s.to_string();
    return names_all(s.message(), needles);
  }
  static RopeParams yarn() { return test::yarn_rope_params(kRopeNeox); }

  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {64, 2, 4});
  Tensor* pos = ctx.new_tensor(DType::i32, {4});
  Tensor* factors = ctx.new_tensor(DType::f32, {32});
};

// ---- packing ---------------------------------------------------------------------

TEST_F(RopeParamsTest, PlainRopeIsPackedAsBefore) {
  RopeParams p;
  p.n_dims = 32;
  p.mode = kRopeNeox;
  p.freq_base = 500000.0f;
  p.freq_scale = 0.5f;
  const Tensor* y = ctx.rope(x, pos, p);
  EXPECT_EQ(y->param<int32_t>(kRopeParamNDims), 32);
  EXPECT_EQ(y->param<int32_t>(kRopeParamMode), kRopeNeox) << "no YaRN bit";
  EXPECT_EQ(y->param<float>(kRopeParamFreqBase), 500000.0f);
  EXPECT_EQ(y->param<float>(kRopeParamFreqScale), 0.5f);
  for (int i = kRopeParamExtFactor; i <= kRopeParamCorrHigh; ++i) EXPECT_EQ(y->params[i], 0) << "slot " << i;
  EXPECT_EQ(y->src[2], nullptr);
  EXPECT_EQ(y->params, ctx.rope(x, pos, 32, kRopeNeox, 500000.0f, 0.5f)->params) << "the older overload forwards";
}

TEST_F(RopeParamsTest, YarnPacksItsFactorsAndTheRampInPairs) {
  const Tensor* y = ctx.rope(x, pos, yarn(), factors);
  EXPECT_EQ(y->param<int32_t>(kRopeParamMode), kRopeNeox | kRopeYarnBit);
  EXPECT_EQ(y->param<float>(kRopeParamExtFactor), 1.0f);
  EXPECT_EQ(y->param<float>(kRopeParamAttnFactor), 1.0f);
  // 64 · ln(4096 / (2π · 32)) / (2 ln 10000) = 10.47 → 10; with 1 turn 22.5 → 23.
  EXPECT_EQ(y->param<float>(kRopeParamCorrLow), 10.0f);
  EXPECT_EQ(y->param<float>(kRopeParamCorrHigh), 23.0f);
  EXPECT_EQ(y->src[2], factors);
}

TEST_F(RopeParamsTest, TheRampIsClampedToTheRotatedDims) {
  RopeParams p = yarn();
  p.freq_base = 100.0f;
  p.n_ctx_orig = 1 << 30;  // every pair turns more than beta_fast times
  const Tensor* long_ctx = ctx.rope(x, pos, p);
  EXPECT_EQ(long_ctx->param<float>(kRopeParamCorrLow), 63.0f);
  EXPECT_EQ(long_ctx->param<float>(kRopeParamCorrHigh), 63.0f);
  p.n_ctx_orig = 1;  // none does
  const Tensor* short_ctx = ctx.rope(x, pos, p);
  EXPECT_EQ(short_ctx->param<float>(kRopeParamCorrLow), 0.0f);
  EXPECT_EQ(short_ctx->param<float>(kRopeParamCorrHigh), 0.0f);
}

TEST_F(RopeParamsTest, AnAttnFactorAloneSetsTheYarnBit) {
  RopeParams p;
  p.n_dims = 64;
  p.attn_factor = 0.5f;
  const Tensor* y = ctx.rope(x, pos, p);
  EXPECT_EQ(y->param<int32_t>(kRopeParamMode), kRopeNormal | kRopeYarnBit);
  EXPECT_EQ(y->param<float>(kRopeParamExtFactor), 0.0f);
  EXPECT_EQ(y->param<float>(kRopeParamAttnFactor), 0.5f);
}

// ---- Context's rules -----------------------------------------------------------------

TEST_F(RopeParamsTest, ContextRefusesFreqFactorsOfTheWrongTypeOrShape) {
  EXPECT_TRUE(build_refused(yarn(), ctx.new_tensor(DType::f16, {32}), {"rope", "freq_factors", "f32"}));
  EXPECT_TRUE(build_refused(yarn(), ctx.new_tensor(DType::f32, {31}), {"rope", "freq_factors", "[n_dims/2] = [32]"}));
  EXPECT_TRUE(build_refused(yarn(), ctx.new_tensor(DType::f32, {32, 2}), {"rope", "freq_factors"}));
  EXPECT_TRUE(build_refused(yarn(), ctx.new_tensor(DType::f32, {64}), {"rope", "freq_factors"}));
}

TEST_F(RopeParamsTest, ContextRefusesParamsOutOfRange) {
  RopeParams p = yarn();
  p.n_dims = 63;
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "n_dims 63"}));
  p = yarn();
  p.freq_base = kNaN;
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "freq_base nan"}));
  p.freq_base = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "freq_base inf"}));
  p = yarn();
  p.freq_scale = 0.0f;
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "freq_scale"}));
  p = yarn();
  p.ext_factor = 1.5f;
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "ext_factor 1.5", "[0, 1]"}));
  p.ext_factor = kNaN;
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "ext_factor nan"}));
  p = yarn();
  p.attn_factor = 0.0f;
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "attn_factor"}));
  p = yarn();
  p.n_ctx_orig = 0;
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "n_ctx_orig"}));
  p = yarn();
  p.beta_slow = kNaN;
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "beta_slow nan"}));
  p = yarn();
  p.freq_base = 1.0f;  // every pair turns at the same rate: no ramp to place
  EXPECT_TRUE(build_refused(p, nullptr, {"rope", "YaRN needs freq_base > 1"}));
}

TEST_F(RopeParamsTest, YarnInputsAreIgnoredWhileYarnIsOff) {
  RopeParams p;
  p.n_dims = 64;
  p.n_ctx_orig = 0;
  p.beta_fast = kNaN;
  EXPECT_NO_THROW(ctx.rope(x, pos, p));
}

// ---- nodes from the wire -----------------------------------------------------------------

TEST_F(RopeParamsTest, ValidationAcceptsEveryRopeContextBuilds) {
  RopeParams p = yarn();
  p.attn_factor = 0.75f;
  EXPECT_TRUE(validate_node(*ctx.rope(x, pos, p, factors)).ok());
  EXPECT_TRUE(validate_node(*ctx.rope(x, pos, p)).ok());
  EXPECT_TRUE(validate_node(*ctx.rope(x, pos, 64, kRopeNormal)).ok());
  EXPECT_TRUE(validate_node(*ctx.rope(x, pos, 64, kRopeNormal, 10000.0f, 0.5f)).ok());
}

TEST_F(RopeParamsTest, ValidationRefusesMalformedFreqFactors) {
  Tensor n = *ctx.rope(x, pos, yarn(), factors);
  n.src[2] = ctx.new_tensor(DType::i32, {32});
  EXPECT_TRUE(node_refused(n, {"rope", "freq_factors", "f32"}));
  n.src[2] = ctx.new_tensor(DType::f32, {16});
  EXPECT_TRUE(node_refused(n, {"rope", "freq_factors", "[16, 1, 1, 1] f32"}));
  n.src[2] = ctx.new_tensor(DType::f32, {32, 1, 2});
  EXPECT_TRUE(node_refused(n, {"rope", "freq_factors"}));
}

TEST_F(RopeParamsTest, ValidationRefusesScalarParamsOutOfRange) {
  const Tensor good = *ctx.rope(x, pos, yarn());
  Tensor n = good;
  n.set_param(kRopeParamNDims, int32_t{7});
  EXPECT_TRUE(node_refused(n, {"rope", "n_dims 7"}));
  n = good;
  n.set_param(kRopeParamNDims, int32_t{-2});
  EXPECT_TRUE(node_refused(n, {"rope", "n_dims -2"}));
  n = good;
  n.set_param(kRopeParamMode, kRopeNeox | kRopeYarnBit | (1 << 12));
  EXPECT_TRUE(node_refused(n, {"rope", "mode"}));
  n = good;
  n.set_param(kRopeParamFreqBase, kNaN);
  EXPECT_TRUE(node_refused(n, {"rope", "freq_base nan"}));
  n = good;
  n.set_param(kRopeParamFreqScale, -1.0f);
  EXPECT_TRUE(node_refused(n, {"rope", "freq_scale"}));
  n = good;
  n.set_param(kRopeParamExtFactor, kNaN);
  EXPECT_TRUE(node_refused(n, {"rope", "ext_factor nan"}));
  n = good;
  n.set_param(kRopeParamAttnFactor, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(node_refused(n, {"rope", "attn_factor inf"}));
}

TEST_F(RopeParamsTest, ValidationRefusesARampOutsideTheRotatedDims) {
  const Tensor good = *ctx.rope(x, pos, yarn());
  Tensor n = good;
  n.set_param(kRopeParamCorrLow, kNaN);
  EXPECT_TRUE(node_refused(n, {"rope", "corr_low nan"}));
  n = good;
  n.set_param(kRopeParamCorrHigh, 64.0f);
  EXPECT_TRUE(node_refused(n, {"rope", "corr_high 64", "[0, n_dims - 1]"}));
  n = good;
  n.set_param(kRopeParamCorrLow, -1.0f);
  EXPECT_TRUE(node_refused(n, {"rope", "corr_low -1"}));
}

TEST_F(RopeParamsTest, ValidationRefusesYarnSlotsWithoutTheYarnBit) {
  Tensor n = *ctx.rope(x, pos, yarn());
  n.set_param(kRopeParamMode, kRopeNeox);
  EXPECT_TRUE(node_refused(n, {"rope", "param 4", "no YaRN bit"}));
  n = *ctx.rope(x, pos, 64, kRopeNormal);
  n.set_param(kRopeParamCorrHigh, 3.0f);
  EXPECT_TRUE(node_refused(n, {"rope", "param 7"}));
}

// ---- tanh --------------------------------------------------------------------------------

TEST_F(RopeParamsTest, TanhIsAnElementwiseF32Op) {
  const Tensor* y = ctx.tanh(x);
  EXPECT_EQ(y->op, Op::tanh);
  EXPECT_EQ(y->ne, x->ne);
  EXPECT_STREQ(name_of(Op::tanh), "tanh");
  EXPECT_TRUE(validate_node(*y).ok());
  Tensor n = *y;
  n.src[1] = x;
  EXPECT_TRUE(node_refused(n, {"tanh", "source 1"}));
  try {
    ctx.tanh(pos);
    ADD_FAILURE() << "tanh of i32 was built";
  } catch (const Error& e) {
    EXPECT_TRUE(names_all(e.what(), {"tanh", "f32"}));
  }
}

}  // namespace
}  // namespace tensorpc
