// Session's handlers of execution plans (docs/protocol.md, "Execution plans"):
//   GRANT_STANDING  a reusable write grant, the destination of a plan's
//                   SEND_TO_PEER on another server;
//   PLAN_STORE      decodes and validates every step once and keeps the plan
//                   under the client's id (StoredWork keeps the most recent);
//   PLAN_RUN        runs a stored plan's steps in order on this session's
//                   devices, so a client sends only the id per run.
// Everything a step names is checked at store time, so a run fails only for
// what can change between runs: a peer that is gone, bytes that never come.
// The plans themselves are kept by StoredWork.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

#include "rpc/server/session.h"

namespace tensorpc::rpc {

Status Session::on_grant_standing(WireReader& in, Reply& out) {
  GrantStandingRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  auto token = issue_grant(req.handle, req.offset, req.size, "GRANT_STANDING:", std::make_shared<GrantArrivals>());
  if (!token.ok()) return token.status();
  encode(out.fields, GrantStandingReply{token.value()});
  return Status();
}

Status Session::on_plan_store(WireReader& in, Reply&) {
  PlanStoreRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  const uint32_t n_steps = in.u32();
  if (!in.ok()) return protocol_error("PLAN_STORE request: field 'n_steps' is truncated");
  if (n_steps > kMaxPlanSteps) {
    return invalid_argument("PLAN_STORE: " + std::to_string(n_steps) + " steps, more than the limit of " +
                            std::to_string(kMaxPlanSteps));
  }
  StoredPlan plan{.id = req.plan_id, .steps = {}, .handles = {}};
  // Bytes left bound the count before anything is reserved for it.
  plan.steps.reserve(std::min<size_t>(n_steps, in.remaining()));
  for (uint32_t i = 0; i < n_steps; ++i) {
    PlanStep step;
    TENSORPC_RETURN_IF_ERROR(decode_step(in, i, step.fields));
    const PlanStepFields& f = step.fields;
    const std::string where = "PLAN_STORE: step " + std::to_string(i) + " (" + name_of(f.kind) + "): ";
    const auto refuse = [&](const Status& s) { return Status(s.code(), where + s.message()); };
    switch (f.kind) {
      case PlanStepKind::compute: {
        if (Status s = buffers_.check_device(f.device); !s.ok()) return refuse(s);
        auto decoded = decode_graph(in, buffers_.resolver(f.device, plan.handles));
        if (!decoded.ok()) return refuse(decoded.status());
        step.graph = std::move(decoded).value();
        break;
      }
      case PlanStepKind::copy: {
        auto src = buffers_.find_range(f.src_handle, f.src_offset, f.size, "source");
        if (!src.ok()) return refuse(src.status());
        auto dst = buffers_.find_range(f.dst_handle, f.dst_offset, f.size, "destination");
        if (!dst.ok()) return refuse(dst.status());
        plan.handles.push_back(f.src_handle);
        plan.handles.push_back(f.dst_handle);
        break;
      }
      case PlanStepKind::send_to_peer: {
        auto src = buffers_.find_range(f.src_handle, f.src_offset, f.size, "source");
        if (!src.ok()) return refuse(src.status());
        if (f.endpoint.empty()) return refuse(invalid_argument("empty endpoint"));
        if (Status s = peers_.check_allowed(f.endpoint); !s.ok()) return refuse(s);
        plan.handles.push_back(f.src_handle);
        break;
      }
      case PlanStepKind::wait_for: {
        if (env_.grants == nullptr || !env_.grants->find_standing(f.token, id_)) {
          return refuse(invalid_argument("the token is not a standing grant of this connection"));
        }
        if (const uint32_t limit = std::min(env_.max_plan_wait_ms, kMaxPlanWaitMs); f.timeout_ms > limit) {
          return refuse(invalid_argument("timeout of " + std::to_string(f.timeout_ms) + " ms is over the limit of " +
                                         std::to_string(limit)));
        }
        break;
      }
    }
    plan.steps.push_back(std::move(step));
  }
  if (!in.done()) {
    return protocol_error("PLAN_STORE request: " + std::to_string(in.remaining()) +
                          " unexpected bytes after the steps");
  }
  work_.store_plan(std::move(plan));
  return Status();
}

Status Session::on_plan_run(WireReader& in, Reply&) {
  PlanRunRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  auto stored = plan_to_run(req.plan_id);
  if (!stored.ok()) return stored.status();
  StoredPlan& plan = *stored.value();
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    PlanStep& step = plan.steps[i];
    const PlanStepFields& f = step.fields;
    Status s;
    switch (f.kind) {
      case PlanStepKind::compute:
        s = buffers_.compute_on(f.device, step.graph.graph);
        break;
      case PlanStepKind::copy:
        s = buffers_.copy_range(f.src_handle, f.src_offset, f.dst_handle, f.dst_offset, f.size);
        break;
      case PlanStepKind::send_to_peer:
        s = send_to_peer(f.src_handle, f.src_offset, f.size, f.endpoint, f.token, /*wait_for_reply=*/false);
        break;
      case PlanStepKind::wait_for: s = wait_for_arrival(f); break;
    }
    if (!s.ok()) {
      tell_unsent(plan, i);
      return Status(s.code(), "PLAN_RUN: plan " + std::to_string(plan.id) + " step " + std::to_string(i) + " (" +
                                  name_of(f.kind) + "): " + s.message());
    }
  }
  return Status();
}

// The sends after a failed step will not happen: each destination gets a
// WRITE_GRANTED of no bytes under its standing grant instead (protocol.md),
// so its WAIT_FOR fails now rather than at its timeout, and the failure goes
// down the pipeline server by server. Best effort: a destination that cannot
// be reached is not waiting on a live connection anyway.
void Session::tell_unsent(const StoredPlan& plan, size_t failed_step) {
  for (size_t j = failed_step + 1; j < plan.steps.size(); ++j) {
    const PlanStepFields& f = plan.steps[j].fields;
    if (f.kind != PlanStepKind::send_to_peer) continue;
    auto connection = peers_.get(f.endpoint);
    if (!connection.ok()) continue;
    WireWriter fields;
    encode(fields, WriteGrantedRequest{.token = f.token, .size = 0});
    (void)connection.value()->send_one_way(
        {.command = Command::write_granted, .fields = fields.bytes(), .timeout = env_.io_timeout});
  }
}

Status Session::wait_for_arrival(const PlanStepFields& step) {
  auto grant = env_.grants ? env_.grants->find_standing(step.token, id_) : std::nullopt;
  if (!grant) return not_found("the standing grant was revoked");
  GrantArrivals& a = *grant->arrivals;
  const ElapsedInto timed(env_.counters->peer_wait_ns);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(step.timeout_ms);
  std::unique_lock<std::mutex> lock(a.mutex);
  // Short slices, so that shutdown() (which cannot reach this condition
  // variable) ends the wait promptly.
  while (a.arrived <= a.seen) {
    if (!a.failure.ok()) return std::exchange(a.failure, Status());
    if (!a.sender_gone.ok()) {
      return Status(a.sender_gone.code(), "no bytes from " + step.endpoint + " reached " + env_.endpoint + ": " +
                                              a.sender_gone.message());
    }
    if (stopping_.load(std::memory_order_acquire)) return io_error("the server is stopping");
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return io_error("no bytes from " + step.endpoint + " reached " + env_.endpoint + " within " +
                      std::to_string(step.timeout_ms) + " ms (" + std::to_string(grant->size) + " bytes expected)");
    }
    a.changed.wait_for(lock,
                       std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(50)));
  }
  a.seen = a.arrived;
  return Status();
}

}  // namespace tensorpc::rpc
