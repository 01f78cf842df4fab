// The scheduler: a graph split over several devices (local, one server,
// two servers) computes the same bits as on one device (SchedulerResults);
// copies sit only at split boundaries, once per consumer device
// (SchedulerPlan); plans are reused for the same shape (SchedulerCache); a
// device that cannot run an op hands it on (SchedulerFallback); a hand-over
// between devices of one server stays on the server (SchedulerTraffic).
#include <set>

#include "../rpc/remote_test_util.h"
#include "scheduler_test_util.h"

namespace tensorpc::test {
namespace {

constexpr int64_t kTokens = 5;

using Outputs = TinyOutputs;

// The model on one CPU device, without the scheduler.
Outputs reference() { return tiny_reference(kTokens, 7); }

Outputs run_scheduled(Scheduler& sched, const TinyModel& model, int64_t T = kTokens) {
  Context ctx;
  auto step = model.build(ctx, T);
  Graph g = Graph::build({step.logits, step.ids});
  check(sched.allocate(g), "Scheduler::allocate");
  TinyModel::write_inputs(step, T, 7);
  check(sched.compute(g), "Scheduler::compute");
  return {TinyModel::bytes_of(step.logits), TinyModel::bytes_of(step.ids)};
}

std::vector<Device*> raw(const std::vector<std::unique_ptr<Device>>& ds) {
  std::vector<Device*> out;
  for (const auto& d : ds) out.push_back(d.get());
  return out;
}

std::vector<std::unique_ptr<Device>> connect(const std::string& endpoint) {
  auto devices = connect_devices(endpoint);
  check(devices.status(), "connect_devices");
  return std::move(devices).value();
}

// ---- results ----------------------------------------------------------------

TEST(SchedulerResults, OneTwoAndFourLocalDevicesGiveTheBitsOfOneDevice) {
  const Outputs want = reference();
  for (int n : {1, 2, 4}) {
    std::vector<std::unique_ptr<CpuDevice>> cpus;
    std::vector<Device*> devices;
    for (int i = 0; i < n; ++i) {
      cpus.push_back(std::make_unique<CpuDevice>(two_threads("cpu" + std::to_string(i))));
      devices.push_back(cpus.back().get());
    }
    TinyModel model(devices);
    Scheduler sched(devices);
    EXPECT_TRUE(run_scheduled(sched, model) == want) << n << " devices\n" << sched.describe();
    std::set<int> used(sched.last_plan()->node_device.begin(), sched.last_plan()->node_device.end());
    EXPECT_EQ(used.size(), static_cast<size_t>(n)) << "every device computes a part";
    EXPECT_EQ(sched.last_run().splits_run, sched.last_plan()->splits.size());
  }
}

TEST(SchedulerResults, OneServerWithTwoDevicesGivesTheBitsOfOneDevice) {
  const Outputs want = reference();
  InProcessServer server(two_cpus());
  auto remote = connect(server.endpoint());
  TinyModel model(raw(remote));
  Scheduler sched(raw(remote));
  EXPECT_TRUE(run_scheduled(sched, model) == want) << sched.describe();
  EXPECT_EQ(sched.last_run().copies_through_host, 0u) << "copies between devices of one server run there";
  ASSERT_EQ(sched.last_plan()->server_runs.size(), 1u);
  EXPECT_EQ(sched.last_plan()->server_runs[0].n_splits, sched.last_plan()->splits.size());
}

TEST(SchedulerResults, TwoServersWithTwoDevicesEachGiveTheBitsOfOneDevice) {
  const Outputs want = reference();
  InProcessServer a(two_cpus()), b(two_cpus());
  auto ra = connect(a.endpoint()), rb = connect(b.endpoint());
  std::vector<Device*> devices = {ra[0].get(), ra[1].get(), rb[0].get(), rb[1].get()};
  TinyModel model(devices);
  Scheduler sched(devices);
  EXPECT_TRUE(run_scheduled(sched, model) == want) << sched.describe();
  EXPECT_EQ(sched.last_run().copies_through_host, 0u) << "server to server, never through the client";
  // Runs of consecutive splits on one server: maximal, covering every split.
  const auto& runs = sched.last_plan()->server_runs;
  size_t covered = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].first_split, covered);
    covered += runs[i].n_splits;
    if (i > 0) {
      EXPECT_NE(runs[i].channel, runs[i - 1].channel);
    }
  }
  EXPECT_EQ(covered, sched.last_plan()->splits.size());
  EXPECT_GE(runs.size(), 2u) << sched.describe();
}

TEST(SchedulerResults, LocalAndRemoteDevicesMixed) {
  const Outputs want = reference();
  InProcessServer server(two_cpus());
  auto remote = connect(server.endpoint());
  CpuDevice cpu(two_threads("local"));
  std::vector<Device*> devices = {&cpu, remote[0].get(), remote[1].get()};
  TinyModel model(devices);
  Scheduler sched(devices);
  EXPECT_TRUE(run_scheduled(sched, model) == want) << sched.describe();
  // A copy from a remote device to the local CPU is a get then a set here;
  // every other copy is made by a buffer (a set from host memory, or on a server).
  uint64_t remote_to_local = 0;
  for (const auto& c : sched.last_plan()->copies) remote_to_local += (c.from != 0 && c.to == 0);
  EXPECT_EQ(sched.last_run().copies_through_host, remote_to_local) << sched.describe();
}

// ---- the plan -------------------------------------------------------------------

TEST(SchedulerPlan, CopiesOnlyAtSplitBoundariesOncePerConsumerDevice) {
  CpuDevice c0(two_threads("cpu0")), c1(two_threads("cpu1"));
  std::vector<Device*> devices = {&c0, &c1};
  TinyModel model(devices, [](int l) { return static_cast<size_t>(l % 2); });  // 0 1 0 1
  Scheduler sched(devices);
  Context ctx;
  auto step = model.build(ctx, kTokens);
  Graph g = Graph::build({step.logits, step.ids});
  check(sched.allocate(g), "allocate");
  const SchedulePlanInfo& plan = *sched.last_plan();

  // The copies the plan should make, worked out from its assignment: one per
  // (tensor read, consumer device) where the bytes live elsewhere.
  const size_t L = g.leafs().size();
  const auto id_of = [&](const Tensor* t) -> size_t {
    if (t->view_src) t = t->view_src;
    for (size_t i = 0; i < L; ++i) {
      if (g.leafs()[i] == t) return i;
    }
    for (size_t i = 0; i < g.n_nodes(); ++i) {
      if (g.nodes()[i] == t) return L + i;
    }
    return SIZE_MAX;
  };
  const auto device_of = [&](size_t id) { return id < L ? plan.leaf_device[id] : plan.node_device[id - L]; };
  std::set<std::pair<const Tensor*, int>> want;
  for (size_t i = 0; i < g.n_nodes(); ++i) {
    const Tensor* n = g.nodes()[i];
    if (n->view_src && is_view_op(n->op)) continue;
    for (const Tensor* s : n->src) {
      if (s && device_of(id_of(s)) != plan.node_device[i]) want.insert({s, plan.node_device[i]});
    }
  }
  EXPECT_EQ(plan.copies.size(), want.size()) << sched.describe();
  std::set<std::pair<std::string, size_t>> seen;
  for (const auto& c : plan.copies) {
    EXPECT_NE(c.from, c.to);
    EXPECT_TRUE(seen.insert({c.tensor, c.to}).second) << "copied twice to one device: " << c.tensor;
    // Made at the start of a split on the consumer's device that follows one on another device.
    ASSERT_GT(c.split, 0u);
    EXPECT_EQ(plan.splits[c.split].device, c.to);
    EXPECT_NE(plan.splits[c.split - 1].device, plan.splits[c.split].device);
  }
  // Layers alternate: at least one split per layer, and the positions, read
  // by every layer, go to device 1 once, reused by its later splits.
  EXPECT_GE(plan.splits.size(), 4u);
  size_t pos_copies = 0;
  for (const auto& c : plan.copies) pos_copies += c.tensor.find("'pos'") != std::string::npos;
  EXPECT_EQ(pos_copies, 1u) << sched.describe();

  const std::string text = sched.describe();
  EXPECT_NE(text.find("split 1: [1] cpu1"), std::string::npos) << text;
  EXPECT_NE(text.find("copy leaf"), std::string::npos) << text;
}

TEST(SchedulerPlan, InputsGoToTheirFirstConsumerAndViewsStayWithTheirBytes) {
  CpuDevice c0(two_threads("cpu0")), c1(two_threads("cpu1"));
  Context ctx;
  Tensor* w = ctx.new_tensor(DType::f32, {8, 4}, "w");
  auto wbuf = c1.allocate(w->nbytes());
  check(wbuf.status(), "allocate");
  check(wbuf.value()->place(*w, 0), "place");
  check(write_from_f32(*w, random_floats(32, 1)), "write w");
  Tensor* x = input(ctx, DType::f32, {8, 2}, "x");
  Tensor* y = ctx.mul_mat(w, ctx.reshape(x, {8, 2}));
  Graph g = Graph::build({y});
  Scheduler sched({&c0, &c1});
  check(sched.allocate(g), "allocate");
  const auto& plan = *sched.last_plan();
  EXPECT_EQ(plan.leaf_device, (std::vector<int>{1, 1}));  // w, then x, which follows its consumer
  EXPECT_EQ(plan.node_device, (std::vector<int>{1, 1}));  // the reshape, the mul_mat
  EXPECT_TRUE(plan.copies.empty());
  EXPECT_EQ(&x->buffer->device(), &c1);
}

TEST(SchedulerPlan, ANormOfAResidualThatCrossesAnywayRunsWhereItIsRead) {
  // Layers 0-1 on device 0, 2-3 on device 1. The residual stream crosses
  // to device 1 for layer 2's residual add anyway; the norm of it that
  // begins layer 2 (reading nothing the caller placed) runs on device 1
  // too, so the normalised copy does not cross as well.
  CpuDevice c0(two_threads("cpu0")), c1(two_threads("cpu1"));
  std::vector<Device*> devices = {&c0, &c1};
  TinyModel model(devices, [](int l) { return static_cast<size_t>(l < 2 ? 0 : 1); });
  Scheduler sched(devices);
  EXPECT_TRUE(run_scheduled(sched, model) == reference()) << sched.describe();
  const SchedulePlanInfo& plan = *sched.last_plan();

  ASSERT_EQ(plan.splits.size(), 2u) << sched.describe();
  std::vector<std::string> nodes_copied;
  for (const auto& c : plan.copies) {
    if (!c.is_leaf) nodes_copied.push_back(c.tensor);
  }
  ASSERT_EQ(nodes_copied.size(), 1u) << sched.describe();
  EXPECT_NE(nodes_copied[0].find(" add "), std::string::npos) << nodes_copied[0];
  // The first node of device 1's split is that norm, and it reads the copy.
  const size_t first = plan.splits[1].first_node;
  Context ctx;
  auto step = model.build(ctx, kTokens);
  Graph g = Graph::build({step.logits, step.ids});
  EXPECT_EQ(g.nodes()[first]->op, Op::rms_norm) << sched.describe();
  EXPECT_EQ(plan.node_device[first], 1);
  EXPECT_EQ(plan.node_device[first - 1], 0) << "the residual add stays where it was computed";
}

TEST(SchedulerPlan, AWriteIntoACacheRunsWhereTheCacheLives) {
  CpuDevice c0(two_threads("cpu0")), c1(two_threads("cpu1"));
  Context wctx;
  Tensor* w = wctx.new_tensor(DType::f32, {8, 4}, "w");       // on device 0
  Tensor* cache = wctx.new_tensor(DType::f32, {4, 6}, "kv");  // on device 1: 6 slots of 4
  auto b0 = c0.allocate(w->nbytes());
  auto b1 = c1.allocate(cache->nbytes());
  check(b0.status(), "alloc");
  check(b1.status(), "alloc");
  check(b0.value()->place(*w, 0), "place w");
  check(b1.value()->place(*cache, 0), "place kv");
  check(write_from_f32(*w, random_floats(32, 3)), "w");
  check(write_from_f32(*cache, std::vector<float>(24, 0.0f)), "kv");

  Context ctx;
  Tensor* x = input(ctx, DType::f32, {8, 2}, "x");
  Tensor* k = ctx.mul_mat(w, x);                                         // [4, 2] on device 0
  Tensor* store = ctx.cpy(k, ctx.view(cache, {4, 2}, {4, 16}, 2 * 16));  // slots 2 and 3
  Graph g = Graph::build({store});
  Scheduler sched({&c0, &c1});
  check(sched.allocate(g), "allocate");
  const std::vector<float> xs = random_floats(16, 4);
  check(write_from_f32(*x, xs), "x");
  check(sched.compute(g), "compute");
  EXPECT_EQ(sched.last_plan()->node_device.back(), 1) << sched.describe();
  EXPECT_EQ(sched.last_run().copies, 1u);

  auto kv = read_as_f32(*cache);
  auto kk = read_as_f32(*k);
  check(kv.status(), "read kv");
  check(kk.status(), "read k");
  for (int i = 0; i < 8; ++i) EXPECT_EQ(kv.value()[8 + i], kk.value()[i]);
  EXPECT_EQ(kv.value()[0], 0.0f);
  EXPECT_EQ(kv.value()[16], 0.0f);
}

// ---- the cache -------------------------------------------------------------------

TEST(SchedulerCache, TheSameShapeIsNotPlannedAgainADifferentOneIs) {
  const Outputs want = reference();
  CpuDevice c0(two_threads("cpu0")), c1(two_threads("cpu1"));
  std::vector<Device*> devices = {&c0, &c1};
  TinyModel model(devices);
  Scheduler sched(devices);
  for (int step = 0; step < 3; ++step) {  // a new graph every step, as a decode loop builds
    EXPECT_TRUE(run_scheduled(sched, model) == want) << "step " << step;
  }
  EXPECT_EQ(sched.plans_made(), 1u);
  EXPECT_EQ(sched.totals().runs, 3u);

  run_scheduled(sched, model, kTokens + 2);
  EXPECT_EQ(sched.plans_made(), 2u);
  EXPECT_TRUE(run_scheduled(sched, model) == want) << "back to the first shape, re-placed";
  EXPECT_EQ(sched.plans_made(), 2u);
}

TEST(SchedulerCache, OneGraphComputedTwice) {
  const Outputs want = reference();
  CpuDevice c0(two_threads("cpu0")), c1(two_threads("cpu1"));
  std::vector<Device*> devices = {&c0, &c1};
  TinyModel model(devices);
  Scheduler sched(devices);
  Context ctx;
  auto step = model.build(ctx, kTokens);
  Graph g = Graph::build({step.logits, step.ids});
  check(sched.allocate(g), "allocate");
  TinyModel::write_inputs(step, kTokens, 7);
  for (int i = 0; i < 2; ++i) {
    check(sched.compute(g), "compute");
    EXPECT_TRUE((Outputs{TinyModel::bytes_of(step.logits), TinyModel::bytes_of(step.ids)}) == want);
  }
  run_scheduled(sched, model, kTokens + 7);  // grows the buffers: g's tensors point at freed ones
  check(sched.allocate(g), "allocate again");
  TinyModel::write_inputs(step, kTokens, 7);
  check(sched.compute(g), "compute again");
  EXPECT_TRUE((Outputs{TinyModel::bytes_of(step.logits), TinyModel::bytes_of(step.ids)}) == want);
  EXPECT_EQ(sched.plans_made(), 2u);
}

// ---- devices that cannot run an op -----------------------------------------------

TEST(SchedulerFallback, ANodeTheDeviceCannotRunGoesToTheNextThatCan) {
  const Outputs want = reference();
  CpuDevice inner(two_threads("inner")), cpu(two_threads("cpu"));
  RefusingDevice refusing(inner, Op::rope);
  std::vector<Device*> devices = {&refusing, &cpu};
  TinyModel model(devices, [](int) { return size_t{0}; });  // every weight on the refusing device
  Scheduler sched(devices);
  EXPECT_TRUE(run_scheduled(sched, model) == want) << sched.describe();

  Context ctx;
  auto step = model.build(ctx, kTokens);
  Graph g = Graph::build({step.logits, step.ids});
  check(sched.allocate(g), "allocate");
  size_t ropes = 0;
  for (size_t i = 0; i < g.n_nodes(); ++i) {
    if (g.nodes()[i]->op == Op::rope) {
      EXPECT_EQ(sched.last_plan()->node_device[i], 1);
      ++ropes;
    } else if (g.nodes()[i]->op == Op::mul_mat && g.nodes()[i]->src[0]->op == Op::none) {
      const int want = &g.nodes()[i]->src[0]->buffer->device() == &refusing ? 0 : 1;
      EXPECT_EQ(sched.last_plan()->node_device[i], want) << "a mul_mat runs where its weights live";
    }
  }
  EXPECT_EQ(ropes, 2u * TinyModel::kLayers);
}

// ---- traffic --------------------------------------------------------------------

TEST(SchedulerTraffic, AHandOverBetweenDevicesOfOneServerStaysOnTheServer) {
  InProcessServer server(two_cpus());
  auto remote = connect(server.endpoint());
  std::vector<Device*> devices = raw(remote);
  // h = silu(w1 · x) on device 0 (4 MiB), y = silu(w2 · h) on device 1.
  Context wctx;
  Tensor* w1 = wctx.new_tensor(DType::f32, {64, 1024}, "w1");
  Tensor* w2 = wctx.new_tensor(DType::f32, {1024, 16}, "w2");
  auto b1 = devices[0]->allocate(w1->nbytes());
  auto b2 = devices[1]->allocate(w2->nbytes());
  check(b1.status(), "alloc w1");
  check(b2.status(), "alloc w2");
  check(b1.value()->place(*w1, 0), "place w1");
  check(b2.value()->place(*w2, 0), "place w2");
  check(write_from_f32(*w1, random_floats(64 * 1024, 11)), "w1");
  check(write_from_f32(*w2, random_floats(1024 * 16, 13)), "w2");

  Context ctx;
  Tensor* x = input(ctx, DType::f32, {64, 1024}, "x");
  Tensor* h = ctx.silu(ctx.mul_mat(w1, x));
  h->name = "h";
  Tensor* y = ctx.silu(ctx.mul_mat(w2, h));
  Graph g = Graph::build({y});
  Scheduler sched(devices);
  check(sched.allocate(g), "allocate");
  check(write_from_f32(*x, random_floats(64 * 1024, 12)), "x");
  check(sched.compute(g), "compute");

  const uint64_t handover = h->nbytes();
  ASSERT_EQ(handover, uint64_t{4} << 20);
  const SchedulerCounters& run = sched.last_run();
  EXPECT_EQ(run.copies, 1u);
  EXPECT_EQ(run.bytes_copied, handover);
  EXPECT_EQ(run.copies_through_host, 0u);
  EXPECT_GT(run.round_trips, 0u);
  EXPECT_LT(run.bytes_sent + run.bytes_received, handover / 64) << sched.describe();

  // The same bits as one local device computes.
  CpuDevice cpu(two_threads("ref"));
  Context rctx;
  Tensor* rw1 = input(rctx, DType::f32, {64, 1024});
  Tensor* rw2 = input(rctx, DType::f32, {1024, 16});
  Tensor* rx = input(rctx, DType::f32, {64, 1024});
  Tensor* ry = rctx.silu(rctx.mul_mat(rw2, rctx.silu(rctx.mul_mat(rw1, rx))));
  GraphRun ref(cpu, {ry});
  ref.write(rw1, random_floats(64 * 1024, 11));
  ref.write(rw2, random_floats(1024 * 16, 13));
  ref.write(rx, random_floats(64 * 1024, 12));
  ref.compute();
  EXPECT_EQ(TinyModel::bytes_of(y), ref.raw(ry));
}

}  // namespace
}  // namespace tensorpc::test
