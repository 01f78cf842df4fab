// Session's handlers of execution plans (docs/protocol.md, "Execution plans"):
//   GRANT_STANDING  a reusable write grant, the destination of a plan's
//                   SEND_TO_PEER on another server;
//   PLAN_STORE      decodes and validates every step once and keeps the plan
//                   under the client's id (the 16 most recent);
//   PLAN_RUN        runs a stored plan's steps in order on this session's
//                   devices, so a client sends only the id per run.
// Everything a step names is checked at store time, so a run fails only for
// what can change between runs: a peer that is gone, bytes that never come.
#include <algorithm>
#include <chrono>
#include <utility>

#include "rpc/server/session.h"

namespace tensorpc::rpc {
namespace {

// The largest plan send held to ride with the next (PlanStep::ride_with_next):
// a larger one is better written at once than copied.
constexpr uint64_t kMaxRidingSendBytes = 16 << 10;

}  // namespace

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
  StoredPlan plan{.id = req.plan_id, .steps = {}, .handles = {}, .compute_devices = {}};
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
        if (Status s = check_device(f.device); !s.ok()) return refuse(s);
        const ResolveHandle resolve = [&](uint64_t handle, std::string* why) -> Buffer* {
          auto entry = find_buffer(handle);
          if (!entry.ok()) {
            *why = "not found (never issued on this connection, or freed)";
            return nullptr;
          }
          if (entry.value()->device != f.device) {
            *why = "lives on device " + std::to_string(entry.value()->device) + ", not on device " +
                   std::to_string(f.device) + " of this graph";
            return nullptr;
          }
          plan.handles.push_back(handle);
          return entry.value()->buffer.get();
        };
        auto decoded = decode_graph(in, resolve);
        if (!decoded.ok()) return refuse(decoded.status());
        step.graph = std::move(decoded).value();
        break;
      }
      case PlanStepKind::copy: {
        auto src = find_range(f.src_handle, f.src_offset, f.size, "source");
        if (!src.ok()) return refuse(src.status());
        auto dst = find_range(f.dst_handle, f.dst_offset, f.size, "destination");
        if (!dst.ok()) return refuse(dst.status());
        plan.handles.push_back(f.src_handle);
        plan.handles.push_back(f.dst_handle);
        break;
      }
      case PlanStepKind::send_to_peer: {
        auto src = find_range(f.src_handle, f.src_offset, f.size, "source");
        if (!src.ok()) return refuse(src.status());
        if (f.endpoint.empty()) return refuse(invalid_argument("empty endpoint"));
        if (Status s = check_peer_allowed(f.endpoint); !s.ok()) return refuse(s);
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
  PlanStep* last_compute = nullptr;
  for (PlanStep& step : plan.steps) {
    if (step.fields.kind != PlanStepKind::compute) continue;
    last_compute = &step;
    const uint32_t d = step.fields.device;
    if (std::find(plan.compute_devices.begin(), plan.compute_devices.end(), d) == plan.compute_devices.end())
      plan.compute_devices.push_back(d);
  }
  if (last_compute != nullptr) last_compute->last_compute = true;
  for (size_t i = 0; i + 1 < plan.steps.size(); ++i) {
    const PlanStepFields& f = plan.steps[i].fields;
    const PlanStepFields& next = plan.steps[i + 1].fields;
    plan.steps[i].ride_with_next = f.kind == PlanStepKind::send_to_peer && f.size <= kMaxRidingSendBytes &&
                                   next.kind == PlanStepKind::send_to_peer && next.endpoint == f.endpoint;
  }
  std::sort(plan.handles.begin(), plan.handles.end());
  plan.handles.erase(std::unique(plan.handles.begin(), plan.handles.end()), plan.handles.end());
  std::erase_if(plans_, [&](const StoredPlan& p) { return p.id == req.plan_id; });
  plans_.push_front(std::move(plan));
  if (plans_.size() > kMaxStoredPlans) plans_.pop_back();
  return Status();
}

Status Session::on_plan_run(WireReader& in, Reply&) {
  PlanRunRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  auto it = std::find_if(plans_.begin(), plans_.end(), [&](const StoredPlan& p) { return p.id == req.plan_id; });
  if (it == plans_.end()) {
    return not_found("plan " + std::to_string(req.plan_id) + " not found (never stored on this connection, evicted " +
                     "— the " + std::to_string(kMaxStoredPlans) + " most recent are kept — or one of its buffers " +
                     "was freed)");
  }
  if (it != plans_.begin()) {
    StoredPlan p = std::move(*it);
    plans_.erase(it);
    plans_.push_front(std::move(p));
  }
  StoredPlan& plan = plans_.front();
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    PlanStep& step = plan.steps[i];
    const PlanStepFields& f = step.fields;
    Status s;
    switch (f.kind) {
      case PlanStepKind::compute:
        s = compute_on(f.device, step.graph.graph);
        // What follows is a hand-over to another server, or the reply: the
        // cores the devices' threads would spin on belong to that work now.
        if (step.last_compute) {
          for (uint32_t d : plan.compute_devices) env_.devices[d]->expect_idle();
        }
        break;
      case PlanStepKind::copy: s = copy_range(f.src_handle, f.src_offset, f.dst_handle, f.dst_offset, f.size); break;
      case PlanStepKind::send_to_peer:
        s = send_to_peer(f.src_handle, f.src_offset, f.size, f.endpoint, f.token, /*wait_for_reply=*/false,
                         /*hold=*/step.ride_with_next);
        break;
      case PlanStepKind::wait_for: s = wait_for_arrival(f); break;
    }
    if (!s.ok()) {
      return Status(s.code(), "PLAN_RUN: plan " + std::to_string(plan.id) + " step " + std::to_string(i) + " (" +
                                  name_of(f.kind) + "): " + s.message());
    }
  }
  return Status();
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

void Session::forget_users_of(uint64_t handle) {
  const auto uses = [handle](const std::vector<uint64_t>& handles) {
    return std::find(handles.begin(), handles.end(), handle) != handles.end();
  };
  std::erase_if(graphs_, [&](const StoredGraph& g) { return uses(g.handles); });
  std::erase_if(plans_, [&](const StoredPlan& p) { return uses(p.handles); });
}

}  // namespace tensorpc::rpc
