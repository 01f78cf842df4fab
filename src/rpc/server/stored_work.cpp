// StoredWork: a session's stored graphs and plans, and their eviction
// (stored_work.h).
#include "rpc/server/stored_work.h"

#include <algorithm>
#include <string>

namespace tensorpc::rpc {
namespace {

// The largest plan send held to ride with the next (PlanStep::ride_with_next):
// a larger one is better written at once than copied.
constexpr uint64_t kMaxRidingSendBytes = 16 << 10;

// Sorted, each once.
void make_set(std::vector<uint64_t>& handles) {
  std::sort(handles.begin(), handles.end());
  handles.erase(std::unique(handles.begin(), handles.end()), handles.end());
}

}  // namespace

StoredGraph& StoredWork::store_graph(StoredGraph graph) {
  make_set(graph.handles);
  std::erase_if(graphs_, [&](const StoredGraph& g) { return g.id == graph.id; });
  graphs_.push_front(std::move(graph));
  if (graphs_.size() > kMaxStoredGraphs) graphs_.pop_back();
  return graphs_.front();
}

StatusOr<StoredGraph*> StoredWork::use_graph(uint64_t id, uint32_t device) {
  auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const StoredGraph& g) { return g.id == id; });
  if (it == graphs_.end()) {
    return not_found("graph " + std::to_string(id) + " not found (never computed on this connection, " +
                     "evicted — the " + std::to_string(kMaxStoredGraphs) +
                     " most recent are kept — or one of its buffers was freed)");
  }
  if (it->device != device) {
    return invalid_argument("graph " + std::to_string(id) + " was computed on device " + std::to_string(it->device) +
                            ", not " + std::to_string(device));
  }
  // Most recently used first, so eviction drops the graph unused the longest.
  if (it != graphs_.begin()) {
    StoredGraph g = std::move(*it);
    graphs_.erase(it);
    graphs_.push_front(std::move(g));
  }
  return &graphs_.front();
}

void StoredWork::store_plan(StoredPlan plan) {
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
  make_set(plan.handles);
  std::erase_if(plans_, [&](const StoredPlan& p) { return p.id == plan.id; });
  plans_.push_front(std::move(plan));
  if (plans_.size() > kMaxStoredPlans) plans_.pop_back();
}

StatusOr<StoredPlan*> StoredWork::use_plan(uint64_t id) {
  auto it = std::find_if(plans_.begin(), plans_.end(), [&](const StoredPlan& p) { return p.id == id; });
  if (it == plans_.end()) {
    return not_found("plan " + std::to_string(id) + " not found (never stored on this connection, evicted " + "— the " +
                     std::to_string(kMaxStoredPlans) + " most recent are kept — or one of its buffers " + "was freed)");
  }
  if (it != plans_.begin()) {
    StoredPlan p = std::move(*it);
    plans_.erase(it);
    plans_.push_front(std::move(p));
  }
  return &plans_.front();
}

void StoredWork::forget_users_of(uint64_t handle) {
  const auto uses = [handle](const std::vector<uint64_t>& handles) {
    return std::find(handles.begin(), handles.end(), handle) != handles.end();
  };
  std::erase_if(graphs_, [&](const StoredGraph& g) { return uses(g.handles); });
  std::erase_if(plans_, [&](const StoredPlan& p) { return uses(p.handles); });
}

void StoredWork::clear() {
  graphs_.clear();
  plans_.clear();
}

}  // namespace tensorpc::rpc
