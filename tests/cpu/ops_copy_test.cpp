// Copies and lookups on the CPU device: cpy/cont/cast between f32, f16, bf16,
// q8_0 and q4_0 (from non-contiguous sources and into views), get_rows from
// tables of every type (mxfp4 too), concat and argmax.
//
// Expected values come from the test's own decoders of the GGUF byte layouts.
// Conversions between float types must round to the target type (checked to
// a relative 1e-3 for f16, 1e-2 for bf16). Quantizing must stay within the
// per-block bound: with amax the largest |x| of the block,
//   q8_0: amax * (1/254 + 1/2048)   (half a step of amax/127, plus fp16 scale)
//   q4_0: amax / 8 * (1 + 1/256)    (a step of amax/8: the extreme maps to -8,
//                                    the other side may clamp at +7)
#include <algorithm>
#include <cmath>
#include <limits>

#include "test_util.h"

namespace tensorpc::test {
namespace {

class CopyTest : public CpuOpTest {};
INSTANTIATE_TEST_SUITE_P(Cpu, CopyTest, ::testing::ValuesIn(all_cpu_configs()), CpuConfigName());

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
const DType kQuantTypes[] = {DType::q8_0, DType::q4_0};

// The value x takes when stored as `type` (a float type).
double stored_as(DType type, float x) {
  switch (type) {
    case DType::f16: return fp16_to_f32(f32_to_fp16(x));
    case DType::bf16: return bf16_to_f32(f32_to_bf16(x));
    default: return x;
  }
}

std::vector<double> stored_as(DType type, const std::vector<float>& v) {
  std::vector<double> out;
  for (float x : v) out.push_back(stored_as(type, x));
  return out;
}

// The per-block quantization bound of every value of src (rows of ne0 values).
std::vector<double> quantization_bound(DType type, const std::vector<float>& src) {
  std::vector<double> bound(src.size());
  for (size_t b = 0; b < src.size(); b += kQBlock) {
    double amax = 0;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(static_cast<double>(src[b + j])));
    const double e = type == DType::q8_0 ? amax * (1.0 / 254 + 1.0 / 2048) : amax / 8 * (1 + 1.0 / 256);
    for (int j = 0; j < kQBlock; ++j) bound[b + j] = e + 1e-7;
  }
  return bound;
}

std::string pair_name(DType from, DType to) { return std::string(name_of(from)) + " -> " + name_of(to); }

TEST_P(CopyTest, CastBetweenFloatTypesRoundsToTheTarget) {
  for (DType from : kFloatTypes)
    for (DType to : kFloatTypes) {
      SCOPED_TRACE(pair_name(from, to));
      Context ctx;
      Tensor* a = input(ctx, from, {67, 3, 2}, "a");
      Tensor* c = ctx.cast(a, to);
      ASSERT_EQ(c->type, to);
      ASSERT_EQ(shape_of(c), shape_of(a));
      ASSERT_TRUE(c->is_contiguous());
      GraphRun run(dev(), {c});
      const auto va = run.write_raw(a, random_encoded(from, a->nelements(), 20));
      run.compute();
      const auto got = decode(to, run.raw(c).data(), c->nelements());
      EXPECT_TRUE(all_near(got, stored_as(to, va), tolerance_for(to)));
    }
}

TEST_P(CopyTest, CastToQuantizedStaysWithinThePerBlockBound) {
  for (DType from : kFloatTypes)
    for (DType to : kQuantTypes) {
      SCOPED_TRACE(pair_name(from, to));
      Context ctx;
      Tensor* a = input(ctx, from, {96, 5, 2}, "a");
      Tensor* c = ctx.cast(a, to);
      ASSERT_EQ(c->type, to);
      ASSERT_EQ(c->nbytes(), static_cast<uint64_t>(96 / 32 * 10) * block_bytes(to));
      GraphRun run(dev(), {c});
      const auto va = run.write_raw(a, random_encoded(from, a->nelements(), 21));
      run.compute();
      const auto got = decode(to, run.raw(c).data(), c->nelements());
      EXPECT_TRUE(all_near_each(got, to_double(va), quantization_bound(to, va)));
      // read_as_f32 decodes the same blocks the same way.
      EXPECT_TRUE(all_near(run.read(c), to_double(got), Tolerance{0, 0}));
    }
}

TEST_P(CopyTest, CastFromQuantizedDecodesEveryBlock) {
  for (DType from : kQuantTypes)
    for (DType to : kFloatTypes) {
      SCOPED_TRACE(pair_name(from, to));
      Context ctx;
      Tensor* a = input(ctx, from, {128, 3, 2}, "a");
      Tensor* c = ctx.cast(a, to);
      GraphRun run(dev(), {c});
      const auto va = run.write_raw(a, random_encoded(from, a->nelements(), 22));
      run.compute();
      const auto got = decode(to, run.raw(c).data(), c->nelements());
      EXPECT_TRUE(all_near(got, stored_as(to, va), tolerance_for(to)));
    }
}

TEST_P(CopyTest, QuantizeThenDequantizeStaysWithinThePerBlockBound) {
  for (DType q : kQuantTypes) {
    SCOPED_TRACE(name_of(q));
    Context ctx;
    Tensor* a = input(ctx, DType::f32, {256, 7}, "a");
    Tensor* back = ctx.cast(ctx.cast(a, q), DType::f32);
    GraphRun run(dev(), {back});
    // Blocks of very different magnitudes, and one all-zero block.
    std::vector<float> values = random_floats(a->nelements(), 23, -1, 1);
    for (size_t i = 0; i < values.size(); ++i)
      values[i] *= static_cast<float>(std::pow(10.0, static_cast<int>(i / 32 % 5) - 2));
    std::fill(values.begin() + 64, values.begin() + 96, 0.0f);
    const auto va = run.write(a, values);
    run.compute();
    EXPECT_TRUE(all_near_each(run.read(back), to_double(va), quantization_bound(q, va)));
  }
}

TEST_P(CopyTest, WriteFromF32QuantizesWithinThePerBlockBound) {
  for (DType q : kQuantTypes) {
    SCOPED_TRACE(name_of(q));
    Context ctx;
    Tensor* a = input(ctx, q, {64, 3}, "a");
    Tensor* c = ctx.cast(a, DType::f32);
    GraphRun run(dev(), {c});
    const auto values = random_floats(a->nelements(), 24, -3, 3);
    const auto stored = run.write(a, values);
    EXPECT_TRUE(all_near_each(stored, to_double(values), quantization_bound(q, values)));
  }
}

// x [5, 64] transposed is [64, 5] with element stride 5*4 bytes.
TEST_P(CopyTest, ContAndCastMaterialiseATransposedSource) {
  for (DType to : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
    SCOPED_TRACE(std::string("f32 transposed -> ") + name_of(to));
    Context ctx;
    Tensor* x = input(ctx, DType::f32, {5, 64}, "x");
    Tensor* xt = ctx.transpose(x);
    ASSERT_FALSE(xt->rows_are_contiguous());
    Tensor* c = to == DType::f32 ? ctx.cont(xt) : ctx.cast(xt, to);
    ASSERT_EQ(shape_of(c), (Shape{64, 5, 1, 1}));
    ASSERT_TRUE(c->is_contiguous());
    GraphRun run(dev(), {c});
    const auto vx = run.write(x, random_floats(x->nelements(), 25));
    run.compute();
    const HostTensor want = ref::permute(HostTensor({5, 64, 1, 1}, vx), {1, 0, 2, 3});
    const auto got = decode(to, run.raw(c).data(), c->nelements());
    if (is_quantized(to)) {
      EXPECT_TRUE(all_near_each(got, want.v, quantization_bound(to, to_float(want))));
    } else {
      EXPECT_TRUE(all_near(got, stored_as(to, to_float(want)), tolerance_for(to)));
    }
  }
}

TEST_P(CopyTest, ContOfA4dPermutationReordersEveryDim) {
  Context ctx;
  Tensor* x = input(ctx, DType::f16, {6, 5, 4, 3}, "x");
  Tensor* c = ctx.cont(ctx.permute(x, 2, 0, 3, 1));  // -> [5, 3, 6, 4]
  ASSERT_EQ(shape_of(c), (Shape{5, 3, 6, 4}));
  ASSERT_EQ(c->type, DType::f16);
  GraphRun run(dev(), {c});
  const auto vx = run.write_raw(x, random_encoded(DType::f16, x->nelements(), 26));
  run.compute();
  const HostTensor want = ref::permute(HostTensor({6, 5, 4, 3}, vx), {2, 0, 3, 1});
  EXPECT_TRUE(all_near(run.read(c), want.v, Tolerance{0, 0}));
}

// dst is f16 [16, 6] filled with 7; the copy lands in a view of rows 2..4,
// and in a strided view of the right half of every row; the rest is untouched.
TEST_P(CopyTest, CpyWritesIntoAViewAndLeavesTheRestAlone) {
  Context ctx;
  Tensor* dst = input(ctx, DType::f16, {16, 6}, "dst");
  Tensor* x = input(ctx, DType::f32, {3, 16}, "x");
  Tensor* rows = ctx.view(dst, {16, 3}, {2, 32}, 2 * 32);
  Tensor* into_rows = ctx.cpy(ctx.transpose(x), rows);
  ASSERT_TRUE(into_rows->is_view());
  ASSERT_EQ(shape_of(into_rows), (Shape{16, 3, 1, 1}));

  GraphRun run(dev(), {into_rows});
  run.write(dst, std::vector<float>(96, 7.0f));
  const auto vx = run.write(x, random_floats(x->nelements(), 27));
  run.compute();

  const HostTensor xt = ref::permute(HostTensor({3, 16, 1, 1}, vx), {1, 0, 2, 3});
  HostTensor want({16, 6, 1, 1});
  std::fill(want.v.begin(), want.v.end(), 7.0);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < 16; ++i) want(i, r + 2) = stored_as(DType::f16, static_cast<float>(xt(i, r)));
  EXPECT_TRUE(all_near(run.read(dst), want.v, Tolerance{0, 0}));
  EXPECT_TRUE(
      all_near(run.read(into_rows), std::vector<double>(want.v.begin() + 32, want.v.begin() + 80), Tolerance{0, 0}));
}

TEST_P(CopyTest, CpyWritesIntoAStridedViewOfHalfRows) {
  Context ctx;
  Tensor* dst = input(ctx, DType::f32, {16, 6}, "dst");
  Tensor* x = input(ctx, DType::bf16, {8, 6}, "x");
  Tensor* right = ctx.view(dst, {8, 6}, {4, 64}, 8 * 4);
  Tensor* out = ctx.cpy(x, right);

  GraphRun run(dev(), {out});
  run.write(dst, std::vector<float>(96, -1.0f));
  const auto vx = run.write_raw(x, random_encoded(DType::bf16, x->nelements(), 28));
  run.compute();

  HostTensor want({16, 6, 1, 1});
  std::fill(want.v.begin(), want.v.end(), -1.0);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t i = 0; i < 8; ++i) want(8 + i, r) = vx[r * 8 + i];
  EXPECT_TRUE(all_near(run.read(dst), want.v, Tolerance{0, 0}));
}

TEST_P(CopyTest, CpyQuantizesIntoAViewOfQuantizedRows) {
  for (DType q : kQuantTypes) {
    SCOPED_TRACE(name_of(q));
    Context ctx;
    Tensor* dst = input(ctx, q, {64, 5}, "dst");
    Tensor* x = input(ctx, DType::f32, {64, 2}, "x");
    const uint64_t row = dst->nb[1];
    Tensor* rows = ctx.view(dst, {64, 2}, {block_bytes(q), row}, 3 * row);  // rows 3 and 4
    Tensor* out = ctx.cpy(x, rows);
    GraphRun run(dev(), {out});
    const auto before = random_encoded(q, dst->nelements(), 35);
    run.write_raw(dst, before);
    const auto vx = run.write(x, random_floats(x->nelements(), 36));
    run.compute();
    const auto after = run.raw(dst);
    EXPECT_TRUE(std::equal(before.begin(), before.begin() + 3 * row, after.begin())) << "rows 0..2 changed";
    const auto got = decode(q, after.data() + 3 * row, 128);
    EXPECT_TRUE(all_near_each(got, to_double(vx), quantization_bound(q, vx)));
  }
}

// q8_0 -> q4_0 and back: the values are requantized within the target's bound.
TEST_P(CopyTest, CastBetweenQuantizedTypesRequantizes) {
  for (auto [from, to] : {std::pair{DType::q8_0, DType::q4_0}, std::pair{DType::q4_0, DType::q8_0}}) {
    SCOPED_TRACE(pair_name(from, to));
    Context ctx;
    Tensor* a = input(ctx, from, {96, 3}, "a");
    Tensor* c = ctx.cast(a, to);
    GraphRun run(dev(), {c});
    const auto va = run.write_raw(a, random_encoded(from, a->nelements(), 37));
    run.compute();
    const auto got = decode(to, run.raw(c).data(), c->nelements());
    EXPECT_TRUE(all_near_each(got, to_double(va), quantization_bound(to, va)));
  }
}

TEST_P(CopyTest, ContOfQuantizedRowsCopiesTheirBlocks) {
  for (DType q : kQuantTypes) {
    SCOPED_TRACE(name_of(q));
    Context ctx;
    Tensor* a = input(ctx, q, {64, 5}, "a");
    const uint64_t row = a->nb[1];
    Tensor* middle = ctx.view(a, {64, 2}, {block_bytes(q), row}, 2 * row);  // rows 2 and 3
    Tensor* c = ctx.cont(middle);
    ASSERT_EQ(c->type, q);
    GraphRun run(dev(), {c});
    const auto bytes = random_encoded(q, a->nelements(), 29);
    run.write_raw(a, bytes);
    run.compute();
    const std::vector<uint8_t> want(bytes.begin() + 2 * row, bytes.begin() + 4 * row);
    EXPECT_EQ(run.raw(c), want);
  }
}

// a [K, R, B] of every type; rows [n, B] picks, per batch, rows in any order
// and more than once. The result is f32 and exact.
TEST_P(CopyTest, GetRowsPicksRowsOfEveryTableType) {
  for (DType type : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::mxfp4}) {
    SCOPED_TRACE(name_of(type));
    const int64_t K = 64, R = 10, B = 2, n = 5;
    Context ctx;
    Tensor* a = input(ctx, type, {K, R, B}, "table");
    Tensor* rows = input(ctx, DType::i32, {n, B}, "rows");
    Tensor* c = ctx.get_rows(a, rows);
    ASSERT_EQ(c->type, DType::f32);
    ASSERT_EQ(shape_of(c), (Shape{K, n, B, 1}));
    GraphRun run(dev(), {c});
    const auto va = run.write_raw(a, random_encoded(type, a->nelements(), 30));
    const std::vector<int32_t> idx = {9, 0, 4, 4, 7, 3, 3, 8, 1, 0};
    run.write_i32(rows, idx);
    run.compute();

    const HostTensor table({K, R, B, 1}, va);
    HostTensor want({K, n, B, 1});
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < K; ++k) want(k, j, bb) = table(k, idx[bb * n + j], bb);
    EXPECT_TRUE(all_near(run.read(c), want.v, Tolerance{1e-7, 0}));
  }
}

TEST_P(CopyTest, GetRowsWithOneColumnOfIndicesUsesItForEveryBatch) {
  const int64_t K = 32, R = 4, B = 3, n = 2;
  Context ctx;
  Tensor* a = input(ctx, DType::q8_0, {K, R, B}, "table");
  Tensor* rows = input(ctx, DType::i32, {n, 1}, "rows");
  Tensor* c = ctx.get_rows(a, rows);
  ASSERT_EQ(shape_of(c), (Shape{K, n, B, 1}));
  GraphRun run(dev(), {c});
  const auto va = run.write_raw(a, random_encoded(DType::q8_0, a->nelements(), 31));
  run.write_i32(rows, {3, 1});
  run.compute();
  const HostTensor table({K, R, B, 1}, va);
  HostTensor want({K, n, B, 1});
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t k = 0; k < K; ++k) {
      want(k, 0, bb) = table(k, 3, bb);
      want(k, 1, bb) = table(k, 1, bb);
    }
  EXPECT_TRUE(all_near(run.read(c), want.v, Tolerance{1e-7, 0}));
}

HostTensor concat_ref(const HostTensor& a, const HostTensor& b, int dim) {
  Shape ne = a.ne;
  ne[dim] += b.ne[dim];
  HostTensor c(ne);
  TENSORPC_FOR_EACH_INDEX(ne, i0, i1, i2, i3) {
    std::array<int64_t, 4> i = {i0, i1, i2, i3};
    if (i[dim] < a.ne[dim]) {
      c(i0, i1, i2, i3) = a(i0, i1, i2, i3);
    } else {
      i[dim] -= a.ne[dim];
      c(i0, i1, i2, i3) = b(i[0], i[1], i[2], i[3]);
    }
  }
  return c;
}

TEST_P(CopyTest, ConcatJoinsF32AlongEachDim) {
  for (int dim = 0; dim < 4; ++dim) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    Shape a_ne = {5, 4, 3, 2};
    Shape b_ne = a_ne;
    b_ne[dim] = 3;
    Context ctx;
    Tensor* a = input(ctx, DType::f32, a_ne, "a");
    Tensor* b = input(ctx, DType::f32, b_ne, "b");
    Tensor* c = ctx.concat(a, b, dim);
    GraphRun run(dev(), {c});
    const auto va = run.write(a, random_floats(a->nelements(), 32));
    const auto vb = run.write(b, random_floats(b->nelements(), 33));
    run.compute();
    const HostTensor want = concat_ref(HostTensor(a_ne, va), HostTensor(b_ne, vb), dim);
    ASSERT_EQ(shape_of(c), want.ne);
    EXPECT_TRUE(all_near(run.read(c), want.v, Tolerance{0, 0}));
  }
}

TEST_P(CopyTest, ConcatJoinsI32AlongDim1) {
  Context ctx;
  Tensor* a = input(ctx, DType::i32, {3, 2}, "a");
  Tensor* b = input(ctx, DType::i32, {3, 1}, "b");
  Tensor* c = ctx.concat(a, b, 1);
  ASSERT_EQ(c->type, DType::i32);
  GraphRun run(dev(), {c});
  run.write_i32(a, {1, 2, 3, 4, 5, 6});
  run.write_i32(b, {-7, 8, -9});
  run.compute();
  EXPECT_EQ(run.read_i32(c), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, -7, 8, -9}));
}

TEST_P(CopyTest, ArgmaxGivesTheIndexOfTheLargestValueOfEachRow) {
  const Shape ne = {37, 6, 2, 1};
  Context ctx;
  Tensor* a = input(ctx, DType::f32, ne, "a");
  Tensor* c = ctx.argmax(a);
  ASSERT_EQ(c->type, DType::i32);
  ASSERT_EQ(shape_of(c), (Shape{6, 2, 1, 1}));
  GraphRun run(dev(), {c});
  auto values = random_floats(a->nelements(), 34, -5, -1);  // all negative: 0 is no default
  values[0 * 37 + 0] = 3.0f;                                // row 0: first element
  values[1 * 37 + 36] = 3.0f;                               // row 1: last element
  values[2 * 37 + 20] = -0.5f;                              // row 2: a middle one
  const auto va = run.write(a, values);
  run.compute();
  const HostTensor h(ne, va);
  std::vector<int32_t> want;
  for (int64_t r = 0; r < h.rows(); ++r) {
    const auto begin = h.v.begin() + r * 37;
    want.push_back(static_cast<int32_t>(std::max_element(begin, begin + 37) - begin));
  }
  EXPECT_EQ(want[0], 0);
  EXPECT_EQ(want[1], 36);
  EXPECT_EQ(want[2], 20);
  EXPECT_EQ(run.read_i32(c), want);
}

TEST_P(CopyTest, ArgmaxTakesTheFirstOfEqualMaximaAndNeverANaN) {
  // As a greedy Sampler chooses: NaN counts as -inf, ties go to the lowest
  // index, and a row with nothing better than -inf gives 0.
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {kNaN, 1.0f, 2.0f, 2.0f, 0.5f},     // a NaN first: 2
      {-1.0f, kNaN, -3.0f, kNaN, -2.0f},  // NaNs among: 0
      {kNaN, kNaN, -kInf, kNaN, -kInf},   // nothing above -inf: 0
      {-kInf, kInf, 7.0f, kInf, kNaN},    // the first +inf: 1
  };
  Context ctx;
  Tensor* a = input(ctx, DType::f32, {5, 4, 1, 1}, "a");
  Tensor* c = ctx.argmax(a);
  GraphRun run(dev(), {c});
  std::vector<float> values;
  for (const auto& r : rows) values.insert(values.end(), r.begin(), r.end());
  run.write(a, values);
  run.compute();
  EXPECT_EQ(run.read_i32(c), (std::vector<int32_t>{2, 0, 0, 1}));
}

TEST_P(CopyTest, TopKGivesTheLargestValuesOfEachRowAndTheirIndicesBestFirst) {
  const Shape ne = {300, 3, 2, 1};
  const int k = 7;
  Context ctx;
  Tensor* a = input(ctx, DType::f32, ne, "a");
  Tensor* c = ctx.top_k(a, k);
  ASSERT_EQ(c->type, DType::f32);
  ASSERT_EQ(shape_of(c), (Shape{k, 2, 3, 2}));
  GraphRun run(dev(), {c});
  auto values = random_floats(a->nelements(), 35, -4, 4);
  values[0 * 300 + 5] = values[0 * 300 + 17] = 9.0f;  // row 0: a tie, the lower index first
  values[1 * 300 + 299] = std::numeric_limits<float>::infinity();
  values[1 * 300 + 3] = std::numeric_limits<float>::quiet_NaN();  // ranks last, never picked
  for (int i = 0; i < 300; ++i) {
    if (i != 7) values[2 * 300 + i] = std::numeric_limits<float>::quiet_NaN();  // row 2: one number, NaNs
  }
  for (int i = 0; i < 10; ++i) values[3 * 300 + 290 - 25 * i] = 5.0f;  // row 3: ten equal, k = 7: the lowest indices
  const auto va = run.write(a, values);
  run.compute();
  const std::vector<float> got = run.read(c);
  for (int64_t r = 0; r < 6; ++r) {
    // The reference: every index ordered by (value descending, NaN last, index).
    std::vector<int> order(300);
    for (int i = 0; i < 300; ++i) order[i] = i;
    const float* row = va.data() + r * 300;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
      if (std::isnan(row[x]) != std::isnan(row[y])) return std::isnan(row[y]);
      return !std::isnan(row[x]) && row[x] > row[y];
    });
    for (int j = 0; j < k; ++j) {
      const float want_value = row[order[j]];
      const float got_value = got[r * 2 * k + j];
      if (std::isnan(want_value)) {
        EXPECT_TRUE(std::isnan(got_value)) << "row " << r << " candidate " << j;
      } else {
        EXPECT_EQ(got_value, want_value) << "row " << r << " candidate " << j;
      }
      EXPECT_EQ(got[r * 2 * k + k + j], static_cast<float>(order[j])) << "row " << r << " candidate " << j;
    }
  }
  EXPECT_EQ(got[k + 0], 5.0f);
  EXPECT_EQ(got[k + 1], 17.0f);
  EXPECT_EQ(got[2 * k + k], 299.0f);  // +inf first
  EXPECT_EQ(got[4 * k + 0], values[2 * 300 + 7]);
  EXPECT_EQ(got[4 * k + k], 7.0f);
}

}  // namespace
}  // namespace tensorpc::test
