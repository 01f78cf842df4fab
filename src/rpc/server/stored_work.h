// StoredWork: the graphs and execution plans one session keeps to run again.
//
// GRAPH_COMPUTE stores its graph under the client's graph_id, so that
// GRAPH_RECOMPUTE sends only the id; PLAN_STORE stores a plan's steps, which
// PLAN_RUN runs by id. Each kind keeps its `capacity` most recently used
// (ServerOptions::stored_graphs); storing one more evicts the one unused the
// longest, which the client learns when it next names it ("graph N not
// found", "plan N not found") and answers by storing it again: the client
// never needs to know how many are kept. Both point into the session's
// buffers, so freeing a buffer forgets every graph and plan that uses it: a
// stale one could never run safely again. What is stored here was checked
// when it was stored; only the session's own thread uses it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/lru.h"
#include "rpc/wire/graph_codec.h"
#include "rpc/wire/plan_codec.h"

namespace tensorpc::rpc {

struct StoredGraph {
  uint64_t id = 0;
  uint32_t device = 0;
  DecodedGraph graph;
  std::vector<uint64_t> handles;  // buffers it uses: freeing one forgets the graph
};

struct PlanStep {
  PlanStepFields fields;
  DecodedGraph graph;  // COMPUTE only
};

struct StoredPlan {
  uint64_t id = 0;
  std::vector<PlanStep> steps;
  std::vector<uint64_t> handles;  // buffers it uses: freeing one forgets the plan
};

class StoredWork {
 public:
  // Keeps up to `capacity` graphs and as many plans (at least one each).
  explicit StoredWork(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // Keeps `graph` (replacing one of the same id) as the most recently used;
  // the graph now stored.
  StoredGraph& store_graph(StoredGraph graph);
  // The graph stored under `id` for `device`, now the most recently used.
  StatusOr<StoredGraph*> use_graph(uint64_t id, uint32_t device);
  // Keeps `plan` (its steps checked; replacing one of the same id) as the
  // most recently used, after working out what its steps' checks left open:
  // its last compute, its devices, the sends that ride with the next.
  void store_plan(StoredPlan plan);
  // The plan stored under `id`, now the most recently used.
  StatusOr<StoredPlan*> use_plan(uint64_t id);
  // Drops the graphs and plans that name `handle` (being freed).
  void forget_users_of(uint64_t handle);
  void clear();

 private:
  const size_t capacity_;
  LruStore<uint64_t, StoredGraph> graphs_;  // by id
  LruStore<uint64_t, StoredPlan> plans_;    // by id
};

}  // namespace tensorpc::rpc
