// RemotePlanRunner: an ExecutionPlanSpec encoded into PLAN_STORE's steps and
// sent (or run again by id) through Connection::send_plan.
#include "rpc/client/remote_plan.h"

#include <algorithm>
#include <array>
#include <map>

#include "rpc/wire/graph_codec.h"
#include "rpc/wire/plan_codec.h"
#include "rpc/client/remote_buffer.h"
#include "rpc/client/remote_device.h"

namespace tensorpc::rpc {
namespace {

const RemoteBuffer* remote_of(const Tensor* t) { return t ? dynamic_cast<const RemoteBuffer*>(t->buffer) : nullptr; }

}  // namespace

// Every standing grant the spec's sends and waits need, asked for in one
// round trip per server that gives them where not held yet; then the tokens,
// in step order.
StatusOr<std::vector<GrantToken>> RemotePlanRunner::hold_grants(const ExecutionPlanSpec& spec) {
  const std::string& here = connection_->endpoint();
  std::map<Connection*, std::vector<std::array<uint64_t, 3>>> grants;
  for (const ExecutionPlanSpec::Step& step : spec.steps) {
    if (step.kind != ExecutionPlanSpec::StepKind::send && step.kind != ExecutionPlanSpec::StepKind::wait) continue;
    const RemoteBuffer* dst = remote_of(step.dst);
    if (dst == nullptr) continue;  // refused with its reason when encoded
    grants[dst->connection().get()].push_back({dst->handle(), step.dst->offset, step.dst->nbytes()});
  }
  for (auto& [giver, ranges] : grants) {
    const Status s = giver->hold_standing_grants(ranges, timeout_);
    if (!s.ok()) return s.with_context("execution plan for " + here);
  }
  std::vector<GrantToken> tokens;
  for (const ExecutionPlanSpec::Step& step : spec.steps) {
    if (step.kind != ExecutionPlanSpec::StepKind::send && step.kind != ExecutionPlanSpec::StepKind::wait) continue;
    const RemoteBuffer* dst = remote_of(step.dst);
    if (dst == nullptr) return tokens;  // the encoding refuses the step
    auto token = dst->connection()->standing_grant(dst->handle(), step.dst->offset, step.dst->nbytes(), timeout_);
    if (!token.ok()) return token.status().with_context("execution plan for " + here);
    tokens.push_back(token.value());
  }
  return tokens;
}

Status RemotePlanRunner::run_async(const ExecutionPlanSpec& spec) {
  auto tokens = hold_grants(spec);
  if (!tokens.ok()) return tokens.status();
  // A spec run before under its key, with the same grants: its plan is run
  // by id, and nothing is encoded.
  if (const Encoded* known = spec.key != 0 ? encoded_.find(spec.key) : nullptr;
      known != nullptr && known->tokens == tokens.value()) {
    auto ran = connection_->run_stored_plan(known->plan_id, timeout_);
    if (!ran.ok()) return ran.status();
    if (ran.value()) return Status();
  }
  auto plan_id = encode_and_send(spec);
  if (!plan_id.ok()) return plan_id.status();
  if (spec.key != 0) {
    encoded_.put(spec.key, Encoded{.plan_id = plan_id.value(), .tokens = std::move(tokens).value()});
    encoded_.trim_to(kEncodedSpecs);
  }
  return Status();
}

StatusOr<uint64_t> RemotePlanRunner::encode_and_send(const ExecutionPlanSpec& spec) {
  const Connection* mine = connection_.get();
  const std::string& here = connection_->endpoint();
  std::vector<uint64_t> handles;
  const auto use = [&handles](uint64_t h) {
    if (std::find(handles.begin(), handles.end(), h) == handles.end()) handles.push_back(h);
  };
  // The bytes of `t` as a range of a buffer of this connection (`on_me`) or
  // of another server's (`!on_me`).
  const auto bytes_of = [&](const Tensor* t, bool on_me, const char* what) -> StatusOr<const RemoteBuffer*> {
    const RemoteBuffer* b = remote_of(t);
    if (b == nullptr || (b->connection().get() == mine) != on_me) {
      return invalid_argument(std::string("execution plan for ") + here + ": the " + what + " " +
                              (t ? describe(*t) : std::string("(null)")) + " is not in a buffer of " +
                              (on_me ? "this server" : "another tensorpc server"));
    }
    return b;
  };

  WireWriter w;
  w.u32(static_cast<uint32_t>(spec.steps.size()));
  for (const ExecutionPlanSpec::Step& step : spec.steps) {
    PlanStepFields f;
    switch (step.kind) {
      case ExecutionPlanSpec::StepKind::compute: {
        const auto* device = dynamic_cast<const RemoteDevice*>(step.device);
        if (device == nullptr || device->endpoint() != here || step.graph == nullptr) {
          return invalid_argument("execution plan for " + here + ": a compute step on a device of another server");
        }
        f.kind = PlanStepKind::compute;
        f.device = device->index();
        encode_step(w, f);
        const Status s = encode_graph(w, *step.graph, [&](const Buffer* b) -> uint64_t {
          const auto* remote = dynamic_cast<const RemoteBuffer*>(b);
          if (remote == nullptr || remote->connection().get() != mine) return 0;
          use(remote->handle());
          return remote->handle();
        });
        if (!s.ok()) return s.with_context("execution plan for " + here);
        continue;
      }
      case ExecutionPlanSpec::StepKind::copy: {
        auto src = bytes_of(step.src, true, "copy source");
        auto dst = bytes_of(step.dst, true, "copy destination");
        if (!src.ok()) return src.status();
        if (!dst.ok()) return dst.status();
        if (step.src->nbytes() != step.dst->nbytes()) return invalid_argument("execution plan: copy sizes differ");
        f.kind = PlanStepKind::copy;
        f.src_handle = src.value()->handle();
        f.src_offset = step.src->offset;
        f.dst_handle = dst.value()->handle();
        f.dst_offset = step.dst->offset;
        f.size = step.dst->nbytes();
        use(f.src_handle);
        use(f.dst_handle);
        break;
      }
      case ExecutionPlanSpec::StepKind::send: {
        auto src = bytes_of(step.src, true, "send source");
        auto dst = bytes_of(step.dst, false, "send destination");
        if (!src.ok()) return src.status();
        if (!dst.ok()) return dst.status();
        const auto& to = dst.value()->connection();
        auto token = to->standing_grant(dst.value()->handle(), step.dst->offset, step.dst->nbytes(), timeout_);
        if (!token.ok()) return token.status().with_context("execution plan for " + here);
        f.kind = PlanStepKind::send_to_peer;
        f.src_handle = src.value()->handle();
        f.src_offset = step.src->offset;
        f.size = step.dst->nbytes();
        f.endpoint = to->endpoint();
        f.token = token.value();
        use(f.src_handle);
        break;
      }
      case ExecutionPlanSpec::StepKind::wait: {
        auto dst = bytes_of(step.dst, true, "wait destination");
        if (!dst.ok()) return dst.status();
        auto token = connection_->standing_grant(dst.value()->handle(), step.dst->offset, step.dst->nbytes(), timeout_);
        if (!token.ok()) return token.status().with_context("execution plan for " + here);
        f.kind = PlanStepKind::wait_for;
        f.token = token.value();
        f.timeout_ms = std::min(spec.wait_timeout_ms, kMaxPlanWaitMs);
        const RemoteBuffer* from = remote_of(step.src);
        f.endpoint = from ? from->connection()->endpoint() : std::string("another server");
        break;
      }
    }
    encode_step(w, f);
  }
  return connection_->send_plan(std::move(w.bytes()), std::move(handles), timeout_);
}

Status RemotePlanRunner::synchronize() {
  const Status s = connection_->call_status_only(Command::synchronize, {}, timeout_);
  if (!s.ok()) start_over();
  return s;
}

Status RemotePlanRunner::synchronize_and_read(const Tensor& t, void* dst, const std::function<void()>& meanwhile) {
  const RemoteBuffer* b = remote_of(&t);
  if (b == nullptr || b->connection().get() != connection_.get()) {
    if (meanwhile) meanwhile();
    return invalid_argument("read after plans on " + connection_->endpoint() + ": " + describe(t) +
                            " is not in a buffer of this server");
  }
  // A server before 1.3 ignores SYNC: wait, then read.
  const HelloReply& server = connection_->server_hello();
  if (server.major == 1 && server.minor < 3) {
    if (meanwhile) meanwhile();
    TENSORPC_RETURN_IF_ERROR(synchronize());
    return b->get(t, dst, 0, t.nbytes());
  }
  const Status s = meanwhile ? b->get_after_pending(t, dst, meanwhile) : b->get_after_pending(t, dst);
  if (!s.ok()) start_over();
  return s;
}

Status RemotePlanRunner::settle() { return connection_->settle(); }

std::optional<Status> RemotePlanRunner::try_settle() { return connection_->try_settle(); }

// After a failed run, wait under new grants (so plans are encoded anew), so
// that a late send of the failed run is never taken for the next run's bytes.
void RemotePlanRunner::start_over() {
  encoded_.clear();
  connection_->forget_standing_grants();
}

}  // namespace tensorpc::rpc
