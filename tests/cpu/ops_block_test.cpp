// A small transformer-block graph on the CPU device: every op's output feeds
// the next, views and copies included, and the whole chain matches the same
// chain of references.
//
//   h  = rms_norm(x)
//   q  = rope(W_q h), k = rope(W_k h)              heads of 16 dims, neox mode
//   p  = soft_max(k^T q / sqrt(16) + causal mask)  per head
//   o  = v p                                      v = W_v h, per head
//   y  = swiglu(W_g o, W_u o)
//
// Weights are f32 and f16 (their stored values are the reference's), so the
// only differences are float rounding: 1e-4 relative plus 1e-5 absolute.
#include <cmath>

#include "test_util.h"

namespace tensorpc::test {
namespace {

class TransformerBlockTest : public CpuOpTest {};
INSTANTIATE_TEST_SUITE_P(Cpu, TransformerBlockTest, ::testing::ValuesIn(all_cpu_configs()), CpuConfigName());

TEST_P(TransformerBlockTest, AttentionAndSwigluGraphMatchesTheChainedReference) {
  const int64_t D = 64, T = 6, Hd = 16, H = 4, F = 32;
  const float kScale = 1.0f / std::sqrt(static_cast<float>(Hd));
  const std::vector<int32_t> positions = {0, 1, 2, 3, 4, 5};

  Context ctx;
  Tensor* x = input(ctx, DType::f32, {D, T}, "x");
  Tensor* pos = input(ctx, DType::i32, {T}, "positions");
  Tensor* mask = input(ctx, DType::f32, {T, T}, "mask");
  Tensor* wq = input(ctx, DType::f32, {D, D}, "wq");
  Tensor* wk = input(ctx, DType::f16, {D, D}, "wk");
  Tensor* wv = input(ctx, DType::f32, {D, D}, "wv");
  Tensor* wg = input(ctx, DType::f16, {D, F}, "wg");
  Tensor* wu = input(ctx, DType::f32, {D, F}, "wu");

  Tensor* h = ctx.rms_norm(x, 1e-5f);
  Tensor* q = ctx.rope(ctx.reshape(ctx.mul_mat(wq, h), {Hd, H, T}), pos, Hd, kRopeNeox);
  Tensor* k = ctx.rope(ctx.reshape(ctx.mul_mat(wk, h), {Hd, H, T}), pos, Hd, kRopeNeox);
  Tensor* qp = ctx.permute(q, 0, 2, 1, 3);                                     // [Hd, T, H]
  Tensor* kp = ctx.permute(k, 0, 2, 1, 3);                                     // [Hd, T, H]
  Tensor* p = ctx.soft_max(ctx.mul_mat(kp, qp), mask, kScale);                  // [T, T, H]
  Tensor* v = ctx.reshape(ctx.mul_mat(wv, h), {Hd, H, T});
  Tensor* vt = ctx.cont(ctx.permute(v, 1, 2, 0, 3));                           // [T, Hd, H]
  Tensor* o = ctx.mul_mat(vt, p);                                              // [Hd, T, H]
  Tensor* o2 = ctx.reshape(ctx.cont(ctx.permute(o, 0, 2, 1, 3)), {D, T});      // [D, T]
  Tensor* y = ctx.swiglu(ctx.mul_mat(wg, o2), ctx.mul_mat(wu, o2));            // [F, T]
  ASSERT_EQ(shape_of(y), (Shape{F, T, 1, 1}));

  GraphRun run(dev(), {y, p});  // p is read too, so it is an output
  auto weights = [&](Tensor* w, uint32_t seed) {
    return run.write(w, random_floats(w->nelements(), seed, -0.25f, 0.25f));
  };
  const auto vx = run.write(x, random_floats(x->nelements(), 60, -2, 2));
  run.write_i32(pos, positions);
  const HostTensor hmask = ref::causal_mask(T, T, 0);
  run.write(mask, to_float(hmask));
  const HostTensor Wq({D, D, 1, 1}, weights(wq, 61)), Wk({D, D, 1, 1}, weights(wk, 62)),
      Wv({D, D, 1, 1}, weights(wv, 63)), Wg({D, F, 1, 1}, weights(wg, 64)), Wu({D, F, 1, 1}, weights(wu, 65));
  run.compute();

  const HostTensor rh = ref::rms_norm(HostTensor({D, T, 1, 1}, vx), 1e-5);
  const HostTensor rq = ref::rope(ref::reshape(ref::mul_mat(Wq, rh), {Hd, H, T, 1}), positions, Hd, kRopeNeox, 10000, 1);
  const HostTensor rk = ref::rope(ref::reshape(ref::mul_mat(Wk, rh), {Hd, H, T, 1}), positions, Hd, kRopeNeox, 10000, 1);
  const HostTensor rp = ref::soft_max(ref::mul_mat(ref::permute(rk, {0, 2, 1, 3}), ref::permute(rq, {0, 2, 1, 3})),
                                      &hmask, kScale);
  const HostTensor rv = ref::reshape(ref::mul_mat(Wv, rh), {Hd, H, T, 1});
  const HostTensor ro = ref::mul_mat(ref::permute(rv, {1, 2, 0, 3}), rp);
  const HostTensor ro2 = ref::reshape(ref::permute(ro, {0, 2, 1, 3}), {D, T, 1, 1});
  const HostTensor want = ref::binary(ref::mul_mat(Wg, ro2), ref::mul_mat(Wu, ro2),
                                      [](double g, double u) { return ref::silu(g) * u; });

  EXPECT_TRUE(all_near(run.read(p), rp.v, Tolerance{1e-4, 1e-5})) << "attention probabilities";
  EXPECT_TRUE(all_near(run.read(y), want.v, Tolerance{1e-4, 1e-5})) << "block output";
}

}  // namespace
}  // namespace tensorpc::test
