// rope's variants on the CPU device — frequency factors, linear scaling, YaRN,
// the magnitude factor — against a double-precision reference written from
// their definitions, for normal and neox pairs and partial rotation.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "test_util.h"

namespace tensorpc::test {
namespace {

class RopeVariantsTest : public CpuOpTest {};
INSTANTIATE_TEST_SUITE_P(Cpu, RopeVariantsTest, ::testing::ValuesIn(all_cpu_configs()), CpuConfigName());

// Pair i of a head (dims (2i, 2i+1), or (i, i + n_dims/2) in neox mode) at
// position pos turns by
//   extrap = pos · base^(-2i/n_dims) / factor_i,  interp = extrap · freq_scale
//   theta  = interp (1 - mix_i) + extrap · mix_i
// where, with YaRN, mix_i = ext_factor · (1 - clamp((i - low) / max(0.001, high - low), 0, 1)),
// low = max(0, floor(corr(beta_fast))), high = min(n_dims - 1, ceil(corr(beta_slow))),
// corr(n) = n_dims · ln(n_ctx_orig / (2π n)) / (2 ln base); without it mix_i = 0.
// The rotated pair is scaled by attn_factor, and under YaRN also by
// 1 + 0.1 ln(1/freq_scale). Dims from n_dims on are copied.
HostTensor rope_reference(const HostTensor& x, const std::vector<int32_t>& pos, const RopeParams& p,
                          const std::vector<double>& factors) {
  const int n = p.n_dims;
  const double base = p.freq_base;
  const auto corr = [&](double turns) {
    return n * std::log(p.n_ctx_orig / (turns * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  const bool yarn = p.ext_factor != 0;
  const double low = yarn ? std::max(0.0, std::floor(corr(p.beta_fast))) : 0;
  const double high = yarn ? std::min(n - 1.0, std::ceil(corr(p.beta_slow))) : 0;
  double magnitude = p.attn_factor;
  if (yarn) magnitude *= 1 + 0.1 * std::log(1 / static_cast<double>(p.freq_scale));
  HostTensor y = x;
  for (int64_t t = 0; t < x.ne[2]; ++t)
    for (int64_t h = 0; h < x.ne[1]; ++h)
      for (int i = 0; i < n / 2; ++i) {
        const double extrap = pos[t] * std::pow(base, -2.0 * i / n) / (factors.empty() ? 1.0 : factors[i]);
        const double interp = extrap * p.freq_scale;
        double mix = 0;
        if (yarn) mix = p.ext_factor * (1 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0));
        const double theta = interp * (1 - mix) + extrap * mix;
        const int64_t j0 = p.mode == kRopeNeox ? i : 2 * i;
        const int64_t j1 = p.mode == kRopeNeox ? i + n / 2 : 2 * i + 1;
        const double x0 = x(j0, h, t), x1 = x(j1, h, t);
        y(j0, h, t) = (x0 * std::cos(theta) - x1 * std::sin(theta)) * magnitude;
        y(j1, h, t) = (x0 * std::sin(theta) + x1 * std::cos(theta)) * magnitude;
      }
  return y;
}

struct Variant {
  std::string name;
  RopeParams p;
  bool factors = false;  // Llama 3.1-like factors: 1 for fast pairs, up to 8 for slow ones
};

RopeParams params(int n_dims, int mode) {
  RopeParams p;
  p.n_dims = n_dims;
  p.mode = mode;
  return p;
}

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (int mode : {kRopeNormal, kRopeNeox}) {
    const std::string m = mode == kRopeNeox ? "neox" : "normal";
    out.push_back({m + " full", params(64, mode)});
    out.push_back({m + " partial (n_dims 32 of 64)", params(32, mode)});
    out.push_back({m + " freq_factors", params(64, mode), true});
    Variant linear{m + " linear scale 1/4", params(64, mode)};
    linear.p.freq_scale = 0.25f;
    out.push_back(linear);
    // A context of 4096 gives a ramp from pair 10 to pair 23 of 32: pairs on
    // both sides and in between.
    Variant yarn{m + " YaRN x4", params(64, mode)};
    yarn.p.freq_scale = 0.25f;
    yarn.p.n_ctx_orig = 4096;
    yarn.p.ext_factor = 1.0f;
    out.push_back(yarn);
    Variant mixed{m + " YaRN half, attn_factor, freq_factors, partial", params(48, mode), true};
    mixed.p.freq_base = 500000.0f;
    mixed.p.freq_scale = 0.125f;
    mixed.p.n_ctx_orig = 8192;
    mixed.p.ext_factor = 0.5f;
    mixed.p.attn_factor = 0.8f;
    mixed.p.beta_fast = 16.0f;
    mixed.p.beta_slow = 2.0f;
    out.push_back(mixed);
    Variant magnitude{m + " attn_factor without YaRN", params(64, mode)};
    magnitude.p.attn_factor = 1.25f;
    out.push_back(magnitude);
  }
  return out;
}

// x [64, 3, 7] at positions from 0 to four times YaRN's original context.
// Angles are exact functions of the position, so the tolerance does not grow
// with it.
TEST_P(RopeVariantsTest, EachVariantMatchesItsDefinition) {
  const int64_t D = 64, H = 3, T = 7;
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 4096, 9000, 16383};
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    Context ctx;
    Tensor* x = input(ctx, DType::f32, {D, H, T}, "x");
    Tensor* pos = input(ctx, DType::i32, {T}, "positions");
    Tensor* factors = v.factors ? input(ctx, DType::f32, {v.p.n_dims / 2}, "freq_factors") : nullptr;
    Tensor* y = ctx.rope(x, pos, v.p, factors);
    ASSERT_EQ(shape_of(y), (Shape{D, H, T, 1}));
    GraphRun run(dev(), {y});
    const auto vx = run.write(x, random_floats(x->nelements(), 50));
    run.write_i32(pos, positions);
    std::vector<double> vf;
    if (factors != nullptr) {
      std::vector<float> f(static_cast<size_t>(v.p.n_dims / 2));
      for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0f + 7.0f * static_cast<float>(i) / static_cast<float>(f.size());
      vf = to_double(run.write(factors, f));
    }
    run.compute();
    const HostTensor want = rope_reference(HostTensor({D, H, T, 1}, vx), positions, v.p, vf);
    EXPECT_TRUE(all_near(run.read(y), want.v, Tolerance{1e-5, 1e-6}));
  }
}

// The YaRN ramp really mixes: pairs below its start turn as unscaled rope
// does, pairs beyond its end as linearly scaled rope does (both times the
// magnitude), so a YaRN result differs from both.
TEST_P(RopeVariantsTest, YarnKeepsFastPairsAndInterpolatesSlowOnes) {
  const int64_t D = 64, T = 1;
  RopeParams yarn = params(D, kRopeNormal);
  yarn.freq_scale = 0.25f;
  yarn.n_ctx_orig = 4096;
  yarn.ext_factor = 1.0f;
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {D, 1, T}, "x");
  Tensor* pos = input(ctx, DType::i32, {T}, "positions");
  Tensor* y = ctx.rope(x, pos, yarn);
  GraphRun run(dev(), {y});
  const auto vx = run.write(x, random_floats(x->nelements(), 51));
  run.write_i32(pos, {3000});
  run.compute();
  const auto got = run.read(y);
  const double m = 1 + 0.1 * std::log(4.0);
  const HostTensor hx({D, 1, T, 1}, vx);
  RopeParams plain = params(D, kRopeNormal);
  const HostTensor fast = rope_reference(hx, {3000}, plain, {});
  plain.freq_scale = 0.25f;
  const HostTensor slow = rope_reference(hx, {3000}, plain, {});
  for (int64_t j = 0; j < 2 * 10; ++j) EXPECT_NEAR(got[j], fast.v[j] * m, 1e-5) << "dim " << j;
  for (int64_t j = 2 * 23; j < D; ++j) EXPECT_NEAR(got[j], slow.v[j] * m, 1e-5) << "dim " << j;
}

TEST_P(RopeVariantsTest, FreqFactorsOfOneChangeNothing) {
  const int64_t D = 32, H = 2, T = 3;
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {D, H, T}, "x");
  Tensor* pos = input(ctx, DType::i32, {T}, "positions");
  Tensor* ones = input(ctx, DType::f32, {D / 2}, "freq_factors");
  Tensor* with = ctx.rope(x, pos, params(D, kRopeNeox), ones);
  Tensor* without = ctx.rope(x, pos, params(D, kRopeNeox));
  GraphRun run(dev(), {with, without});
  run.write(x, random_floats(x->nelements(), 52));
  run.write_i32(pos, {5, 700, 2});
  run.write(ones, std::vector<float>(D / 2, 1.0f));
  run.compute();
  EXPECT_EQ(run.read(with), run.read(without));
}

}  // namespace
}  // namespace tensorpc::test
