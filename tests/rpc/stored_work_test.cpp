// One cache protocol (docs/protocol.md, "Stored graphs and plans"): the
// server keeps as many graphs and plans as it is told and drops the least
// recently used; a client that runs a dropped one by id learns it from the
// reply, stores it again and runs it in its place, before anything it sent
// later. Shown with servers that keep a single entry: graphs on a stream,
// and a plan whose bytes another server's plan waits for.
#include <gtest/gtest.h>

#include "core/lru.h"
#include "remote_test_util.h"
#include "rpc/client/remote_buffer.h"
#include "rpc/server/stored_work.h"
#include "rpc_test_util.h"

namespace tensorpc::test {
namespace {

TEST(LruStore, PutAndFindMakeAnEntryTheNewestAndTrimDropsTheOldest) {
  LruStore<int, std::string> lru;
  lru.put(1, "one");
  lru.put(2, "two");
  lru.put(3, "three");
  ASSERT_NE(lru.find(1), nullptr);  // 1 is now the newest: 2 is the oldest
  lru.trim_to(2);
  EXPECT_EQ(lru.peek(2), nullptr);
  ASSERT_NE(lru.peek(1), nullptr);
  EXPECT_EQ(*lru.peek(1), "one");
  lru.put(3, "THREE");  // replaces, and becomes the newest
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(lru.pop_oldest()->first, 1);
  lru.erase_if([](int key, const std::string&) { return key == 3; });
  EXPECT_TRUE(lru.empty());
  EXPECT_FALSE(lru.pop_oldest().has_value());
}

TEST(StoredWork, StoringPastTheCapacityDropsTheLeastRecentlyUsedAndSaysSo) {
  rpc::StoredWork work(2);
  for (uint64_t id = 1; id <= 2; ++id) work.store_graph({.id = id, .device = 0, .graph = {}, .handles = {7}});
  ASSERT_TRUE(work.use_graph(1, 0).ok());  // graph 2 is now the least recently used
  work.store_graph({.id = 3, .device = 0, .graph = {}, .handles = {8}});
  const auto gone = work.use_graph(2, 0);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::not_found);
  EXPECT_TRUE(contains(gone.status().message(), "graph 2 not found")) << gone.status().to_string();
  EXPECT_TRUE(contains(gone.status().message(), "the 2 most recently used are kept")) << gone.status().to_string();
  EXPECT_TRUE(work.use_graph(1, 0).ok());
  EXPECT_FALSE(work.use_graph(3, 1).ok()) << "stored for device 0";
  work.forget_users_of(8);
  EXPECT_FALSE(work.use_graph(3, 0).ok()) << "its buffer was freed";
}

ServerOptions keeping_one() {
  ServerOptions o = options_of({std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 2})});
  o.stored_graphs = 1;
  return o;
}

// Two graphs run by turns on a stream of a server that keeps one: each run
// by id finds the other stored in its place, and is resent; every result is
// right, and sets that follow a resent graph land after it.
TEST(StoredGraphs, GraphsRunByTurnsOnAServerKeepingOneAreResentAndRightEachTime) {
  InProcessServer server(keeping_one());
  auto device = remote_device(server.endpoint(), 0);
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {64});
  Tensor* doubled = ctx.add(x, x);
  Tensor* squared = ctx.mul(x, x);
  Graph both = Graph::build({doubled, squared});  // placed once, run as two graphs
  GraphAllocator alloc(*device);
  check(alloc.allocate(both), "allocate");
  Graph g_doubled = Graph::build({doubled});
  Graph g_squared = Graph::build({squared});
  auto stream = device->create_stream();
  ASSERT_TRUE(stream.ok());
  const uint64_t resent_before = connection_stats(server.endpoint()).resent;

  for (int run = 0; run < 4; ++run) {
    const std::vector<float> values = random_floats(64, 100 + run);
    check(write_from_f32(*x, values), "x");
    ASSERT_TRUE(stream.value()->compute_async(g_doubled).ok());
    ASSERT_TRUE(stream.value()->compute_async(g_squared).ok());
    // Set after the graphs: it must not overtake a resent one.
    check(write_from_f32(*x, std::vector<float>(64, 0.0f)), "x after");
    ASSERT_TRUE(stream.value()->synchronize().ok());
    auto d = read_as_f32(*doubled);
    auto q = read_as_f32(*squared);
    ASSERT_TRUE(d.ok() && q.ok());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(d.value()[i], values[i] + values[i]) << "run " << run << " element " << i;
      ASSERT_EQ(q.value()[i], values[i] * values[i]) << "run " << run << " element " << i;
    }
  }
  // Runs 1 to 3 found each graph dropped by the other: two resends each.
  EXPECT_EQ(connection_stats(server.endpoint()).resent - resent_before, 6u);
}

// A's plan sends to B, whose plan waits for those bytes; A keeps one plan,
// and another plan run on A in between drops the first. Running the first
// again by id, A answers "not found"; settling A before waiting on B stores
// and runs it again, so B's wait is met and the result is right.
// The plan runs of the test below: whether the read of B goes out before A's
// plans are settled (as the scheduler does it, settling while the read's reply
// is on its way) or after.
enum class SettleA { before_the_read, while_the_read_waits };

void run_a_plan_dropped_by_its_server(SettleA when) {
  InProcessServer a(keeping_one()), b(keeping_one());
  auto da = remote_device(a.endpoint(), 0), db = remote_device(b.endpoint(), 0);
  Context ctx;
  Tensor* src = input(ctx, DType::f32, {64});
  Tensor* scratch = input(ctx, DType::f32, {64});
  Tensor* dst = input(ctx, DType::f32, {64});
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (auto [t, d] : {std::pair{src, da.get()}, std::pair{scratch, da.get()}, std::pair{dst, db.get()}}) {
    auto buffer = d->allocate(t->nbytes());
    check(buffer.status(), "allocate");
    check(buffer.value()->place(*t, 0), "place");
    buffers.push_back(std::move(buffer).value());
  }
  Tensor* y = ctx.add(dst, dst);
  Graph g = Graph::build({y});
  GraphAllocator alloc(*db);
  check(alloc.allocate(g), "allocate y");
  auto on_a = da->create_plan_runner(), on_b = db->create_plan_runner();
  ASSERT_TRUE(on_a.ok() && on_b.ok());
  ExecutionPlanSpec send, other, receive;
  send.key = 1;
  send.send(*src, *dst);
  other.key = 2;
  other.copy(*src, *scratch);
  receive.key = 3;
  receive.wait(*src, *dst);
  receive.compute(*db, g);
  const uint64_t resent_before = connection_stats(a.endpoint()).resent;

  for (int run = 0; run < 3; ++run) {
    const std::vector<float> values = random_floats(64, 200 + run);
    check(write_from_f32(*src, values), "src");
    ASSERT_TRUE(on_a.value()->run_async(send).ok());
    ASSERT_TRUE(on_b.value()->run_async(receive).ok());
    std::vector<float> got(64);
    Status settled = internal_error("A not settled");
    Status read;
    if (when == SettleA::before_the_read) {
      settled = on_a.value()->settle();
      read = on_b.value()->synchronize_and_read(*y, got.data());
    } else {
      // B's read is out, waiting for B's plan, which waits for A's bytes:
      // A's dropped plan must be sent again from in here.
      read = on_b.value()->synchronize_and_read(*y, got.data(), [&] {
        const std::optional<Status> s = on_a.value()->try_settle();
        settled = s ? *s : internal_error("A's connection was busy");
      });
    }
    ASSERT_TRUE(settled.ok()) << settled.to_string();
    ASSERT_TRUE(read.ok()) << read.to_string();
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(got[i], values[i] + values[i]) << "run " << run;
    ASSERT_TRUE(on_a.value()->run_async(other).ok());  // drops `send` on A
    ASSERT_TRUE(on_a.value()->synchronize().ok());
  }
  // Runs 1 and 2 found each of A's plans dropped by the other.
  EXPECT_EQ(connection_stats(a.endpoint()).resent - resent_before, 4u);
}

TEST(StoredPlans, APlanDroppedByItsServerIsStoredAgainBeforeTheServerWaitingForItsBytesIsAsked) {
  run_a_plan_dropped_by_its_server(SettleA::before_the_read);
}

TEST(StoredPlans, APlanDroppedByItsServerIsStoredAgainWhileTheServerWaitingForItsBytesIsAsked) {
  run_a_plan_dropped_by_its_server(SettleA::while_the_read_waits);
}

}  // namespace
}  // namespace tensorpc::test
