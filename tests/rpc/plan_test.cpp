// Execution plans on the wire (docs/protocol.md, "Execution plans"): a plan
// sends a tensor server to server under a standing grant and the receiving
// plan runs on those bytes, run after run (PlanRuns); a wait whose bytes
// never come and a send to a server that is gone fail within a bounded time,
// naming both endpoints, and leave client and servers usable; Server::stop
// ends a waiting plan promptly (PlanFailures); bad steps are refused when the
// plan is stored, and forged standing-grant tokens are refused; a wait fails
// at once when its sender says its run failed or its sender's connection ends
// (PlanHostile).
#include <chrono>
#include <thread>

#include "remote_test_util.h"
#include "rpc/transport/connection.h"
#include "rpc/wire/plan_codec.h"
#include "rpc/client/remote_buffer.h"
#include "rpc_test_util.h"

namespace tensorpc::test {
namespace {

using rpc::Command;

constexpr int64_t kFloats = 256;

// A tensor of kFloats f32 in a buffer of its own on `device`.
struct Placed {
  Placed(Context& ctx, Device& device, const std::string& name) {
    t = ctx.new_tensor(DType::f32, {kFloats}, name);
    auto b = device.allocate(t->nbytes());
    check(b.status(), "allocate " + name);
    buffer = std::move(b).value();
    check(buffer->place(*t, 0), "place " + name);
  }
  Tensor* t;
  std::unique_ptr<Buffer> buffer;
};

std::unique_ptr<PlanRunner> runner_of(Device& d) {
  auto r = d.create_plan_runner();
  check(r.status(), "create_plan_runner");
  return std::move(r).value();
}

class PlanPair : public ::testing::Test {
 protected:
  PlanPair()
      : da_(remote_device(a_.endpoint(), 0)),
        db_(remote_device(b_.endpoint(), 0)),
        src_(ctx_, *da_, "src"),
        dst_(ctx_, *db_, "dst"),
        out_(ctx_, *db_, "out") {}

  InProcessServer a_, b_;
  std::unique_ptr<Device> da_, db_;
  Context ctx_;
  Placed src_, dst_, out_;
};

TEST_F(PlanPair, APlanSendsServerToServerAndTheWaitingPlanRunsOnItsBytesRunAfterRun) {
  auto on_a = runner_of(*da_), on_b = runner_of(*db_);
  ExecutionPlanSpec send, receive;
  send.send(*src_.t, *dst_.t);
  receive.wait(*src_.t, *dst_.t);
  // out = silu(dst), computed on B from the bytes A sent.
  Tensor* y = ctx_.silu(dst_.t);
  check(out_.buffer->place(*y, 0), "place y");
  Graph g = Graph::build({y});
  receive.compute(*db_, g);
  for (uint32_t run = 0; run < 3; ++run) {
    const auto values = random_floats(kFloats, 40 + run);
    check(write_from_f32(*src_.t, values), "src");
    const auto before = connection_stats(b_.endpoint());
    ASSERT_TRUE(on_a->run_async(send).ok());
    ASSERT_TRUE(on_b->run_async(receive).ok());
    const Status sb = on_b->synchronize();
    ASSERT_TRUE(sb.ok()) << sb.to_string();
    const Status sa = on_a->synchronize();
    ASSERT_TRUE(sa.ok()) << sa.to_string();
    if (run > 0) {
      EXPECT_EQ(connection_stats(b_.endpoint()).round_trips - before.round_trips, 1u);
    }
    auto got = read_as_f32(*dst_.t);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.value(), values) << "run " << run;
    auto out = read_as_f32(*y);
    ASSERT_TRUE(out.ok());
    EXPECT_FLOAT_EQ(out.value()[3], values[3] / (1.0f + std::exp(-values[3])));
  }
  // The profile counters saw B's computations and waits, and A's none.
  EXPECT_GT(b_.stats().compute_ns, 0u);
  EXPECT_GT(b_.stats().peer_wait_ns, 0u);
  EXPECT_EQ(a_.stats().compute_ns, 0u);
  EXPECT_EQ(a_.stats().peer_wait_ns, 0u);
}

// A plan that hands several tensors to one server asks that server for all
// their standing grants in one round trip (over a LAN, one link round trip
// instead of one per tensor), and every tensor arrives.
TEST_F(PlanPair, APlanGetsTheGrantsOfAllItsSendsToAServerInOneRoundTrip) {
  Placed src2(ctx_, *da_, "src2"), src3(ctx_, *da_, "src3");
  Placed dst2(ctx_, *db_, "dst2"), dst3(ctx_, *db_, "dst3");
  auto on_a = runner_of(*da_), on_b = runner_of(*db_);
  ExecutionPlanSpec send, receive;
  const std::vector<std::pair<Placed*, Placed*>> pairs = {{&src_, &dst_}, {&src2, &dst2}, {&src3, &dst3}};
  for (auto [from, to] : pairs) {
    send.send(*from->t, *to->t);
    receive.wait(*from->t, *to->t);
  }
  std::vector<std::vector<float>> values;
  for (size_t i = 0; i < pairs.size(); ++i) {
    values.push_back(random_floats(kFloats, 70 + static_cast<uint32_t>(i)));
    check(write_from_f32(*pairs[i].first->t, values.back()), "source");
  }
  const auto before = connection_stats(b_.endpoint());
  ASSERT_TRUE(on_a->run_async(send).ok());
  EXPECT_EQ(connection_stats(b_.endpoint()).round_trips - before.round_trips, 1u) << "three grants, one round trip";
  ASSERT_TRUE(on_b->run_async(receive).ok());  // the same ranges: the grants are held already
  EXPECT_EQ(connection_stats(b_.endpoint()).round_trips - before.round_trips, 1u);
  const Status sb = on_b->synchronize();
  ASSERT_TRUE(sb.ok()) << sb.to_string();
  ASSERT_TRUE(on_a->synchronize().ok());
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto got = read_as_f32(*pairs[i].second->t);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.value(), values[i]) << "tensor " << i;
  }
}

// Grants asked together: a refused one is the error, the others are still
// given and kept, and the connection stays in step for the next call.
TEST_F(PlanPair, AGrantRefusedAmongOthersFailsAloneAndTheConnectionGoesOn) {
  const auto* dst = dynamic_cast<const rpc::RemoteBuffer*>(dst_.t->buffer);
  const auto* out = dynamic_cast<const rpc::RemoteBuffer*>(out_.t->buffer);
  ASSERT_NE(dst, nullptr);
  ASSERT_NE(out, nullptr);
  rpc::Connection& b = *dst->connection();
  const uint64_t size = dst_.t->nbytes();
  const std::vector<std::array<uint64_t, 3>> ranges = {
      {dst->handle(), 0, size}, {dst->handle() + 1000, 0, size}, {out->handle(), 0, size}};
  const Status s = b.hold_standing_grants(ranges);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.to_string(), "GRANT_STANDING")) << s.to_string();
  const auto before = connection_stats(b_.endpoint());
  EXPECT_TRUE(b.standing_grant(dst->handle(), 0, size).ok());
  EXPECT_TRUE(b.standing_grant(out->handle(), 0, size).ok());
  EXPECT_EQ(connection_stats(b_.endpoint()).round_trips - before.round_trips, 0u) << "both were kept";
  const auto values = random_floats(kFloats, 90);
  check(write_from_f32(*dst_.t, values), "dst");
  auto got = read_as_f32(*dst_.t);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), values);
}

TEST_F(PlanPair, AWaitWhoseBytesNeverComeTimesOutNamingBothEndpoints) {
  auto on_b = runner_of(*db_);
  ExecutionPlanSpec receive;
  receive.wait_timeout_ms = 300;
  receive.wait(*src_.t, *dst_.t);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(on_b->run_async(receive).ok());
  const Status s = on_b->synchronize();
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), a_.endpoint())) << s.to_string();
  EXPECT_TRUE(contains(s.message(), b_.endpoint())) << s.to_string();
  EXPECT_LT(took, std::chrono::seconds(5));
  // The session goes on: a plan without the wait runs, and so does the pair
  // (under a new grant, so nothing of the failed run could be taken for it).
  ExecutionPlanSpec copy;
  copy.copy(*dst_.t, *out_.t);
  ASSERT_TRUE(on_b->run_async(copy).ok());
  EXPECT_TRUE(on_b->synchronize().ok());
  auto on_a = runner_of(*da_);
  ExecutionPlanSpec send, pair;
  send.send(*src_.t, *dst_.t);
  pair.wait(*src_.t, *dst_.t);  // the default timeout: the send may be slow to come
  const auto values = random_floats(kFloats, 77);
  check(write_from_f32(*src_.t, values), "src");
  ASSERT_TRUE(on_a->run_async(send).ok());
  ASSERT_TRUE(on_b->run_async(pair).ok());
  EXPECT_TRUE(on_b->synchronize().ok());
  EXPECT_TRUE(on_a->synchronize().ok());
  auto got = read_as_f32(*dst_.t);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value(), values);
}

TEST_F(PlanPair, ASendToAServerThatIsGoneFailsNamingBothAndTheClientGoesOn) {
  auto on_a = runner_of(*da_);
  ExecutionPlanSpec send;
  send.send(*src_.t, *dst_.t);
  ASSERT_TRUE(on_a->run_async(send).ok());
  ASSERT_TRUE(on_a->synchronize().ok());
  b_.stop();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(on_a->run_async(send).ok());
  const Status s = on_a->synchronize();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), a_.endpoint())) << s.to_string();
  EXPECT_TRUE(contains(s.message(), b_.endpoint())) << s.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(ping(a_.endpoint()).ok());
}

TEST_F(PlanPair, StopEndsAWaitingPlanPromptly) {
  auto on_b = runner_of(*db_);
  ExecutionPlanSpec receive;
  receive.wait_timeout_ms = 60000;
  receive.wait(*src_.t, *dst_.t);
  ASSERT_TRUE(on_b->run_async(receive).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  b_.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_FALSE(on_b->synchronize().ok());
}

// ---- keyed specs ----------------------------------------------------------------------

// A key is the caller's promise that the spec is unchanged, and the runner
// takes it: a spec given a key it ran before runs the plan stored for that
// key without its steps being looked at (here, on purpose, they differ), so
// a decode step does not encode its graphs again.
TEST_F(PlanPair, AKeyedSpecRunsThePlanStoredForItsKeyWithoutBeingEncodedAgain) {
  auto on_b = runner_of(*db_);
  Tensor* silu = ctx_.silu(dst_.t);
  Tensor* neg = ctx_.scale(dst_.t, -1.0f);
  check(out_.buffer->place(*silu, 0), "place silu");
  check(out_.buffer->place(*neg, 0), "place neg");
  Graph gs = Graph::build({silu}), gn = Graph::build({neg});
  ExecutionPlanSpec first, second;
  first.key = second.key = 7;
  first.compute(*db_, gs);
  second.compute(*db_, gn);
  const auto values = random_floats(kFloats, 11);
  check(write_from_f32(*dst_.t, values), "dst");
  ASSERT_TRUE(on_b->run_async(first).ok());
  ASSERT_TRUE(on_b->synchronize().ok());
  check(write_from_f32(*out_.t, std::vector<float>(kFloats, 0.0f)), "out");
  ASSERT_TRUE(on_b->run_async(second).ok());
  ASSERT_TRUE(on_b->synchronize().ok());
  auto out = read_as_f32(*out_.t);
  ASSERT_TRUE(out.ok());
  EXPECT_FLOAT_EQ(out.value()[5], values[5] / (1.0f + std::exp(-values[5]))) << "silu ran again, not neg";
  // Under another key the same steps are encoded and stored.
  second.key = 8;
  ASSERT_TRUE(on_b->run_async(second).ok());
  ASSERT_TRUE(on_b->synchronize().ok());
  out = read_as_f32(*out_.t);
  ASSERT_TRUE(out.ok());
  EXPECT_FLOAT_EQ(out.value()[5], -values[5]);
}

// Twenty keyed specs run by turns, by id after their first run: each
// computes from the new bytes (stored_work_test.cpp shows a server that
// drops plans meanwhile).
TEST_F(PlanPair, AKeyedSpecWhosePlanTheServerDroppedIsStoredAgain) {
  auto on_b = runner_of(*db_);
  std::vector<Graph> graphs;
  std::vector<ExecutionPlanSpec> specs(20);
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor* y = ctx_.scale(dst_.t, static_cast<float>(i + 1));
    check(out_.buffer->place(*y, 0), "place y");
    graphs.push_back(Graph::build({y}));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].key = 100 + i;
    specs[i].compute(*db_, graphs[i]);
  }
  for (uint32_t round = 0; round < 2; ++round) {
    for (size_t i : {size_t{0}, size_t{19}, size_t{3}}) {
      const auto values = random_floats(kFloats, 20 + round * 40 + static_cast<uint32_t>(i));
      check(write_from_f32(*dst_.t, values), "dst");
      ASSERT_TRUE(on_b->run_async(specs[i]).ok());
      ASSERT_TRUE(on_b->synchronize().ok());
      auto out = read_as_f32(*out_.t);
      ASSERT_TRUE(out.ok());
      EXPECT_FLOAT_EQ(out.value()[9], values[9] * static_cast<float>(i + 1)) << "round " << round << " spec " << i;
    }
    for (ExecutionPlanSpec& s : specs) ASSERT_TRUE(on_b->run_async(s).ok());  // pushes out every plan above
    ASSERT_TRUE(on_b->synchronize().ok());
  }
}

// After a failed wait the receiving server's grants are asked for anew; a
// keyed send on the other server then carries the new grant, not the one
// its stored plan was encoded with, and the pair runs again.
TEST_F(PlanPair, AKeyedSendFollowsTheReceiversNewGrantsAfterAFailedRun) {
  auto on_a = runner_of(*da_), on_b = runner_of(*db_);
  // The pair's wait has the default timeout (a slow machine, or a sanitizer
  // build under load, may take long to send); the lone wait that is meant to
  // fail has a short one.
  ExecutionPlanSpec send, receive, lone;
  send.key = 1;
  receive.key = 2;
  lone.key = 3;
  lone.wait_timeout_ms = 300;
  send.send(*src_.t, *dst_.t);
  receive.wait(*src_.t, *dst_.t);
  lone.wait(*src_.t, *dst_.t);
  for (uint32_t run = 0; run < 3; ++run) {
    if (run == 1) {  // a wait without its send fails, and the grants are forgotten
      ASSERT_TRUE(on_b->run_async(lone).ok());
      ASSERT_FALSE(on_b->synchronize().ok());
    }
    const auto values = random_floats(kFloats, 50 + run);
    check(write_from_f32(*src_.t, values), "src");
    ASSERT_TRUE(on_a->run_async(send).ok());
    ASSERT_TRUE(on_b->run_async(receive).ok());
    const Status sb = on_b->synchronize();
    ASSERT_TRUE(sb.ok()) << "run " << run << ": " << sb.to_string();
    ASSERT_TRUE(on_a->synchronize().ok());
    auto got = read_as_f32(*dst_.t);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.value(), values) << "run " << run;
  }
}

// ---- hostile input ------------------------------------------------------------------

class PlanHostile : public ::testing::Test {
 protected:
  PlanHostile() : server_(two_cpus()), c_(port()) {
    check(c_.hello(), "hello");
    handle_ = c_.alloc(256);
  }
  uint16_t port() const { return static_cast<uint16_t>(std::stoi(server_.endpoint().substr(10))); }

  Status store(uint32_t n_steps, const std::vector<rpc::PlanStepFields>& steps, uint64_t plan_id = 1) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::PlanStoreRequest{plan_id});
    w.u32(n_steps);
    for (const auto& s : steps) rpc::encode_step(w, s);
    return c_.call_status(Command::plan_store, w);
  }
  rpc::PlanStepFields copy(uint64_t src, uint64_t dst, uint64_t dst_offset, uint64_t size) {
    rpc::PlanStepFields f;
    f.kind = rpc::PlanStepKind::copy;
    f.src_handle = src;
    f.dst_handle = dst;
    f.dst_offset = dst_offset;
    f.size = size;
    return f;
  }
  StatusOr<rpc::GrantToken> grant_standing(RawClient& c, uint64_t handle, uint64_t offset, uint64_t size) {
    auto reply =
        c.call_for<rpc::GrantStandingReply>(Command::grant_standing, rpc::GrantStandingRequest{handle, offset, size});
    if (!reply.ok()) return reply.status();
    return reply.value().token;
  }
  // Plan 1: one WAIT_FOR under `token`, for 600 s: a plan that timed out
  // instead of failing at once would stall its test for ten minutes.
  Status store_wait(const rpc::GrantToken& token) {
    rpc::PlanStepFields wait;
    wait.kind = rpc::PlanStepKind::wait_for;
    wait.token = token;
    wait.timeout_ms = 600000;
    return store(1, {wait});
  }
  Status run_plan() {
    rpc::WireWriter run;
    rpc::encode(run, rpc::PlanRunRequest{1});
    return c_.call_status(Command::plan_run, run);
  }

  Status write_granted(RawClient& c, const rpc::GrantToken& token, uint64_t size) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::WriteGrantedRequest{token, size});
    std::vector<uint8_t> bytes(size, 0x5a);
    w.raw(bytes.data(), bytes.size());
    return c.call_status(Command::write_granted, w);
  }

  InProcessServer server_;
  RawClient c_;
  uint64_t handle_ = 0;
};

TEST_F(PlanHostile, BadStepsAreRefusedWhenThePlanIsStored) {
  ASSERT_NE(handle_, 0u);
  Status s = store(1, {copy(handle_ + 100, handle_, 0, 16)});
  EXPECT_EQ(s.code(), StatusCode::not_found) << s.to_string();
  s = store(1, {copy(handle_, handle_, 250, 16)});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "step 0 (COPY)")) << s.to_string();
  rpc::PlanStepFields compute;
  compute.kind = rpc::PlanStepKind::compute;
  compute.device = 7;
  s = store(1, {compute});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "device index 7")) << s.to_string();
  s = store(rpc::kMaxPlanSteps + 1, {copy(handle_, handle_, 0, 16)});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  rpc::PlanStepFields wait;
  wait.kind = rpc::PlanStepKind::wait_for;
  wait.token[0] = 1;
  wait.timeout_ms = 100;
  s = store(1, {wait});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "standing grant")) << s.to_string();
  s = store(2, {copy(handle_, handle_, 0, 16)});  // claims two steps, holds one
  EXPECT_EQ(s.code(), StatusCode::protocol_error) << s.to_string();
  // Nothing was stored, and the connection goes on.
  rpc::WireWriter run;
  rpc::encode(run, rpc::PlanRunRequest{1});
  EXPECT_EQ(c_.call_status(Command::plan_run, run).code(), StatusCode::not_found);
  EXPECT_TRUE(c_.ping().ok());
  // A good plan stores and runs.
  EXPECT_TRUE(store(1, {copy(handle_, handle_, 128, 16)}).ok());
  EXPECT_TRUE(c_.call_status(Command::plan_run, run).ok());
}

TEST_F(PlanHostile, AStandingGrantIsReusableUntilItsConnectionEndsAndForgedTokensAreRefused) {
  RawClient writer(port());
  ASSERT_TRUE(writer.hello().ok());
  auto token = grant_standing(c_, handle_, 64, 32);
  ASSERT_TRUE(token.ok()) << token.status().to_string();
  EXPECT_TRUE(write_granted(writer, token.value(), 32).ok());
  EXPECT_TRUE(write_granted(writer, token.value(), 32).ok()) << "a standing grant is used again";
  EXPECT_FALSE(write_granted(writer, token.value(), 33).ok()) << "only the granted size";
  rpc::GrantToken forged = token.value();
  forged[5] ^= 1;
  Status s = write_granted(writer, forged, 32);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "refused")) << s.to_string();
  // A range outside the buffer is refused at once.
  EXPECT_FALSE(grant_standing(c_, handle_, 250, 16).ok());
  // The plan waits for one arrival per run.
  rpc::PlanStepFields wait;
  wait.kind = rpc::PlanStepKind::wait_for;
  wait.token = token.value();
  wait.timeout_ms = 2000;
  ASSERT_TRUE(store(1, {wait}).ok());
  rpc::WireWriter run;
  rpc::encode(run, rpc::PlanRunRequest{1});
  EXPECT_TRUE(c_.call_status(Command::plan_run, run).ok()) << "bytes arrived before";
  // The grant ends with its connection.
  c_.socket().close();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(write_granted(writer, token.value(), 32).ok());
  EXPECT_TRUE(writer.ping().ok());
}

TEST_F(PlanHostile, ARefusedWriteUnderAStandingGrantFailsTheWaitingPlanWithItsReason) {
  // Plans send without waiting for the destination's reply; a write it
  // refuses reaches the plan that waits for it instead, at once.
  RawClient writer(port());
  ASSERT_TRUE(writer.hello().ok());
  auto token = grant_standing(c_, handle_, 64, 32);
  ASSERT_TRUE(token.ok()) << token.status().to_string();
  ASSERT_TRUE(store_wait(token.value()).ok());
  EXPECT_FALSE(write_granted(writer, token.value(), 33).ok());
  Status s = run_plan();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "step 0 (WAIT_FOR)")) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "the token grants 32 bytes, not 33")) << s.to_string();
  // Reported once: the next run waits for the next good write.
  EXPECT_TRUE(write_granted(writer, token.value(), 32).ok());
  EXPECT_TRUE(run_plan().ok());
}

TEST_F(PlanHostile, NoBytesUnderAStandingGrantSayTheSendersRunFailedAndTheWaitFailsAtOnce) {
  // What a plan that failed sends for each later send (docs/protocol.md):
  // the plan waiting for those bytes fails now, not at its timeout.
  RawClient writer(port());
  ASSERT_TRUE(writer.hello().ok());
  auto token = grant_standing(c_, handle_, 64, 32);
  ASSERT_TRUE(token.ok()) << token.status().to_string();
  ASSERT_TRUE(store_wait(token.value()).ok());
  EXPECT_TRUE(write_granted(writer, token.value(), 0).ok()) << "the notice is taken";
  Status s = run_plan();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "step 0 (WAIT_FOR)")) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "failed before sending them")) << s.to_string();
  // Reported once: the next run waits for the next good write.
  EXPECT_TRUE(write_granted(writer, token.value(), 32).ok());
  EXPECT_TRUE(run_plan().ok());
}

TEST_F(PlanHostile, AWaitWhoseSendersConnectionEndedFailsAtOnceUntilBytesComeAgain) {
  auto token = grant_standing(c_, handle_, 64, 32);
  ASSERT_TRUE(token.ok()) << token.status().to_string();
  ASSERT_TRUE(store_wait(token.value()).ok());
  {
    RawClient sender(port());
    ASSERT_TRUE(sender.hello().ok());
    EXPECT_TRUE(write_granted(sender, token.value(), 32).ok());
    EXPECT_TRUE(run_plan().ok()) << "its bytes came";
    sender.socket().close();  // as a sending server killed between runs
  }
  // The connection that brought the grant's bytes is gone: the next wait
  // fails as soon as the server has seen the end (before the wait, or during
  // it, which wakes it), naming that connection.
  const auto start = std::chrono::steady_clock::now();
  const Status s = run_plan();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "that brought these bytes before ended")) << s.to_string();
  // Bytes under the grant again, from another connection: waits go on as before.
  RawClient again(port());
  ASSERT_TRUE(again.hello().ok());
  EXPECT_TRUE(write_granted(again, token.value(), 32).ok());
  EXPECT_TRUE(run_plan().ok());
}

}  // namespace
}  // namespace tensorpc::test
