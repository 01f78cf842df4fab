// mul_mat on the CPU device: a [K,M,…] in f32, f16, q8_0, q4_0 or mxfp4 times f32
// b [K,N,…], against a double-precision reference.
//
// How results are judged. The reference multiplies the weights exactly as
// stored (the test builds a's bytes itself and decodes them) with b exactly.
// Per output the allowed error is
//   f32 weights:   1e-5 * S            S = sum_k |a_k| |b_k|
//   f16 weights:   1e-3 * S
//   q8_0/q4_0/mxfp4: 1e-5 * S + sum_k |a_k| * e_k
// where e_k = amax(b's block holding k) * (1/254 + 1/2048) is the largest
// error of quantizing b to q8_0 (half a step, plus the fp16 rounding of the
// block scale): quantized weights are multiplied with q8_0 activations, and
// that rounding is the only error allowed beyond float summation.
#include <algorithm>
#include <tuple>

#include "test_util.h"

namespace tensorpc::test {
namespace {

using MulMatParam = std::tuple<DType, CpuConfig>;

class MulMatTest : public ::testing::TestWithParam<MulMatParam> {
 protected:
  void SetUp() override { dev_ = make_device(std::get<1>(GetParam())); }
  DType weight_type() const { return std::get<0>(GetParam()); }
  CpuDevice& dev() { return *dev_; }

 private:
  std::unique_ptr<CpuDevice> dev_;
};

INSTANTIATE_TEST_SUITE_P(Cpu, MulMatTest,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::q8_0, DType::q4_0,
                                                              DType::mxfp4),
                                            ::testing::ValuesIn(all_cpu_configs())),
                         [](const ::testing::TestParamInfo<MulMatParam>& info) {
                           return std::string(name_of(std::get<0>(info.param))) + "_" +
                                  config_name(std::get<1>(info.param));
                         });

struct Expected {
  std::vector<double> value;
  std::vector<double> tolerance;
};

// The reference product and the per-output tolerance described at the top.
Expected expected_mul_mat(DType weights, const HostTensor& a, const HostTensor& b) {
  const int64_t K = a.ne[0];
  const bool quantized = is_quantized(weights);
  HostTensor b_err(b.ne);  // e_k for every element of b
  if (quantized) {
    for (int64_t r = 0; r < b.rows(); ++r)
      for (int64_t k0 = 0; k0 < K; k0 += kQBlock) {
        const size_t base = static_cast<size_t>(r * K + k0);
        double amax = 0;
        for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(b.v[base + j]));
        for (int j = 0; j < kQBlock; ++j) b_err.v[base + j] = amax * (1.0 / 254 + 1.0 / 2048);
      }
  }
  const double rel = weights == DType::f16 ? 1e-3 : 1e-5;
  Expected e;
  const int64_t M = a.ne[1], N = b.ne[1];
  const int64_t r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
  for (int64_t i3 = 0; i3 < b.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < b.ne[2]; ++i2)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          double sum = 0, abs_sum = 0, q_err = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double x = a(k, m, i2 / r2, i3 / r3);
            const double y = b(k, n, i2, i3);
            sum += x * y;
            abs_sum += std::fabs(x * y);
            q_err += std::fabs(x) * b_err(k, n, i2, i3);
          }
          e.value.push_back(sum);
          e.tolerance.push_back(rel * abs_sum + q_err + 1e-6);
        }
  return e;
}

// Computes mul_mat(a, b) for a of `weights` type with shape a_ne and f32 b of
// shape b_ne, and checks it.
void check_mul_mat(CpuDevice& dev, DType weights, Shape a_ne, Shape b_ne, uint32_t seed) {
  SCOPED_TRACE("a " + shape_str(a_ne) + " " + name_of(weights) + ", b " + shape_str(b_ne));
  Context ctx;
  Tensor* a = input(ctx, weights, a_ne, "a");
  Tensor* b = input(ctx, DType::f32, b_ne, "b");
  Tensor* c = ctx.mul_mat(a, b);
  ASSERT_EQ(c->type, DType::f32);
  ASSERT_EQ(shape_of(c), (Shape{a_ne[1], b_ne[1], b_ne[2], b_ne[3]}));

  GraphRun run(dev, {c});
  const auto va = run.write_raw(a, random_encoded(weights, a->nelements(), seed));
  const auto vb = run.write(b, random_floats(b->nelements(), seed + 1));
  run.compute();

  const Expected want = expected_mul_mat(weights, HostTensor(a_ne, va), HostTensor(b_ne, vb));
  EXPECT_TRUE(all_near_each(run.read(c), want.value, want.tolerance));
}

TEST_P(MulMatTest, MatchesReferenceForEveryKMAndN) {
  uint32_t seed = 100;
  for (int64_t K : {32, 64, 256, 4096})
    for (int64_t M : {1, 3, 17, 64, 65})
      for (int64_t N : {1, 3, 17, 64, 65}) {
        check_mul_mat(dev(), weight_type(), {K, M, 1, 1}, {K, N, 1, 1}, seed++);
        if (HasFatalFailure()) return;
      }
}

TEST_P(MulMatTest, BatchesOverDims2And3WithoutBroadcast) {
  check_mul_mat(dev(), weight_type(), {64, 17, 2, 3}, {64, 5, 2, 3}, 7);
}

// b's matrix (i2, i3) is multiplied by a's (i2 / (b.ne[2]/a.ne[2]), i3 / (b.ne[3]/a.ne[3])).
TEST_P(MulMatTest, BroadcastsAOverBsDims2And3) {
  check_mul_mat(dev(), weight_type(), {64, 17, 2, 1}, {64, 5, 4, 3}, 8);
  check_mul_mat(dev(), weight_type(), {32, 3, 1, 1}, {32, 65, 3, 2}, 9);
  check_mul_mat(dev(), weight_type(), {256, 65, 1, 2}, {256, 1, 3, 4}, 10);
}

// b is a permuted view of x [K, N, H]: b = [K, H, N], rows dense but strided.
TEST_P(MulMatTest, ReadsAPermutedB) {
  const int64_t K = 64, M = 17, N = 5, H = 3;
  Context ctx;
  Tensor* a = input(ctx, weight_type(), {K, M}, "a");
  Tensor* x = input(ctx, DType::f32, {K, N, H}, "x");
  Tensor* b = ctx.permute(x, 0, 2, 1, 3);
  ASSERT_EQ(shape_of(b), (Shape{K, H, N, 1}));
  ASSERT_FALSE(b->is_contiguous());
  Tensor* c = ctx.mul_mat(a, b);

  GraphRun run(dev(), {c});
  const auto va = run.write_raw(a, random_encoded(weight_type(), a->nelements(), 11));
  const auto vx = run.write(x, random_floats(x->nelements(), 12));
  run.compute();

  const HostTensor hb = ref::permute(HostTensor({K, N, H, 1}, vx), {0, 2, 1, 3});
  const Expected want = expected_mul_mat(weight_type(), HostTensor({K, M, 1, 1}, va), hb);
  EXPECT_TRUE(all_near_each(run.read(c), want.value, want.tolerance));
}

// b is x [N, K] transposed: its elements are ne[1]-major, so b's rows are not dense.
TEST_P(MulMatTest, ReadsATransposedBAndItsContiguousCopy) {
  const int64_t K = 96, M = 65, N = 17;
  Context ctx;
  Tensor* a = input(ctx, weight_type(), {K, M}, "a");
  Tensor* x = input(ctx, DType::f32, {N, K}, "x");
  Tensor* bt = ctx.transpose(x);
  ASSERT_FALSE(bt->rows_are_contiguous());
  Tensor* c_view = ctx.mul_mat(a, bt);
  Tensor* c_cont = ctx.mul_mat(a, ctx.cont(bt));

  GraphRun run(dev(), {c_view, c_cont});
  const auto va = run.write_raw(a, random_encoded(weight_type(), a->nelements(), 13));
  const auto vx = run.write(x, random_floats(x->nelements(), 14));
  run.compute();

  const HostTensor hb = ref::permute(HostTensor({N, K, 1, 1}, vx), {1, 0, 2, 3});
  const Expected want = expected_mul_mat(weight_type(), HostTensor({K, M, 1, 1}, va), hb);
  EXPECT_TRUE(all_near_each(run.read(c_view), want.value, want.tolerance));
  EXPECT_TRUE(all_near_each(run.read(c_cont), want.value, want.tolerance));
}

// Weights placed by the caller in a buffer of their own are read from there.
TEST_P(MulMatTest, ReadsWeightsFromTheirOwnBuffer) {
  const int64_t K = 128, M = 33, N = 3;
  Context weights_ctx;
  Tensor* w = weights_ctx.new_tensor(weight_type(), {K, M}, "w");
  w->flags |= kFlagWeight;
  auto buf = dev().allocate(w->nbytes());
  ASSERT_TRUE(buf.ok()) << buf.status().to_string();
  ASSERT_TRUE(buf.value()->place(*w, 0).ok());
  const auto bytes = random_encoded(weight_type(), w->nelements(), 15);
  ASSERT_TRUE(buf.value()->set(*w, bytes.data(), 0, bytes.size()).ok());

  Context ctx;
  Tensor* b = input(ctx, DType::f32, {K, N}, "b");
  Tensor* c = ctx.mul_mat(w, b);
  GraphRun run(dev(), {c});
  EXPECT_EQ(w->buffer, buf.value().get()) << "the allocator must leave placed weights where they are";
  const auto vb = run.write(b, random_floats(b->nelements(), 16));
  run.compute();

  const Expected want = expected_mul_mat(weight_type(), HostTensor({K, M, 1, 1}, decode(weight_type(), bytes.data(), K * M)),
                                         HostTensor({K, N, 1, 1}, vb));
  EXPECT_TRUE(all_near_each(run.read(c), want.value, want.tolerance));
}

// At decode each thread reads its own part of the weight rows and then takes
// pieces from the far end of the others' parts. Five threads on this
// machine's few cores are descheduled often, so parts are finished by other
// threads; every row must still be computed exactly once, whatever the split.
TEST_P(MulMatTest, DecodeRowsSplitIntoPartsAreEachComputedOnce) {
  auto device = std::make_unique<CpuDevice>(
      CpuDeviceOptions{.threads = 5, .portable_kernels = std::get<1>(GetParam()).portable_kernels,
                       .min_work_per_node_for_threads = 0});
  uint32_t seed = 700;
  for (int64_t M : {4, 79, 80, 81, 1000, 1027})
    for (int64_t N : {1, 2, 7}) {
      for (int rep = 0; rep < 3; ++rep) {
        check_mul_mat(*device, weight_type(), {256, M, 1, 1}, {256, N, 1, 1}, seed++);
        if (HasFatalFailure()) return;
      }
    }
}

// Weights whose rows all lie on one (a view with a row stride of 0, as a
// hostile graph can ask for): decode computes the same product for every
// row, and the kernels' prefetch distance, measured in rows, stays defined.
TEST_P(MulMatTest, WeightRowsOfStrideZeroGiveTheOneRowsProductEverywhere) {
  const int64_t K = 256, M = 40;
  Context ctx;
  Tensor* row = input(ctx, weight_type(), {K, 1}, "row");
  Tensor* a = ctx.view(row, {K, M}, {row->nb[0], 0}, 0);
  Tensor* b = input(ctx, DType::f32, {K, 1}, "b");
  Tensor* c = ctx.mul_mat(a, b);
  GraphRun run(dev(), {c});
  const auto va = run.write_raw(row, random_encoded(weight_type(), K, 801));
  const auto vb = run.write(b, random_floats(K, 802));
  run.compute();
  const Expected one = expected_mul_mat(weight_type(), HostTensor({K, 1, 1, 1}, va), HostTensor({K, 1, 1, 1}, vb));
  const std::vector<float> got = run.read(c);
  ASSERT_EQ(got.size(), static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) EXPECT_NEAR(got[static_cast<size_t>(m)], one.value[0], one.tolerance[0]) << "row " << m;
}

class MulMatKernelsTest : public ::testing::TestWithParam<DType> {
 protected:
  DType weight_type() const { return GetParam(); }
};
INSTANTIATE_TEST_SUITE_P(Cpu, MulMatKernelsTest,
                         ::testing::Values(DType::f32, DType::f16, DType::q8_0, DType::q4_0, DType::mxfp4),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(name_of(info.param)); });

// The portable and the best kernels, with 1 and 2 threads, give the same
// products within the tolerance, on identical inputs.
TEST_P(MulMatKernelsTest, PortableAndBestKernelsAgree) {
  const int64_t K = 256, M = 65, N = 17;
  const auto a_bytes = random_encoded(weight_type(), K * M, 17);
  const auto b_values = random_floats(K * N, 18);
  std::vector<std::vector<float>> results;
  for (const CpuConfig& cfg : all_cpu_configs()) {
    auto device = make_device(cfg);
    Context ctx;
    Tensor* a = input(ctx, weight_type(), {K, M}, "a");
    Tensor* b = input(ctx, DType::f32, {K, N}, "b");
    Tensor* c = ctx.mul_mat(a, b);
    GraphRun run(*device, {c});
    run.write_raw(a, a_bytes);
    run.write(b, b_values);
    run.compute();
    results.push_back(run.read(c));
  }
  const Expected want = expected_mul_mat(weight_type(), HostTensor({K, M, 1, 1}, decode(weight_type(), a_bytes.data(), K * M)),
                                         HostTensor({K, N, 1, 1}, b_values));
  for (size_t i = 1; i < results.size(); ++i) {
    SCOPED_TRACE(config_name(all_cpu_configs()[i]) + " against " + config_name(all_cpu_configs()[0]));
    EXPECT_TRUE(all_near_each(results[i], to_double(results[0]), want.tolerance));
  }
}

}  // namespace
}  // namespace tensorpc::test
