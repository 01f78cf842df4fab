// Context: every builder rejects what its op cannot take with an Error that
// names the op and the shapes; views, reshape, permute and transpose change
// descriptors only; Graph::build orders sources before users, each node once.
#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>

#include "test_util.h"

namespace tensorpc::test {
namespace {

// Passes when build() throws tensorpc::Error whose message contains every needle.
::testing::AssertionResult throws_naming(const std::function<void()>& build, const std::vector<std::string>& needles) {
  try {
    build();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) {
      if (msg.find(n) == std::string::npos) {
        return ::testing::AssertionFailure() << "message \"" << msg << "\" does not name \"" << n << "\"";
      }
    }
    if (e.status().ok()) return ::testing::AssertionFailure() << "Error carries an ok status";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something other than tensorpc::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

class ContextShapeRulesTest : public ::testing::Test {
 protected:
  Tensor* t(DType type, std::initializer_list<int64_t> ne) { return ctx.new_tensor(type, ne); }
  Context ctx;
};

TEST_F(ContextShapeRulesTest, BinaryOpsRejectBThatDoesNotBroadcast) {
  Tensor* a = t(DType::f32, {16, 4});
  Tensor* rows2 = t(DType::f32, {16, 2});
  Tensor* short_rows = t(DType::f32, {8, 4});
  Tensor* small = t(DType::f32, {16, 1});
  Tensor* big = t(DType::f32, {16, 4, 3});
  EXPECT_TRUE(throws_naming([&] { ctx.add(a, rows2); }, {"add", describe(*a), describe(*rows2)}));
  EXPECT_TRUE(throws_naming([&] { ctx.sub(a, short_rows); }, {"sub", describe(*a), describe(*short_rows)}));
  EXPECT_TRUE(throws_naming([&] { ctx.mul(small, a); }, {"mul", describe(*small), describe(*a)}));
  EXPECT_TRUE(throws_naming([&] { ctx.div(a, big); }, {"div", describe(*a), describe(*big)}));
}

TEST_F(ContextShapeRulesTest, BinaryAndUnaryOpsTakeOnlyF32) {
  Tensor* f = t(DType::f32, {16, 4});
  Tensor* h = t(DType::f16, {16, 4});
  Tensor* i = t(DType::i32, {16, 4});
  EXPECT_TRUE(throws_naming([&] { ctx.add(h, f); }, {"add", describe(*h)}));
  EXPECT_TRUE(throws_naming([&] { ctx.mul(f, i); }, {"mul", describe(*i)}));
  EXPECT_TRUE(throws_naming([&] { ctx.scale(i, 2.0f); }, {"scale"}));
  EXPECT_TRUE(throws_naming([&] { ctx.silu(i); }, {"silu"}));
  EXPECT_TRUE(throws_naming([&] { ctx.gelu(h); }, {"gelu"}));
  EXPECT_TRUE(throws_naming([&] { ctx.rms_norm(i, 1e-5f); }, {"rms_norm"}));
  EXPECT_TRUE(throws_naming([&] { ctx.norm(h, 1e-5f); }, {"norm"}));
  EXPECT_TRUE(throws_naming([&] { ctx.argmax(i); }, {"argmax"}));
  EXPECT_TRUE(throws_naming([&] { ctx.top_k(i, 1); }, {"top_k"}));
}

TEST_F(ContextShapeRulesTest, TopKTakesBetweenOneAndAWholeRow) {
  Tensor* a = t(DType::f32, {10, 3});
  EXPECT_TRUE(throws_naming([&] { ctx.top_k(a, 0); }, {"top_k", "k 0", "[1, 10]"}));
  EXPECT_TRUE(throws_naming([&] { ctx.top_k(a, 11); }, {"top_k", "k 11"}));
  EXPECT_TRUE(throws_naming([&] { ctx.top_k(t(DType::f32, {4, 2, 2, 2}), 2); }, {"top_k", "3 dims"}));
  const Tensor* r = ctx.top_k(a, 10);
  EXPECT_EQ(r->ne, (std::array<int64_t, 4>{10, 2, 3, 1}));
}

TEST_F(ContextShapeRulesTest, SwigluNeedsEqualShapes) {
  Tensor* a = t(DType::f32, {16, 4});
  Tensor* b = t(DType::f32, {16, 1});
  EXPECT_TRUE(throws_naming([&] { ctx.swiglu(a, b); }, {"swiglu", describe(*a), describe(*b)}));
}

TEST_F(ContextShapeRulesTest, MulMatRejectsMismatchedKAndBatches) {
  Tensor* a = t(DType::f32, {64, 3});
  Tensor* b = t(DType::f32, {32, 1});
  EXPECT_TRUE(throws_naming([&] { ctx.mul_mat(a, b); }, {"mul_mat", describe(*a), describe(*b)}));
  // b's dims 2 and 3 must be multiples of a's.
  Tensor* a3 = t(DType::q8_0, {64, 3, 3});
  Tensor* b4 = t(DType::f32, {64, 5, 4});
  EXPECT_TRUE(throws_naming([&] { ctx.mul_mat(a3, b4); }, {"mul_mat", describe(*a3), describe(*b4)}));
  Tensor* a_d3 = t(DType::f32, {64, 3, 1, 2});
  Tensor* b_d3 = t(DType::f32, {64, 5, 1, 3});
  EXPECT_TRUE(throws_naming([&] { ctx.mul_mat(a_d3, b_d3); }, {"mul_mat", describe(*a_d3), describe(*b_d3)}));
  // a larger than b in a batch dim does not broadcast the other way.
  Tensor* b1 = t(DType::f32, {64, 5, 1});
  Tensor* a2 = t(DType::f32, {64, 3, 2});
  EXPECT_TRUE(throws_naming([&] { ctx.mul_mat(a2, b1); }, {"mul_mat"}));
}

TEST_F(ContextShapeRulesTest, MulMatTakesFloatAndQuantizedWeightsAndF32B) {
  Tensor* b = t(DType::f32, {256, 5});
  for (DType w : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0,
                  DType::q5_1, DType::iq4_nl, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K,
                  DType::iq4_xs}) {
    Tensor* c = ctx.mul_mat(t(w, {256, 3}), b);
    EXPECT_EQ(c->type, DType::f32);
    EXPECT_EQ(shape_of(c), (Shape{3, 5, 1, 1}));
  }
  Tensor* q8k = t(DType::q8_K, {256, 3});  // an activation format, not weights
  Tensor* i = t(DType::i32, {64, 3});
  Tensor* b16 = t(DType::f16, {64, 5});
  EXPECT_TRUE(throws_naming([&] { ctx.mul_mat(q8k, b); }, {"mul_mat", describe(*q8k)}));
  EXPECT_TRUE(throws_naming([&] { ctx.mul_mat(i, b); }, {"mul_mat", describe(*i)}));
  EXPECT_TRUE(throws_naming([&] { ctx.mul_mat(t(DType::f32, {64, 3}), b16); }, {"mul_mat", describe(*b16)}));
  // Weights are read row by row: a's rows must be dense.
  Tensor* at = ctx.transpose(t(DType::f32, {3, 64}));
  EXPECT_TRUE(throws_naming([&] { ctx.mul_mat(at, b); }, {"mul_mat", describe(*at)}));
}

TEST_F(ContextShapeRulesTest, MulMatBroadcastResultHasBsBatches) {
  Tensor* c = ctx.mul_mat(t(DType::q4_0, {64, 3, 2, 1}), t(DType::f32, {64, 5, 4, 3}));
  EXPECT_EQ(shape_of(c), (Shape{3, 5, 4, 3}));
}

TEST_F(ContextShapeRulesTest, GetRowsNeedsI32IndicesMatchingTheBatches) {
  Tensor* a = t(DType::q4_0, {64, 10, 2});
  Tensor* f = t(DType::f32, {5, 2});
  Tensor* wrong_batches = t(DType::i32, {5, 3});
  Tensor* a4 = t(DType::f32, {8, 10, 2, 2});
  Tensor* rows = t(DType::i32, {5, 2});
  EXPECT_TRUE(throws_naming([&] { ctx.get_rows(a, f); }, {"get_rows", describe(*f)}));
  EXPECT_TRUE(
      throws_naming([&] { ctx.get_rows(a, wrong_batches); }, {"get_rows", describe(*a), describe(*wrong_batches)}));
  EXPECT_TRUE(throws_naming([&] { ctx.get_rows(a4, rows); }, {"get_rows", describe(*a4)}));
  Tensor* c = ctx.get_rows(a, rows);
  EXPECT_EQ(c->type, DType::f32);
  EXPECT_EQ(shape_of(c), (Shape{64, 5, 2, 1}));
}

TEST_F(ContextShapeRulesTest, RopeChecksPositionsNDimsAndMode) {
  Tensor* x = t(DType::f32, {64, 4, 6});
  Tensor* pos = t(DType::i32, {6});
  Tensor* pos_f = t(DType::f32, {6});
  Tensor* pos_5 = t(DType::i32, {5});
  Tensor* x4 = t(DType::f32, {64, 4, 6, 2});
  EXPECT_TRUE(throws_naming([&] { ctx.rope(x, pos_f, 64, kRopeNormal); }, {"rope", describe(*pos_f)}));
  EXPECT_TRUE(throws_naming([&] { ctx.rope(x, pos_5, 64, kRopeNormal); }, {"rope", describe(*x), describe(*pos_5)}));
  EXPECT_TRUE(throws_naming([&] { ctx.rope(x, pos, 63, kRopeNormal); }, {"rope", "63"}));
  EXPECT_TRUE(throws_naming([&] { ctx.rope(x, pos, 66, kRopeNeox); }, {"rope", "66"}));
  EXPECT_TRUE(throws_naming([&] { ctx.rope(x, pos, 0, kRopeNeox); }, {"rope"}));
  EXPECT_TRUE(throws_naming([&] { ctx.rope(x, pos, 64, 1); }, {"rope"}));
  EXPECT_TRUE(throws_naming([&] { ctx.rope(x4, pos, 64, kRopeNormal); }, {"rope", describe(*x4)}));
  EXPECT_TRUE(throws_naming([&] { ctx.rope(x, pos, 64, kRopeNormal, 0.0f); }, {"rope"}));
  Tensor* y = ctx.rope(x, pos, 32, kRopeNeox, 500000.0f, 0.5f);
  EXPECT_EQ(shape_of(y), shape_of(x));
  EXPECT_EQ(y->param<int32_t>(0), 32);
  EXPECT_EQ(y->param<int32_t>(1), kRopeNeox);
  EXPECT_EQ(y->param<float>(2), 500000.0f);
  EXPECT_EQ(y->param<float>(3), 0.5f);
}

TEST_F(ContextShapeRulesTest, SoftMaxMaskIsF32WithAsManyColumnsAndAtLeastAsManyRows) {
  Tensor* a = t(DType::f32, {16, 7, 4});
  Tensor* narrow = t(DType::f32, {15, 7});
  Tensor* short_mask = t(DType::f32, {16, 6});
  Tensor* int_mask = t(DType::i32, {16, 7});
  Tensor* batched = t(DType::f32, {16, 7, 4});
  EXPECT_TRUE(throws_naming([&] { ctx.soft_max(a, narrow); }, {"soft_max", describe(*a), describe(*narrow)}));
  EXPECT_TRUE(throws_naming([&] { ctx.soft_max(a, short_mask); }, {"soft_max", describe(*short_mask)}));
  EXPECT_TRUE(throws_naming([&] { ctx.soft_max(a, int_mask); }, {"soft_max", describe(*int_mask)}));
  EXPECT_TRUE(throws_naming([&] { ctx.soft_max(a, batched); }, {"soft_max", describe(*batched)}));
  EXPECT_EQ(shape_of(ctx.soft_max(a, t(DType::f32, {16, 9}), 0.5f)), shape_of(a));
}

TEST_F(ContextShapeRulesTest, DiagMaskInfRejectsNegativeNPast) {
  Tensor* a = t(DType::f32, {8, 4});
  EXPECT_TRUE(throws_naming([&] { ctx.diag_mask_inf(a, -1); }, {"diag_mask_inf", "-1"}));
}

TEST_F(ContextShapeRulesTest, CpyAndCastRejectWhatCannotBeConverted) {
  Tensor* a = t(DType::f32, {64, 3});
  Tensor* b = t(DType::f16, {64, 4});
  Tensor* i = t(DType::i32, {64, 3});
  Tensor* f48 = t(DType::f32, {48, 2});
  EXPECT_TRUE(throws_naming([&] { ctx.cpy(a, b); }, {"cpy", describe(*a), describe(*b)}));
  EXPECT_TRUE(throws_naming([&] { ctx.cpy(i, a); }, {"cpy", describe(*i)}));
  EXPECT_TRUE(throws_naming([&] { ctx.cast(f48, DType::q8_0); }, {describe(*f48), "q8_0"}));
  EXPECT_TRUE(throws_naming([&] { ctx.cast(i, DType::f32); }, {describe(*i)}));
}

TEST_F(ContextShapeRulesTest, ConcatNeedsAValidDimAndMatchingOtherDims) {
  Tensor* a = t(DType::f32, {5, 4, 3});
  Tensor* b = t(DType::f32, {5, 2, 3});
  Tensor* h = t(DType::f16, {5, 4, 3});
  EXPECT_TRUE(throws_naming([&] { ctx.concat(a, b, 0); }, {"concat", describe(*a), describe(*b)}));
  EXPECT_TRUE(throws_naming([&] { ctx.concat(a, b, 4); }, {"concat", "4"}));
  EXPECT_TRUE(throws_naming([&] { ctx.concat(a, b, -1); }, {"concat", "-1"}));
  EXPECT_TRUE(throws_naming([&] { ctx.concat(a, h, 1); }, {"concat", describe(*h)}));
  Tensor* c = ctx.concat(a, b, 1);
  EXPECT_EQ(shape_of(c), (Shape{5, 6, 3, 1}));
  EXPECT_EQ(c->param<int32_t>(0), 1);
}

TEST_F(ContextShapeRulesTest, NewTensorNeedsWholeBlocksAndAtMostFourDims) {
  EXPECT_TRUE(throws_naming([&] { ctx.new_tensor(DType::q4_0, {33, 2}); }, {"q4_0", "33"}));
  EXPECT_TRUE(throws_naming([&] { ctx.new_tensor(DType::f32, {1, 2, 3, 4, 5}); }, {"5"}));
  EXPECT_TRUE(throws_naming([&] { ctx.new_tensor(DType::f32, {4, -1}); }, {"-1"}));
}

TEST_F(ContextShapeRulesTest, ViewsRejectWhatTheirSourceCannotBe) {
  Tensor* a = t(DType::f32, {8, 6});  // 192 bytes
  Tensor* q = t(DType::q8_0, {64, 2});
  EXPECT_TRUE(throws_naming([&] { ctx.view(a, {8, 2}, {4, 32}, 160); }, {"view", describe(*a)}));
  EXPECT_TRUE(throws_naming([&] { ctx.view(a, {8}, {8}, 0); }, {"view"}));
  EXPECT_TRUE(throws_naming([&] { ctx.view(a, {4}, {4}, 2); }, {"view", "offset 2", "alignment 4"}));
  EXPECT_TRUE(throws_naming([&] { ctx.view(q, {32}, {34}, 33); }, {"view", "offset 33", "alignment 2"}));
  EXPECT_TRUE(throws_naming([&] { ctx.view(q, {32, 2}, {34, 35}, 0); }, {"view", "stride 35"}));
  EXPECT_TRUE(throws_naming([&] { ctx.reshape(a, {7, 7}); }, {"reshape", describe(*a)}));
  Tensor* at = ctx.transpose(a);
  EXPECT_TRUE(throws_naming([&] { ctx.reshape(at, {48}); }, {"reshape", describe(*at)}));
  EXPECT_TRUE(throws_naming([&] { ctx.permute(a, 0, 0, 1, 2); }, {"permute"}));
  EXPECT_TRUE(throws_naming([&] { ctx.permute(a, 0, 1, 2, 4); }, {"permute"}));
  EXPECT_TRUE(throws_naming([&] { ctx.transpose(q); }, {"transpose", describe(*q)}));
}

// ---- descriptors -------------------------------------------------------------

// The owner of t's bytes and the byte offset into it, following view_src.
std::pair<const Tensor*, uint64_t> owner_and_offset(const Tensor* t) {
  uint64_t offset = 0;
  while (t->view_src != nullptr) {
    offset += t->view_offset;
    t = t->view_src;
  }
  return {t, offset};
}

TEST(TensorDescriptorTest, NewTensorsAreDenseWithGgufStrides) {
  Context ctx;
  Tensor* h = ctx.new_tensor(DType::f16, {10, 3, 2});
  EXPECT_EQ(h->nb, (std::array<uint64_t, 4>{2, 20, 60, 120}));
  EXPECT_EQ(h->nbytes(), 120u);
  EXPECT_TRUE(h->is_contiguous());
  EXPECT_EQ(h->n_dims(), 3);
  Tensor* q = ctx.new_tensor(DType::q4_0, {64, 3});
  EXPECT_EQ(q->nb, (std::array<uint64_t, 4>{18, 36, 108, 108}));
  EXPECT_EQ(q->nbytes(), 108u);
  EXPECT_EQ(q->row_size(), 36u);
  Tensor* q8 = ctx.new_tensor(DType::q8_0, {96});
  EXPECT_EQ(q8->nbytes(), 3 * 34u);
  EXPECT_EQ(q8->op, Op::none);
  EXPECT_FALSE(q8->is_view());
}

TEST(TensorDescriptorTest, ViewSetsShapeStridesAndOffsetIntoItsSource) {
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {8, 6});  // rows of 32 bytes
  Tensor* v = ctx.view(a, {4, 3}, {4, 64}, 40);    // every second row, from element (2, 1)
  EXPECT_EQ(v->op, Op::view);
  EXPECT_EQ(v->type, DType::f32);
  EXPECT_EQ(shape_of(v), (Shape{4, 3, 1, 1}));
  EXPECT_EQ(v->nb[0], 4u);
  EXPECT_EQ(v->nb[1], 64u);
  EXPECT_EQ(v->view_src, a);
  EXPECT_EQ(v->view_offset, 40u);
  EXPECT_FALSE(v->is_contiguous());
  EXPECT_TRUE(v->rows_are_contiguous());
  EXPECT_EQ(v->nbytes(), 2 * 64u + 4 * 4u);
  EXPECT_EQ(v->buffer, nullptr) << "a view of an unplaced tensor is unplaced";
}

TEST(TensorDescriptorTest, ViewOfAViewAddsOffsetsAndSharesTheOwnersBytes) {
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {8, 6});
  Tensor* v = ctx.view(a, {8, 3}, {4, 32}, 64);
  Tensor* w = ctx.view(v, {4}, {4}, 16);
  const auto [owner, offset] = owner_and_offset(w);
  EXPECT_EQ(owner, a);
  EXPECT_EQ(offset, 80u);
  EXPECT_EQ(w->src[0], v);
}

TEST(TensorDescriptorTest, ReshapeRestridesDenselyOverTheSameBytes) {
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {6, 4, 2});
  Tensor* r = ctx.reshape(a, {12, 4});
  EXPECT_EQ(r->op, Op::reshape);
  EXPECT_EQ(shape_of(r), (Shape{12, 4, 1, 1}));
  EXPECT_EQ(r->nb, (std::array<uint64_t, 4>{4, 48, 192, 192}));
  EXPECT_EQ(owner_and_offset(r), (std::pair<const Tensor*, uint64_t>{a, 0}));
  EXPECT_TRUE(r->is_contiguous());
  Tensor* q = ctx.new_tensor(DType::q8_0, {64, 4});
  Tensor* rq = ctx.reshape(q, {32, 8});
  EXPECT_EQ(rq->nb, (std::array<uint64_t, 4>{34, 34, 272, 272}));
}

TEST(TensorDescriptorTest, PermuteSendsSourceDimIToAxesI) {
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {2, 3, 4, 5});  // nb 4, 8, 24, 96
  Tensor* p = ctx.permute(a, 2, 0, 3, 1);
  EXPECT_EQ(p->op, Op::permute);
  EXPECT_EQ(shape_of(p), (Shape{3, 5, 2, 4}));
  EXPECT_EQ(p->nb, (std::array<uint64_t, 4>{8, 96, 4, 24}));
  EXPECT_EQ(owner_and_offset(p), (std::pair<const Tensor*, uint64_t>{a, 0}));
  EXPECT_FALSE(p->is_contiguous());
  EXPECT_FALSE(p->rows_are_contiguous());
  EXPECT_EQ(p->nbytes(), a->nbytes());
}

TEST(TensorDescriptorTest, TransposeSwapsDims0And1) {
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f16, {3, 5, 2});  // nb 2, 6, 30
  Tensor* t = ctx.transpose(a);
  EXPECT_EQ(t->op, Op::transpose);
  EXPECT_EQ(shape_of(t), (Shape{5, 3, 2, 1}));
  EXPECT_EQ(t->nb, (std::array<uint64_t, 4>{6, 2, 30, 60}));
  EXPECT_EQ(owner_and_offset(t), (std::pair<const Tensor*, uint64_t>{a, 0}));
  EXPECT_FALSE(t->rows_are_contiguous());
  Tensor* back = ctx.transpose(t);
  EXPECT_EQ(shape_of(back), shape_of(a));
  EXPECT_EQ(back->nb, a->nb);
  EXPECT_TRUE(back->is_contiguous());
}

TEST(TensorDescriptorTest, ViewOpsAreViewsAndComputeNothing) {
  for (Op op : {Op::view, Op::reshape, Op::permute, Op::transpose}) EXPECT_TRUE(is_view_op(op)) << name_of(op);
  for (Op op : {Op::none, Op::cpy, Op::mul_mat, Op::add}) EXPECT_FALSE(is_view_op(op)) << name_of(op);
}

// ---- Graph::build ------------------------------------------------------------

// Every node comes after its sources and view source; leaves are separate; each once.
::testing::AssertionResult ordered_once(const Graph& g) {
  std::unordered_map<const Tensor*, size_t> index;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (!index.emplace(g.nodes()[i], i).second) return ::testing::AssertionFailure() << "node " << i << " repeats";
  }
  for (const Tensor* leaf : g.leafs()) {
    if (index.count(leaf)) return ::testing::AssertionFailure() << "a leaf is also a node";
    if (leaf->op != Op::none) return ::testing::AssertionFailure() << "leaf with op " << name_of(leaf->op);
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Tensor* n = g.nodes()[i];
    std::vector<const Tensor*> deps(n->src.begin(), n->src.end());
    deps.push_back(n->view_src);
    for (const Tensor* s : deps) {
      if (s == nullptr) continue;
      const auto it = index.find(s);
      if (it == index.end()) {
        if (std::find(g.leafs().begin(), g.leafs().end(), s) == g.leafs().end()) {
          return ::testing::AssertionFailure() << "node " << i << " reads a tensor outside the graph";
        }
      } else if (it->second >= i) {
        return ::testing::AssertionFailure() << "node " << i << " comes before its source (node " << it->second << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(GraphBuildTest, OrdersADiamondSourcesFirstEachNodeOnce) {
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {8});
  Tensor* y = ctx.silu(x);
  Tensor* z = ctx.gelu(x);
  Tensor* w = ctx.add(y, z);
  Tensor* out = ctx.mul(w, y);
  Graph g = Graph::build({out});
  EXPECT_TRUE(ordered_once(g));
  EXPECT_EQ(g.n_nodes(), 4u);
  EXPECT_EQ(g.leafs(), (std::vector<Tensor*>{x}));
  EXPECT_EQ(g.nodes().back(), out);
  EXPECT_EQ(g.outputs(), (std::vector<Tensor*>{out}));
  EXPECT_TRUE(out->flags & kFlagOutput);
  EXPECT_FALSE(w->flags & kFlagOutput);
}

TEST(GraphBuildTest, IncludesViewsAndTheLeavesBehindThem) {
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {8, 4});
  Tensor* xt = ctx.transpose(x);
  Tensor* r = ctx.reshape(ctx.cont(xt), {32});
  Tensor* out = ctx.scale(r, 2.0f);
  Graph g = Graph::build({out});
  EXPECT_TRUE(ordered_once(g));
  EXPECT_EQ(g.leafs(), (std::vector<Tensor*>{x}));
  EXPECT_EQ(g.n_nodes(), 4u);  // transpose, cpy, reshape, scale
  EXPECT_NE(std::find(g.nodes().begin(), g.nodes().end(), xt), g.nodes().end());
}

TEST(GraphBuildTest, SharedSubgraphsOfSeveralOutputsAppearOnce) {
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {8});
  Tensor* w = ctx.new_tensor(DType::f32, {8});
  Tensor* h = ctx.mul(ctx.silu(x), w);
  Tensor* o1 = ctx.scale(h, 2.0f);
  Tensor* o2 = ctx.add(h, x);
  Graph g = Graph::build({o1, o2});
  EXPECT_TRUE(ordered_once(g));
  EXPECT_EQ(g.n_nodes(), 4u);
  EXPECT_EQ(g.leafs().size(), 2u);
  EXPECT_TRUE(o1->flags & kFlagOutput);
  EXPECT_TRUE(o2->flags & kFlagOutput);
  g.expand(o2);
  g.expand(h);
  EXPECT_EQ(g.n_nodes(), 4u) << "expand adds only what is missing";
  Tensor* o3 = ctx.gelu(o1);
  g.expand(o3);
  EXPECT_EQ(g.n_nodes(), 5u);
  EXPECT_EQ(g.nodes().back(), o3);
  EXPECT_TRUE(ordered_once(g));
}

TEST(GraphBuildTest, BuildsAVeryDeepChainInOrder) {
  Context ctx;
  Tensor* t = ctx.new_tensor(DType::f32, {4});
  std::vector<Tensor*> chain;
  for (int i = 0; i < 20000; ++i) chain.push_back(t = ctx.silu(t));
  Graph g = Graph::build({t});
  EXPECT_EQ(g.nodes(), chain);
}

TEST(GraphBuildTest, ANullOutputIsAnError) { EXPECT_THROW(Graph::build({nullptr}), Error); }

}  // namespace
}  // namespace tensorpc::test
