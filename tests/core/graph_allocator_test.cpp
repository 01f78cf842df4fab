// plan_memory and GraphAllocator: bytes are reused once a tensor is dead, but
// never while it is live; inputs and outputs are never reused; views take no
// space and keep their source alive; offsets are aligned.
//
// Lifetimes are computed here from the graph, independently of the planner:
// a tensor that owns bytes is live from the node that computes it (inputs:
// from before the first node) to the last node that reads it directly or
// through a view (inputs and outputs: to after the last node), both ends
// included.
#include <algorithm>
#include <limits>
#include <unordered_map>

#include "test_util.h"

namespace tensorpc::test {
namespace {

struct Lifetime {
  int64_t first;
  int64_t last;
};

const Tensor* owner_of(const Tensor* t) {
  while (t->view_src) t = t->view_src;
  return t;
}

std::unordered_map<const Tensor*, Lifetime> lifetimes(const Graph& g) {
  const int64_t end = static_cast<int64_t>(g.nodes().size());
  std::unordered_map<const Tensor*, Lifetime> life;
  for (const Tensor* leaf : g.leafs()) life[leaf] = {-1, -1};
  for (int64_t i = 0; i < end; ++i) {
    const Tensor* n = g.nodes()[i];
    if (!n->view_src) life.emplace(n, Lifetime{i, i});
    std::vector<const Tensor*> reads(n->src.begin(), n->src.end());
    reads.push_back(n->view_src);
    for (const Tensor* s : reads) {
      if (s) life[owner_of(s)].last = std::max(life[owner_of(s)].last, i);
    }
  }
  for (const Tensor* t : g.leafs()) {
    if (t->flags & kFlagInput) life[t] = {-1, end};
  }
  for (const Tensor* t : g.nodes()) {
    if (t->flags & (kFlagOutput | kFlagInput)) life[owner_of(t)].last = end;
  }
  return life;
}

uint64_t span(const Tensor* t) { return std::max<uint64_t>(t->nbytes(), 1); }

// No two placements whose lifetimes overlap share a byte.
::testing::AssertionResult live_tensors_never_overlap(const Graph& g, const MemoryPlan& plan) {
  const auto life = lifetimes(g);
  const auto& p = plan.placements;
  for (size_t i = 0; i < p.size(); ++i)
    for (size_t j = i + 1; j < p.size(); ++j) {
      const Lifetime a = life.at(p[i].tensor), b = life.at(p[j].tensor);
      if (a.last < b.first || b.last < a.first) continue;
      const bool disjoint =
          p[i].offset + span(p[i].tensor) <= p[j].offset || p[j].offset + span(p[j].tensor) <= p[i].offset;
      if (!disjoint) {
        return ::testing::AssertionFailure()
               << describe(*p[i].tensor) << " '" << p[i].tensor->name << "' live [" << a.first << ", " << a.last
               << "] at [" << p[i].offset << ", +" << span(p[i].tensor) << ") overlaps " << describe(*p[j].tensor)
               << " '" << p[j].tensor->name << "' live [" << b.first << ", " << b.last << "] at [" << p[j].offset
               << ", +" << span(p[j].tensor) << ")";
      }
    }
  return ::testing::AssertionSuccess();
}

const MemoryPlan::Placement* find(const MemoryPlan& plan, const Tensor* t) {
  for (const auto& p : plan.placements)
    if (p.tensor == t) return &p;
  return nullptr;
}

bool overlap(const MemoryPlan& plan, const Tensor* a, const Tensor* b) {
  const auto* pa = find(plan, a);
  const auto* pb = find(plan, b);
  return pa->offset < pb->offset + span(b) && pb->offset < pa->offset + span(a);
}

// x -> silu -> silu -> ... (n times), every tensor [1000] f32.
Tensor* silu_chain(Context& ctx, Tensor* t, int n, std::vector<Tensor*>* chain = nullptr) {
  for (int i = 0; i < n; ++i) {
    t = ctx.silu(t);
    t->name = "silu" + std::to_string(i);
    if (chain) chain->push_back(t);
  }
  return t;
}

TEST(PlanMemoryTest, AChainOfSameSizeOpsNeedsAFewTensorsWorth) {
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {1000}, "x");
  Tensor* out = silu_chain(ctx, x, 32);
  Graph g = Graph::build({out});
  const MemoryPlan plan = plan_memory(g, 64);
  const uint64_t one = 4032;  // 4000 bytes aligned up to 64
  EXPECT_EQ(plan.placements.size(), 33u);
  EXPECT_GE(plan.sum_of_sizes, 33 * 4000u);
  // input + output + two intermediates in turn
  EXPECT_LE(plan.peak, 4 * one);
  EXPECT_LT(plan.peak, plan.sum_of_sizes);
  EXPECT_TRUE(live_tensors_never_overlap(g, plan));
}

TEST(PlanMemoryTest, OffsetsAreMultiplesOfTheAlignment) {
  for (uint64_t alignment : {16u, 64u, 256u}) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    Context ctx;
    Tensor* x = input(ctx, DType::f32, {3}, "x");    // 12 bytes
    Tensor* y = input(ctx, DType::f16, {5}, "y");    // 10 bytes
    Tensor* a = ctx.silu(x);
    Tensor* b = ctx.cast(y, DType::f32);
    Tensor* c = ctx.concat(ctx.gelu(a), b, 0);
    Graph g = Graph::build({ctx.scale(c, 2.0f)});
    const MemoryPlan plan = plan_memory(g, alignment);
    for (const auto& p : plan.placements) EXPECT_EQ(p.offset % alignment, 0u) << describe(*p.tensor);
    EXPECT_TRUE(live_tensors_never_overlap(g, plan));
  }
}

TEST(PlanMemoryTest, ViewsTakeNoSpaceAndKeepTheirSourceAlive) {
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {1000}, "x");
  Tensor* x2 = input(ctx, DType::f32, {1000}, "x2");
  Tensor* y = ctx.silu(x);
  y->name = "y";
  Tensor* v = ctx.reshape(y, {100, 10});
  Tensor* vv = ctx.view(v, {500}, {4}, 2000);  // a view of the view
  // y is read first by the chain's head, then only through vv after the chain.
  std::vector<Tensor*> chain;
  Tensor* c = silu_chain(ctx, ctx.mul(x2, y), 8, &chain);
  Tensor* out = ctx.add(ctx.reshape(c, {500, 2}), ctx.reshape(ctx.cont(vv), {500, 1}));
  Graph g = Graph::build({out});
  const MemoryPlan plan = plan_memory(g, 64);
  for (const auto& p : plan.placements) EXPECT_FALSE(p.tensor->is_view()) << describe(*p.tensor);
  ASSERT_NE(find(plan, y), nullptr);
  ASSERT_LT(std::find(g.nodes().begin(), g.nodes().end(), chain.back()), std::find(g.nodes().begin(), g.nodes().end(), vv))
      << "the test needs vv read after the chain";
  for (Tensor* t : chain) EXPECT_FALSE(overlap(plan, y, t)) << t->name << " took y's bytes while a view of y lives";
  EXPECT_TRUE(live_tensors_never_overlap(g, plan));
}

TEST(PlanMemoryTest, InputsAndOutputsAreNeverReused) {
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {1000}, "x");
  Tensor* early = ctx.silu(x);
  early->name = "early";
  std::vector<Tensor*> chain;
  Tensor* last = silu_chain(ctx, early, 12, &chain);
  Graph g = Graph::build({early, last});
  const MemoryPlan plan = plan_memory(g, 64);
  for (Tensor* t : chain) {
    EXPECT_FALSE(overlap(plan, x, t)) << t->name << " reuses the input";
    EXPECT_FALSE(overlap(plan, early, t)) << t->name << " reuses an output";
  }
  EXPECT_TRUE(live_tensors_never_overlap(g, plan));
}

TEST(PlanMemoryTest, PlacedWeightsTakeNoSpace) {
  CpuDevice dev({.threads = 1});
  Context ctx;
  Tensor* w = ctx.new_tensor(DType::q8_0, {64, 16}, "w");
  w->flags |= kFlagWeight;
  auto buf = dev.allocate(w->nbytes());
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(buf.value()->place(*w, 0).ok());
  Tensor* x = input(ctx, DType::f32, {64, 2}, "x");
  Graph g = Graph::build({ctx.mul_mat(w, x)});
  const MemoryPlan plan = plan_memory(g, 64);
  EXPECT_EQ(find(plan, w), nullptr);
  EXPECT_EQ(plan.placements.size(), 2u);  // x and the product
}

// A graph shaped like an attention block, with views, copies, fan-out and a
// dead end: every pair of live tensors is checked.
TEST(PlanMemoryTest, LiveTensorsOfAnAttentionGraphNeverOverlap) {
  Context ctx;
  const int64_t D = 64, T = 7, Hd = 16, H = 4;
  Tensor* x = input(ctx, DType::f32, {D, T}, "x");
  Tensor* pos = input(ctx, DType::i32, {T}, "pos");
  Tensor* wq = input(ctx, DType::q8_0, {D, D}, "wq");
  Tensor* wk = input(ctx, DType::f16, {D, D}, "wk");
  Tensor* wv = input(ctx, DType::f32, {D, D}, "wv");
  Tensor* h = ctx.rms_norm(x, 1e-5f);
  Tensor* q = ctx.permute(ctx.rope(ctx.reshape(ctx.mul_mat(wq, h), {Hd, H, T}), pos, Hd, kRopeNormal), 0, 2, 1, 3);
  Tensor* k = ctx.permute(ctx.rope(ctx.reshape(ctx.mul_mat(wk, h), {Hd, H, T}), pos, Hd, kRopeNormal), 0, 2, 1, 3);
  Tensor* p = ctx.soft_max(ctx.diag_mask_inf(ctx.mul_mat(k, q), 0), nullptr, 0.25f);
  Tensor* v = ctx.cont(ctx.permute(ctx.reshape(ctx.mul_mat(wv, h), {Hd, H, T}), 1, 2, 0, 3));
  ctx.gelu(p);  // built but not part of the graph
  Tensor* dead_end_user = ctx.add(ctx.mul_mat(v, p), ctx.scale(ctx.mul_mat(v, p), 0.5f));
  Tensor* o = ctx.reshape(ctx.cont(ctx.permute(dead_end_user, 0, 2, 1, 3)), {D, T});
  Tensor* y = ctx.add(o, x);
  Graph g = Graph::build({y});
  g.expand(ctx.silu(h));  // a node nobody reads
  const MemoryPlan plan = plan_memory(g, 64);
  EXPECT_LT(plan.peak, plan.sum_of_sizes);
  EXPECT_TRUE(live_tensors_never_overlap(g, plan));
}

TEST(GraphAllocatorTest, PlacesEveryTensorAndViewInItsBuffer) {
  CpuDevice dev({.threads = 1});
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {16, 4}, "x");
  Tensor* xt = ctx.transpose(x);
  Tensor* y = ctx.cont(xt);
  Tensor* r = ctx.view(y, {8, 2}, {4, 32}, 16);
  Tensor* out = ctx.scale(ctx.cont(r), 3.0f);
  Graph g = Graph::build({out});
  GraphAllocator alloc(dev);
  ASSERT_TRUE(alloc.allocate(g).ok());
  ASSERT_NE(alloc.buffer(), nullptr);
  EXPECT_GE(alloc.buffer()->size(), alloc.last_plan().peak);
  auto* base = static_cast<char*>(alloc.buffer()->host_base());
  ASSERT_NE(base, nullptr);
  for (const auto& p : alloc.last_plan().placements) {
    EXPECT_EQ(p.tensor->buffer, alloc.buffer());
    EXPECT_EQ(p.tensor->offset, p.offset);
    EXPECT_EQ(p.tensor->data, base + p.offset);
  }
  for (Tensor* view : {xt, r}) {
    EXPECT_EQ(view->buffer, alloc.buffer());
    EXPECT_EQ(view->data, static_cast<char*>(view->view_src->data) + view->view_offset);
  }
}

TEST(GraphAllocatorTest, ABiggerSecondGraphGrowsTheBufferAndComputes) {
  CpuDevice dev({.threads = 2});
  GraphAllocator alloc(dev);
  Context ctx1;
  Tensor* a = input(ctx1, DType::f32, {8}, "a");
  Graph g1 = Graph::build({ctx1.silu(a)});
  ASSERT_TRUE(alloc.allocate(g1).ok());
  const uint64_t first_size = alloc.buffer()->size();

  Context ctx2;
  Tensor* b = input(ctx2, DType::f32, {4096, 4}, "b");
  Tensor* out = ctx2.scale(silu_chain(ctx2, b, 3), 2.0f);
  Graph g2 = Graph::build({out});
  ASSERT_TRUE(alloc.allocate(g2).ok());
  EXPECT_GT(alloc.buffer()->size(), first_size);
  const auto vb = random_floats(b->nelements(), 70);
  ASSERT_TRUE(write_from_f32(*b, vb).ok());
  auto stream = dev.create_stream();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE(stream.value()->compute(g2).ok());
  const HostTensor want = ref::unary(HostTensor({4096, 4, 1, 1}, vb),
                                     [](double v) { return 2 * ref::silu(ref::silu(ref::silu(v))); });
  EXPECT_TRUE(all_near(read_as_f32(*out).value(), want.v, Tolerance{1e-5, 1e-6}));
}

TEST(GraphAllocatorTest, GraphsThatGrowALittleEachTimeReallocateOnlyNowAndThen) {
  // As decode steps do: each graph a little larger than the last.
  CpuDevice dev({.threads = 1});
  GraphAllocator alloc(dev);
  int reallocations = 0;
  const Buffer* last = nullptr;
  uint64_t last_size = 0;
  for (int64_t n = 1024; n < 1024 + 64 * 40; n += 64) {
    Context ctx;
    Tensor* x = input(ctx, DType::f32, {n}, "x");
    Graph g = Graph::build({ctx.silu(ctx.silu(x))});
    ASSERT_TRUE(alloc.allocate(g).ok());
    if (alloc.buffer() != last || alloc.buffer()->size() != last_size) ++reallocations;
    last = alloc.buffer();
    last_size = alloc.buffer()->size();
  }
  // Growing by exactly what each needs would reallocate at nearly every one.
  EXPECT_LE(reallocations, 6) << "40 graphs, each 256 bytes larger than the last";
}

TEST(GraphAllocatorTest, GrowsOnlyAsNeededWhenTheRoomierBufferDoesNotFit) {
  Context ctx1, ctx2;
  Tensor* small = input(ctx1, DType::f32, {1024}, "small");
  Graph g1 = Graph::build({ctx1.silu(small)});
  Tensor* big = input(ctx2, DType::f32, {1280}, "big");
  Graph g2 = Graph::build({ctx2.silu(big)});
  CpuDevice dev({.threads = 1});
  const uint64_t first = plan_memory(g1, dev.alignment()).peak;
  const uint64_t exact = plan_memory(g2, dev.alignment()).peak;
  ASSERT_GT(exact, first);
  ASSERT_LT(exact, first + first / 2);  // half again the first would not fit under the limit below
  CpuDevice limited({.threads = 1, .memory_limit = exact});
  GraphAllocator alloc(limited);
  ASSERT_TRUE(alloc.allocate(g1).ok());
  Status s = alloc.allocate(g2);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(alloc.buffer()->size(), exact);
}

}  // namespace
}  // namespace tensorpc::test
