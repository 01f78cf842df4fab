// validate_layout and validate_node: descriptors from outside the process
// pass exactly when Context could have built them and kernels can run them;
// every refusal is invalid_argument naming the op (or the layout problem).
#include "core/validate.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "tensorpc/context.h"

namespace tensorpc {
namespace {

::testing::AssertionResult refused_naming(const Status& s, std::initializer_list<std::string> needles) {
  if (s.ok()) return ::testing::AssertionFailure() << "was accepted";
  if (s.code() != StatusCode::invalid_argument) return ::testing::AssertionFailure() << s.to_string();
  for (const std::string& n : needles) {
    if (s.message().find(n) == std::string::npos) {
      return ::testing::AssertionFailure() << "\"" << s.message() << "\" does not name \"" << n << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

class ValidateTest : public ::testing::Test {
 protected:
  Tensor* t(DType type, std::initializer_list<int64_t> ne) { return ctx.new_tensor(type, ne); }
  Context ctx;
};

// ---- layouts ---------------------------------------------------------------------

TEST_F(ValidateTest, LayoutAcceptsWhatContextMakes) {
  for (DType type : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::q8_0, DType::q4_0}) {
    EXPECT_TRUE(validate_layout(*t(type, {64, 3, 2, 5})).ok()) << name_of(type);
  }
  EXPECT_TRUE(validate_layout(*t(DType::f32, {0, 3})).ok()) << "empty tensors are fine";
  EXPECT_TRUE(validate_layout(*ctx.transpose(t(DType::f32, {8, 4}))).ok());
}

TEST_F(ValidateTest, LayoutRejectsUnknownTypes) {
  Tensor x;
  x.type = static_cast<DType>(16);
  EXPECT_TRUE(refused_naming(validate_layout(x), {"type iq2_xxs (id 16) is not one tensorpc runs"}));
}

TEST_F(ValidateTest, LayoutRejectsNegativeDims) {
  Tensor x = *t(DType::f32, {4, 4});
  x.ne[2] = -1;
  EXPECT_TRUE(refused_naming(validate_layout(x), {"ne[2] is negative"}));
}

TEST_F(ValidateTest, LayoutRejectsPartialBlocks) {
  Tensor x = *t(DType::q8_0, {32, 2});
  x.ne[0] = 48;
  EXPECT_TRUE(refused_naming(validate_layout(x), {"block size 32"}));
}

TEST_F(ValidateTest, LayoutRejectsElementStridesBelowTheElementSize) {
  Tensor x = *t(DType::f32, {4, 4});
  x.nb[0] = 0;
  EXPECT_TRUE(refused_naming(validate_layout(x), {"nb[0]", "4"}));
  Tensor q = *t(DType::q4_0, {64});
  q.nb[0] = 36;  // blocks spaced out: kernels would read them densely
  EXPECT_TRUE(refused_naming(validate_layout(q), {"nb[0]", "block size 18"}));
}

TEST_F(ValidateTest, LayoutRejectsMisalignedStrides) {
  Tensor x = *t(DType::f32, {4, 4});
  x.nb[1] = 18;
  EXPECT_TRUE(refused_naming(validate_layout(x), {"nb[1]", "f32 alignment 4"}));
  Tensor q = *t(DType::q8_0, {32, 4});
  q.nb[1] = 35;  // rows of blocks whose fp16 scales would sit at odd addresses
  EXPECT_TRUE(refused_naming(validate_layout(q), {"nb[1]", "q8_0 alignment 2"}));
}

TEST_F(ValidateTest, LayoutRejectsSpansThatOverflow) {
  Tensor x = *t(DType::f32, {4, 8});
  x.nb[1] = 1ull << 62;  // 7 * 2^62 wraps
  EXPECT_TRUE(refused_naming(validate_layout(x), {"overflows"}));
  Tensor y = *t(DType::f32, {4, 4});
  y.ne = {1ll << 40, 1ll << 40, 1, 1};  // the element count wraps
  EXPECT_TRUE(refused_naming(validate_layout(y), {"element count overflows"}));
  y.ne = {0, 1ll << 40, 1ll << 40, 1};  // empty, but nrows() would still wrap
  y.nb = {4, 0, 0, 0};
  EXPECT_TRUE(refused_naming(validate_layout(y), {"element count overflows"}));
  // Empty (no elements per row), yet kernels form each row's address: a
  // stride that wraps the address space is refused all the same.
  Tensor z = *t(DType::f32, {0, 2, 2});
  z.nb[1] = z.nb[2] = uint64_t{1} << 63;
  EXPECT_TRUE(refused_naming(validate_layout(z), {"overflows"}));
}

TEST_F(ValidateTest, AnEmptyTensorSpansTheReachOfItsRowAddresses) {
  Tensor x = *t(DType::f32, {4, 3});
  EXPECT_EQ(address_span(x), x.nbytes());
  Tensor z = *t(DType::f32, {0, 3});
  z.nb[1] = 64;
  ASSERT_TRUE(validate_layout(z).ok());
  EXPECT_EQ(z.nbytes(), 0u);
  EXPECT_EQ(address_span(z), 4u + 2 * 64);
}

TEST_F(ValidateTest, OverlapIsDetectedWhateverTheStrideOrder) {
  Tensor x = *t(DType::f32, {4, 3});
  EXPECT_TRUE(elements_do_not_overlap(x));
  EXPECT_TRUE(elements_do_not_overlap(*ctx.transpose(t(DType::f32, {4, 3}))));
  x.nb[1] = 8;  // rows of 16 bytes every 8
  EXPECT_FALSE(elements_do_not_overlap(x));
  x.nb[1] = 0;
  EXPECT_FALSE(elements_do_not_overlap(x));
  x.ne[1] = 1;  // a dim of one element has no stride to speak of
  EXPECT_TRUE(elements_do_not_overlap(x));
}

// ---- nodes -----------------------------------------------------------------------

// As a node comes off the wire: view_src is not sent.
Tensor as_decoded(const Tensor* n) {
  Tensor d = *n;
  d.view_src = nullptr;
  d.view_offset = 0;
  return d;
}

TEST_F(ValidateTest, EveryNodeContextBuildsIsValid) {
  Tensor* w = t(DType::q8_0, {64, 16});
  Tensor* x = t(DType::f32, {64, 4});
  Tensor* mm = ctx.mul_mat(w, x);
  Tensor* y = t(DType::f32, {16, 4});
  Tensor* heads = t(DType::f32, {8, 2, 4});
  Tensor* pos = t(DType::i32, {4});
  Tensor* ids = t(DType::i32, {3});
  Tensor* cache = t(DType::f16, {16, 8});
  std::vector<Tensor*> nodes = {
      mm,
      ctx.add(mm, y),
      ctx.sub(mm, t(DType::f32, {16, 1})),
      ctx.mul(mm, y),
      ctx.div(mm, y),
      ctx.scale(mm, 0.5f),
      ctx.get_rows(w, ids),
      ctx.cast(mm, DType::f16),
      ctx.cont(ctx.transpose(mm)),
      ctx.cpy(mm, ctx.view(cache, {16, 4}, {2, 32}, 64)),
      ctx.rms_norm(mm, 1e-5f),
      ctx.norm(mm, 1e-5f),
      ctx.rope(heads, pos, 8, kRopeNeox, 10000.0f, 1.0f),
      ctx.soft_max(mm, t(DType::f32, {16, 8}), 0.125f),
      ctx.soft_max(mm),
      ctx.silu(mm),
      ctx.gelu(mm),
      ctx.swiglu(mm, y),
      ctx.diag_mask_inf(mm, 2),
      ctx.concat(mm, y, 1),
      ctx.argmax(mm),
      ctx.top_k(mm, 3),
      ctx.top_k_ids(mm, 3),
      ctx.mul_mat_id(t(DType::q4_K, {256, 8, 4}), t(DType::f32, {256, 1, 3}), t(DType::i32, {2, 3})),
      ctx.mul_mat_id(t(DType::f16, {64, 8, 4}), t(DType::f32, {64, 2, 3}), t(DType::i32, {2, 3})),
      ctx.swiglu_clamp(mm, y, 1.702f, 7.0f),
      ctx.soft_max(heads, t(DType::f32, {8, 2}), 0.125f, t(DType::f32, {4})),
      ctx.soft_max(heads, nullptr, 1.0f, t(DType::f32, {4})),  // sinks without a mask
      ctx.view(mm, {8, 4}, {4, 64}, 32),
      ctx.reshape(mm, {64}),
      ctx.permute(heads, 2, 0, 1, 3),
      ctx.transpose(mm),
  };
  for (const Tensor* n : nodes) {
    const Status s = validate_node(as_decoded(n));
    EXPECT_TRUE(s.ok()) << name_of(n->op) << ": " << s.to_string();
  }
  EXPECT_TRUE(validate_node(as_decoded(w)).ok()) << "a leaf without sources";
}

TEST_F(ValidateTest, RejectsUnknownOps) {
  Tensor n = as_decoded(ctx.silu(t(DType::f32, {4})));
  n.op = static_cast<Op>(kOpCount);
  EXPECT_TRUE(refused_naming(validate_node(n), {"unknown op " + std::to_string(kOpCount)}));
}

TEST_F(ValidateTest, RejectsMissingAndExtraSources) {
  Tensor n = as_decoded(ctx.add(t(DType::f32, {4}), t(DType::f32, {4})));
  n.src[1] = nullptr;
  EXPECT_TRUE(refused_naming(validate_node(n), {"add", "source 1 is missing"}));
  Tensor u = as_decoded(ctx.silu(t(DType::f32, {4})));
  u.src[2] = t(DType::f32, {4});
  EXPECT_TRUE(refused_naming(validate_node(u), {"silu", "source 2"}));
  Tensor leaf = *t(DType::f32, {4});
  leaf.src[0] = t(DType::f32, {4});
  EXPECT_TRUE(refused_naming(validate_node(leaf), {"none", "source 0"}));
}

TEST_F(ValidateTest, RejectsShapeRuleViolations) {
  Tensor n = as_decoded(ctx.mul_mat(t(DType::f32, {64, 8}), t(DType::f32, {64, 2})));
  n.src[1] = t(DType::f32, {32, 2});
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat", "[64, 8, 1, 1]", "[32, 2, 1, 1]", "K"}));
}

TEST_F(ValidateTest, RejectsANodeWhoseShapeOrTypeIsNotWhatItsSourcesMake) {
  Tensor n = as_decoded(ctx.mul_mat(t(DType::f32, {64, 8}), t(DType::f32, {64, 2})));
  n.ne = {8, 3, 1, 1};
  n.nb = {4, 32, 96, 96};
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat", "[8, 3, 1, 1]", "[8, 2, 1, 1]"}));
  Tensor a = as_decoded(ctx.argmax(t(DType::f32, {8, 2})));
  a.type = DType::f32;
  EXPECT_TRUE(refused_naming(validate_node(a), {"argmax", "i32"}));
}

TEST_F(ValidateTest, RejectsTopKWithKOutsideTheRow) {
  Tensor n = as_decoded(ctx.top_k(t(DType::f32, {8, 2}), 3));
  n.set_param(0, int32_t{9});
  EXPECT_TRUE(refused_naming(validate_node(n), {"top_k", "k 9"}));
  n.set_param(0, int32_t{0});
  EXPECT_TRUE(refused_naming(validate_node(n), {"top_k", "k 0"}));
  Tensor m = as_decoded(ctx.top_k(t(DType::f32, {8, 2}), 3));
  m.ne = {4, 2, 2, 1};  // a k the param does not say
  m.nb = {4, 16, 32, 64};
  EXPECT_TRUE(refused_naming(validate_node(m), {"top_k"}));
}

// The mixture-of-experts ops (1.12) as a hostile client could send them.
TEST_F(ValidateTest, RejectsMulMatIdWhoseIdsOrActivationsDoNotFit) {
  Tensor* experts = t(DType::q8_0, {64, 8, 4});
  const Tensor good = as_decoded(ctx.mul_mat_id(experts, t(DType::f32, {64, 2, 3}), t(DType::i32, {2, 3})));
  ASSERT_TRUE(validate_node(good).ok());
  Tensor n = good;
  n.src[2] = t(DType::f32, {2, 3});
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat_id", "ids", "must be i32"}));
  n = good;
  n.src[1] = t(DType::f32, {64, 3, 3});  // neither one row per token nor one per slot
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat_id", "b must be [K, 1 or k, T]"}));
  n = good;
  n.src[1] = t(DType::f32, {64, 2, 4});  // a token more than ids has
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat_id", "b must be [K, 1 or k, T]"}));
  n = good;
  n.src[1] = t(DType::f32, {32, 2, 3});
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat_id", "K"}));
  n = good;
  n.src[2] = t(DType::i32, {2, 3, 2});
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat_id", "ids are [k, T]"}));
  n = good;
  n.src[2] = nullptr;
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat_id", "source 2 is missing"}));
  n = good;
  n.src[0] = t(DType::q8_0, {64, 8, 2, 2});
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat_id", "the experts are [K, M, E]"}));
  n = good;
  n.ne = {8, 3, 3, 1};  // a result of more slots than ids has
  n.nb = {4, 32, 96, 288};
  EXPECT_TRUE(refused_naming(validate_node(n), {"mul_mat_id", "[8, 3, 3, 1]", "[8, 2, 3, 1]"}));
}

TEST_F(ValidateTest, RejectsSoftMaxSinksOfTheWrongLengthOrType) {
  Tensor* x = t(DType::f32, {16, 4, 3});
  const Tensor good = as_decoded(ctx.soft_max(x, nullptr, 0.5f, t(DType::f32, {3})));
  ASSERT_TRUE(validate_node(good).ok());
  ASSERT_EQ(good.src[1], nullptr);
  Tensor n = good;
  n.src[2] = t(DType::f32, {4});
  EXPECT_TRUE(refused_naming(validate_node(n), {"soft_max", "sinks", "[a.ne[2]]"}));
  n.src[2] = t(DType::f32, {3, 2});
  EXPECT_TRUE(refused_naming(validate_node(n), {"soft_max", "sinks", "[a.ne[2]]"}));
  n.src[2] = t(DType::i32, {3});
  EXPECT_TRUE(refused_naming(validate_node(n), {"soft_max", "sinks", "must be f32"}));
  Tensor strided = *t(DType::f32, {3});
  strided.nb[0] = 8;  // every other float, as the wire may say: not contiguous
  n.src[2] = &strided;
  EXPECT_TRUE(refused_naming(validate_node(n), {"soft_max", "sinks", "contiguous"}));
}

TEST_F(ValidateTest, RejectsTopKIdsAndSwigluClampOutsideTheirRules) {
  Tensor ids = as_decoded(ctx.top_k_ids(t(DType::f32, {8, 2}), 3));
  ASSERT_TRUE(validate_node(ids).ok());
  ids.set_param(0, int32_t{9});
  EXPECT_TRUE(refused_naming(validate_node(ids), {"top_k_ids", "k 9"}));
  Tensor as_f32 = as_decoded(ctx.top_k_ids(t(DType::f32, {8, 2}), 3));
  as_f32.type = DType::f32;
  EXPECT_TRUE(refused_naming(validate_node(as_f32), {"top_k_ids", "i32"}));
  Tensor long_row = as_decoded(ctx.top_k_ids(t(DType::f32, {8, 2}), 3));
  long_row.src[0] = t(DType::f32, {int64_t{1} << 31});  // an index i32 cannot hold
  EXPECT_TRUE(refused_naming(validate_node(long_row), {"top_k_ids", "2^31 - 1"}));

  Tensor* a = t(DType::f32, {8, 2});
  const Tensor good = as_decoded(ctx.swiglu_clamp(a, t(DType::f32, {8, 2}), 1.702f, 7.0f));
  ASSERT_TRUE(validate_node(good).ok());
  Tensor n = good;
  n.set_param(1, 0.0f);
  EXPECT_TRUE(refused_naming(validate_node(n), {"swiglu_clamp", "limit"}));
  n = good;
  n.set_param(0, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(refused_naming(validate_node(n), {"swiglu_clamp", "alpha"}));
  n = good;
  n.src[1] = t(DType::f32, {8, 1});
  EXPECT_TRUE(refused_naming(validate_node(n), {"swiglu_clamp", "same shape"}));
}

TEST_F(ValidateTest, RejectsRopeParamsOutOfRange) {
  Tensor* x = t(DType::f32, {8, 2, 4});
  Tensor* pos = t(DType::i32, {4});
  Tensor n = as_decoded(ctx.rope(x, pos, 8, kRopeNormal));
  n.set_param(1, int32_t{1});
  EXPECT_TRUE(refused_naming(validate_node(n), {"rope", "mode 1"}));
  n = as_decoded(ctx.rope(x, pos, 8, kRopeNormal));
  n.set_param(0, int32_t{7});
  EXPECT_TRUE(refused_naming(validate_node(n), {"rope", "n_dims 7"}));
  n.set_param(0, int32_t{10});
  EXPECT_TRUE(refused_naming(validate_node(n), {"rope", "n_dims 10"}));
  n = as_decoded(ctx.rope(x, pos, 8, kRopeNormal));
  n.set_param(2, 0.0f);
  EXPECT_TRUE(refused_naming(validate_node(n), {"rope", "freq_base"}));
}

TEST_F(ValidateTest, RejectsConcatDimOutOfRangeAndOverflow) {
  Tensor n = as_decoded(ctx.concat(t(DType::f32, {4, 2}), t(DType::f32, {4, 3}), 1));
  n.set_param(0, int32_t{4});
  EXPECT_TRUE(refused_naming(validate_node(n), {"concat", "dim 4"}));
  n.set_param(0, int32_t{-1});
  EXPECT_TRUE(refused_naming(validate_node(n), {"concat", "dim -1"}));

  // Two huge broadcast tensors whose joined dim wraps int64.
  Tensor a = *t(DType::f32, {1});
  a.ne[1] = (1ll << 62) + 1;
  a.nb = {4, 0, 4, 4};
  Tensor c = as_decoded(ctx.concat(t(DType::f32, {4, 2}), t(DType::f32, {4, 3}), 1));
  c.src[0] = &a;
  c.src[1] = &a;
  c.set_param(0, int32_t{1});
  EXPECT_TRUE(refused_naming(validate_node(c), {"concat", "overflows"}));
}

TEST_F(ValidateTest, RejectsPermuteAxesThatAreNotAPermutation) {
  Tensor n = as_decoded(ctx.permute(t(DType::f32, {4, 3, 2}), 1, 0, 2, 3));
  n.params[2] = 0;
  EXPECT_TRUE(refused_naming(validate_node(n), {"permute", "not a permutation"}));
}

TEST_F(ValidateTest, RejectsViewsThatChangeTheLayoutRule) {
  Tensor* a = t(DType::f32, {4, 3});
  Tensor v = as_decoded(ctx.view(a, {4}, {4}, 0));
  v.type = DType::i32;
  EXPECT_TRUE(refused_naming(validate_node(v), {"view", "i32"}));
  Tensor p = as_decoded(ctx.transpose(a));
  p.nb = {4, 16, 48, 48};  // not the source's strides swapped
  EXPECT_TRUE(refused_naming(validate_node(p), {"transpose", "strides"}));
  Tensor r = as_decoded(ctx.reshape(a, {12}));
  r.ne = {13, 1, 1, 1};
  r.nb = {4, 52, 52, 52};
  EXPECT_TRUE(refused_naming(validate_node(r), {"reshape", "12 elements"}));
}

TEST_F(ValidateTest, ComputedNodesWriteDenseNonOverlappingRows) {
  Tensor n = as_decoded(ctx.silu(t(DType::f32, {4, 3})));
  n.nb = {8, 32, 96, 96};
  EXPECT_TRUE(refused_naming(validate_node(n), {"silu", "dense"}));
  n.nb = {4, 0, 16, 16};  // every row on the same bytes
  EXPECT_TRUE(refused_naming(validate_node(n), {"silu", "overlap"}));
}

TEST_F(ValidateTest, CpyMayWriteAStridedDestinationButNotAQuantizedOne) {
  Tensor* src = t(DType::f32, {4, 3});
  Tensor n = as_decoded(ctx.cpy(src, ctx.transpose(t(DType::f32, {3, 4}))));
  EXPECT_NE(n.nb[0], 4u);
  EXPECT_TRUE(validate_node(n).ok()) << validate_node(n).to_string();

  Tensor q = as_decoded(ctx.cpy(t(DType::f32, {32, 2}), t(DType::q8_0, {32, 2})));
  EXPECT_TRUE(validate_node(q).ok());
  Tensor ov = as_decoded(ctx.cpy(src, t(DType::f32, {4, 3})));
  ov.nb = {4, 4, 48, 48};
  EXPECT_TRUE(refused_naming(validate_node(ov), {"cpy", "overlap"}));
  Tensor counts = as_decoded(ctx.cpy(src, t(DType::f32, {4, 3})));
  counts.src[0] = t(DType::f32, {4, 4});
  EXPECT_TRUE(refused_naming(validate_node(counts), {"cpy", "element counts differ"}));
}

}  // namespace
}  // namespace tensorpc
