// plan_barriers: which nodes of a graph wait for the ones before them. The
// tests place tensors by hand (as the graph allocator would, reusing memory
// where they say so) and check the plan against the rule in barrier_plan.h.
#include "cpu/barrier_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "tensorpc/context.h"
#include "tensorpc/graph.h"

namespace tensorpc::cpu {
namespace {

// Gives every tensor of g without bytes its own bytes in `arena`; views
// share their source's.
class Placement {
 public:
  void place(Tensor* t) {
    if (t->data != nullptr) return;
    if (t->view_src != nullptr) {
      place(t->view_src);
      t->data = static_cast<char*>(t->view_src->data) + t->view_offset;
      return;
    }
    arenas_.emplace_back(t->nbytes());
    t->data = arenas_.back().data();
  }
  void place_all(const Graph& g) {
    for (Tensor* t : g.leafs()) place(t);
    for (Tensor* t : g.nodes()) place(t);
  }

 private:
  std::vector<std::vector<char>> arenas_;
};

// The indices of the nodes the plan makes wait.
std::vector<size_t> waiting(const Graph& g) {
  const std::vector<uint8_t> plan = plan_barriers(g);
  EXPECT_EQ(plan.size(), g.nodes().size());
  std::vector<size_t> at;
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i]) at.push_back(i);
  return at;
}

TEST(BarrierPlan, ProjectionsOfOneInputRunWithoutBarriers) {
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {64, 1});
  Tensor* q = ctx.mul_mat(ctx.new_tensor(DType::q8_0, {64, 32}), x);
  Tensor* k = ctx.mul_mat(ctx.new_tensor(DType::q8_0, {64, 16}), x);
  Tensor* v = ctx.mul_mat(ctx.new_tensor(DType::f32, {64, 16}), x);
  Graph g = Graph::build({q, k, v});
  Placement bytes;
  bytes.place_all(g);
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_TRUE(waiting(g).empty());  // one activation row: each thread quantizes it into its own slot
}

TEST(BarrierPlan, ANodeWaitsForWhatItReads) {
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {64, 1});
  Tensor* n = ctx.rms_norm(x, 1e-5f);
  Tensor* y = ctx.mul_mat(ctx.new_tensor(DType::f32, {64, 8}), n);
  Tensor* z = ctx.add(y, y);
  Graph g = Graph::build({z});
  Placement bytes;
  bytes.place_all(g);
  EXPECT_EQ(waiting(g), (std::vector<size_t>{1, 2}));
}

TEST(BarrierPlan, ANodeWaitsBeforeWritingWhatAnEarlierOneStillReads) {
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {64, 4});
  Tensor* b = ctx.new_tensor(DType::f32, {64, 4});
  Tensor* c = ctx.new_tensor(DType::f32, {64, 4});
  Tensor* first = ctx.add(a, b);
  Tensor* second = ctx.add(c, c);
  Graph g = Graph::build({first, second});
  Placement bytes;
  ASSERT_EQ(g.nodes().size(), 2u);
  // The allocator gave `second` the bytes of `a`, whose last reader is `first`:
  // a thread may still be reading them.
  bytes.place(a);
  second->data = static_cast<char*>(a->data) + 16 * sizeof(float);
  bytes.place_all(g);
  EXPECT_EQ(waiting(g), (std::vector<size_t>{1}));
}

TEST(BarrierPlan, ANodeWaitsBeforeWritingWhatAnEarlierOneWrites) {
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {64, 4});
  Tensor* first = ctx.add(a, a);
  Tensor* second = ctx.scale(ctx.new_tensor(DType::f32, {64, 4}), 2.0f);
  Graph g = Graph::build({first, second});
  Placement bytes;
  bytes.place_all(g);
  EXPECT_TRUE(waiting(g).empty());
  second->data = first->data;
  EXPECT_EQ(waiting(g), (std::vector<size_t>{1}));
}

TEST(BarrierPlan, SharedScratchIsUsedByOneNodeAtATime) {
  Context ctx;
  // Eight activation rows are converted once, each thread a part, into the shared scratch.
  Tensor* x = ctx.new_tensor(DType::f32, {64, 8});
  Tensor* w1 = ctx.new_tensor(DType::q8_0, {64, 16});
  Tensor* w2 = ctx.new_tensor(DType::q4_0, {64, 16});
  Tensor* one = ctx.new_tensor(DType::f32, {64, 1});
  Graph g = Graph::build({ctx.mul_mat(w1, x), ctx.mul_mat(w2, x), ctx.mul_mat(w1, one), ctx.mul_mat(w2, one)});
  Placement bytes;
  bytes.place_all(g);
  // The second shared node waits for the first; a per-thread node waits for a
  // shared one in flight, but not for another per-thread one.
  EXPECT_EQ(waiting(g), (std::vector<size_t>{1, 2}));
}

TEST(BarrierPlan, ViewsAreComparedByTheirBytes) {
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {64, 4});
  Tensor* b = ctx.new_tensor(DType::f32, {64, 4});
  Tensor* sum = ctx.add(a, b);
  // A reader of the sum's last two rows, through a view, waits for the sum;
  // a reader of a alone (which nothing in flight writes) does not.
  Tensor* tail = ctx.view(sum, {64, 2}, {sum->nb[0], sum->nb[1]}, 2 * sum->nb[1]);
  Tensor* reads_tail = ctx.scale(tail, 3.0f);
  Tensor* reads_a = ctx.scale(a, 3.0f);
  Graph g = Graph::build({sum, reads_a, reads_tail});
  Placement bytes;
  bytes.place_all(g);
  std::vector<size_t> expected;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (g.nodes()[i] == reads_tail) expected.push_back(i);
  EXPECT_EQ(waiting(g), expected);
}

}  // namespace
}  // namespace tensorpc::cpu
