// Execution plans through the scheduler: a graph spread over two servers with
// two devices each runs as one plan per server run, so after the first run
// each further run costs at most one round trip per server, no tensor bytes
// between devices of one server pass through the client, the hand-over
// between the servers goes server to server, the plans are stored once, and
// the results are the bits of one device — also across a decode-like loop of
// changing inputs.
#include <chrono>

#include "../rpc/remote_test_util.h"
#include "scheduler_test_util.h"

namespace tensorpc::test {
namespace {

constexpr int64_t kTokens = 5;

using Outputs = TinyOutputs;

Outputs reference(uint32_t seed) { return tiny_reference(kTokens, seed); }

// One step, its graph built anew (as a decode loop does) with inputs of `seed`.
Outputs run_step(Scheduler& sched, const TinyModel& model, uint32_t seed) {
  Context ctx;
  auto step = model.build(ctx, kTokens);
  Graph g = Graph::build({step.logits, step.ids});
  check(sched.allocate(g), "Scheduler::allocate");
  TinyModel::write_inputs(step, kTokens, seed);
  check(sched.compute(g), "Scheduler::compute");
  return {TinyModel::bytes_of(step.logits), TinyModel::bytes_of(step.ids)};
}

std::vector<std::unique_ptr<Device>> connect(const std::string& endpoint) {
  auto devices = connect_devices(endpoint);
  check(devices.status(), "connect_devices");
  return std::move(devices).value();
}

class TwoServers : public ::testing::Test {
 protected:
  TwoServers() : a_(two_cpus()), b_(two_cpus()), ra_(connect(a_.endpoint())), rb_(connect(b_.endpoint())) {
    devices_ = {ra_[0].get(), ra_[1].get(), rb_[0].get(), rb_[1].get()};
  }
  InProcessServer a_, b_;
  std::vector<std::unique_ptr<Device>> ra_, rb_;
  std::vector<Device*> devices_;
};

TEST_F(TwoServers, EachFurtherRunCostsOneRoundTripPerServerAndKeepsTheBits) {
  const Outputs want = reference(7);
  TinyModel model(devices_);
  Scheduler sched(devices_);
  ASSERT_TRUE(run_step(sched, model, 7) == want) << sched.describe();
  const SchedulePlanInfo& info = *sched.last_plan();
  ASSERT_EQ(info.server_runs.size(), 2u) << sched.describe();
  EXPECT_EQ(sched.last_run().plans_run, 2u);
  const uint64_t first_sent = sched.last_run().bytes_sent;

  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(run_step(sched, model, 7) == want) << sched.describe();
    const SchedulerCounters& c = sched.last_run();
    EXPECT_EQ(c.plans_run, 2u);
    EXPECT_EQ(c.copies_through_host, 0u);
    EXPECT_GT(c.bytes_copied, 0u);
    ASSERT_EQ(c.channels.size(), 2u);
    for (const auto& [channel, t] : c.channels) {
      EXPECT_LE(t.round_trips, 1u) << channel;
      // Neither the copies between one server's devices nor the hand-over
      // to the other server pass through here: a plan id and a synchronize.
      EXPECT_LT(t.bytes_sent + t.bytes_received, 1024u) << channel;
    }
    // The plans are stored once; later runs name them.
    EXPECT_LT(c.bytes_sent * 20, first_sent) << c.bytes_sent << " vs " << first_sent;
  }
}

TEST_F(TwoServers, ADecodeLoopOfChangingInputsStaysBitExact) {
  TinyModel model(devices_);
  Scheduler sched(devices_);
  for (uint32_t step = 0; step < 10; ++step) {
    EXPECT_TRUE(run_step(sched, model, 100 + step) == reference(100 + step)) << "step " << step;
    if (step > 0) {
      for (const auto& [channel, t] : sched.last_run().channels) EXPECT_LE(t.round_trips, 1u) << channel;
    }
  }
  EXPECT_EQ(sched.plans_made(), 1u);
}

// One step whose logits come back through Scheduler::compute_and_read.
StatusOr<Outputs> run_step_reading(Scheduler& sched, const TinyModel& model, uint32_t seed) {
  Context ctx;
  auto step = model.build(ctx, kTokens);
  Graph g = Graph::build({step.logits, step.ids});
  check(sched.allocate(g), "Scheduler::allocate");
  TinyModel::write_inputs(step, kTokens, seed);
  Outputs out;
  out.logits.resize(step.logits->nbytes());
  TENSORPC_RETURN_IF_ERROR(sched.compute_and_read(g, *step.logits, out.logits.data()));
  out.ids = TinyModel::bytes_of(step.ids);
  return out;
}

TEST_F(TwoServers, AReadAfterAPipelineIsTheRunsOnlyRoundTrip) {
  TinyModel model(devices_);
  Scheduler sched(devices_);
  for (uint32_t step = 0; step < 4; ++step) {
    auto got = run_step_reading(sched, model, 50 + step);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_TRUE(got.value() == reference(50 + step)) << "step " << step;
    if (step == 0) continue;  // the first run stores the plans and asks for grants
    const SchedulerCounters& c = sched.last_run();
    ASSERT_EQ(c.plans_run, 2u) << sched.describe();
    // The first server's plan ends by sending to the second, whose reply
    // to the read brings the logits: one round trip for the whole run.
    EXPECT_EQ(c.round_trips, 1u) << sched.describe();
    EXPECT_EQ(c.channels.at(a_.endpoint()).round_trips, 0u);
    EXPECT_EQ(c.channels.at(b_.endpoint()).round_trips, 1u);
  }
}

TEST_F(TwoServers, WhenTheServerToReadFromIsGoneTheRunFailsNamingItAndTheOtherServerGoesOn) {
  TinyModel model(devices_);
  Scheduler sched(devices_, SchedulerOptions{.plan_wait_timeout_ms = 3000});
  ASSERT_TRUE(run_step_reading(sched, model, 1).ok());
  b_.stop();
  const auto start = std::chrono::steady_clock::now();
  auto got = run_step_reading(sched, model, 2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find(b_.endpoint()), std::string::npos) << got.status().to_string();
  EXPECT_LT(seconds, 10.0);
  // The first server was waited for (its send failed) and is fine.
  EXPECT_TRUE(ra_[0]->allocate(64).ok());
}

TEST_F(TwoServers, AGraphAllocatedAgainAfterAnotherWasPlacedIsPlacedAgain) {
  TinyModel model(devices_);
  Scheduler sched(devices_);
  Context ctx_a, ctx_b;
  auto a = model.build(ctx_a, kTokens);
  auto b = model.build(ctx_b, kTokens - 2);  // another shape: another plan and placement
  Graph ga = Graph::build({a.logits, a.ids});
  Graph gb = Graph::build({b.logits, b.ids});
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    // ga again and again (as a decode loop), with gb placed in between once.
    ASSERT_TRUE((seed == 1 ? sched.allocate(ga) : sched.allocate_again(ga)).ok());
    TinyModel::write_inputs(a, kTokens, seed);
    ASSERT_TRUE(sched.compute(ga).ok());
    EXPECT_TRUE((Outputs{TinyModel::bytes_of(a.logits), TinyModel::bytes_of(a.ids)}) == reference(seed)) << seed;
    if (seed == 2) {
      ASSERT_TRUE(sched.allocate(gb).ok());
      TinyModel::write_inputs(b, kTokens - 2, seed);
      ASSERT_TRUE(sched.compute(gb).ok());
    }
  }
  EXPECT_EQ(sched.plans_made(), 2u);
}

// An input that both devices of the second server read crosses to that
// server once, and is copied on to its other device there; it is in place
// before the run, so the first server sends it before computing, while
// what the first server computes crosses after.
TEST_F(TwoServers, AnInputCrossesToAnotherServerOnceAndAheadOfTheComputedTensors) {
  TinyModel model(devices_);
  Scheduler sched(devices_);
  ASSERT_TRUE(run_step(sched, model, 7) == reference(7));
  const SchedulePlanInfo& info = *sched.last_plan();
  const auto server_of = [](size_t device) { return device < 2 ? 0 : 1; };
  int pos_across = 0, pos_within_b = 0, computed_across = 0;
  for (const SchedulePlanInfo::Copy& c : info.copies) {
    const bool across = server_of(c.from) != server_of(c.to);
    const bool pos = c.tensor.find("'pos'") != std::string::npos;
    if (pos && across) ++pos_across;
    if (pos && !across && server_of(c.to) == 1) ++pos_within_b;
    if (!c.is_leaf && across) ++computed_across;
    // Ready before the run: a leaf copied from where it lives (not from a copy).
    const bool from_home = c.is_leaf && static_cast<int>(c.from) == info.leaf_device[c.index];
    EXPECT_EQ(c.before_run, from_home) << c.tensor << "\n" << sched.describe();
  }
  EXPECT_EQ(pos_across, 1) << sched.describe();
  EXPECT_EQ(pos_within_b, 1) << sched.describe();
  EXPECT_GT(computed_across, 0) << sched.describe();
  for (uint32_t seed = 8; seed < 11; ++seed) EXPECT_TRUE(run_step(sched, model, seed) == reference(seed)) << seed;
}

// Inputs that cross to the other server travel before the first server
// computes when its computations read few weights, else after them, with
// the hand-over: either way the bits are those of one device.
TEST_F(TwoServers, InputsTravelBeforeAShortComputationAndWithTheHandOverAfterALongOne) {
  TinyModel model(devices_);
  const auto early_per_run = [&](uint64_t early_below) {
    Scheduler sched(devices_, SchedulerOptions{.early_inputs_below_bytes = early_below});
    EXPECT_TRUE(run_step(sched, model, 7) == reference(7));
    uint64_t early = 0;
    for (uint32_t seed = 8; seed < 11; ++seed) {
      EXPECT_TRUE(run_step(sched, model, seed) == reference(seed)) << seed;
      early += sched.last_run().early_sends;
    }
    return early / 3;
  };
  // The tiny model's first server reads far less than 1 GiB of weights: its
  // inputs for the second go first; with the threshold at 0, never.
  EXPECT_GT(early_per_run(uint64_t{1} << 30), 0u);
  EXPECT_EQ(early_per_run(0), 0u);
}

TEST_F(TwoServers, PlansOffGiveTheSameBitsSplitBySplit) {
  TinyModel model(devices_);
  Scheduler sched(devices_, SchedulerOptions{.execution_plans = false});
  EXPECT_TRUE(run_step(sched, model, 7) == reference(7));
  EXPECT_EQ(sched.last_run().plans_run, 0u);
}

TEST(ExecutionPlanLocal, ALocalDeviceBetweenServersStillRunsSplitBySplit) {
  InProcessServer a(two_cpus()), b(two_cpus());
  auto ra = connect(a.endpoint()), rb = connect(b.endpoint());
  CpuDevice cpu(two_threads("local"));
  std::vector<Device*> devices = {ra[0].get(), ra[1].get(), &cpu, rb[0].get(), rb[1].get()};
  TinyModel model(devices, [](int l) {
    return l == 0 ? size_t{0} : l == 1 ? size_t{1} : l == 2 ? size_t{2} : size_t{3};
  });
  Scheduler sched(devices);
  for (uint32_t seed = 1; seed <= 3; ++seed) EXPECT_TRUE(run_step(sched, model, seed) == reference(seed));
  EXPECT_EQ(sched.last_run().plans_run, sched.last_plan()->server_runs.size());
}

}  // namespace
}  // namespace tensorpc::test
