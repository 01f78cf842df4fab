// StoredWork: a session's stored graphs and plans, and their eviction
// (stored_work.h).
#include "rpc/server/stored_work.h"

#include <algorithm>
#include <string>

namespace tensorpc::rpc {
namespace {

// Sorted, each once.
void make_set(std::vector<uint64_t>& handles) {
  std::sort(handles.begin(), handles.end());
  handles.erase(std::unique(handles.begin(), handles.end()), handles.end());
}

}  // namespace

StoredGraph& StoredWork::store_graph(StoredGraph graph) {
  make_set(graph.handles);
  const uint64_t id = graph.id;
  StoredGraph& stored = graphs_.put(id, std::move(graph));
  graphs_.trim_to(capacity_);
  return stored;
}

StatusOr<StoredGraph*> StoredWork::use_graph(uint64_t id, uint32_t device) {
  StoredGraph* g = graphs_.find(id);
  if (g == nullptr) {
    return not_found("graph " + std::to_string(id) + " not found (never computed on this connection, evicted — the " +
                     std::to_string(capacity_) + " most recently used are kept — or one of its buffers was freed)");
  }
  if (g->device != device) {
    return invalid_argument("graph " + std::to_string(id) + " was computed on device " + std::to_string(g->device) +
                            ", not " + std::to_string(device));
  }
  return g;
}

void StoredWork::store_plan(StoredPlan plan) {
  make_set(plan.handles);
  const uint64_t id = plan.id;
  plans_.put(id, std::move(plan));
  plans_.trim_to(capacity_);
}

StatusOr<StoredPlan*> StoredWork::use_plan(uint64_t id) {
  StoredPlan* p = plans_.find(id);
  if (p == nullptr) {
    return not_found("plan " + std::to_string(id) + " not found (never stored on this connection, evicted — the " +
                     std::to_string(capacity_) + " most recently used are kept — or one of its buffers was freed)");
  }
  return p;
}

void StoredWork::forget_users_of(uint64_t handle) {
  const auto uses = [handle](const std::vector<uint64_t>& handles) {
    return std::find(handles.begin(), handles.end(), handle) != handles.end();
  };
  graphs_.erase_if([&](uint64_t, const StoredGraph& g) { return uses(g.handles); });
  plans_.erase_if([&](uint64_t, const StoredPlan& p) { return uses(p.handles); });
}

void StoredWork::clear() {
  graphs_.clear();
  plans_.clear();
}

}  // namespace tensorpc::rpc
