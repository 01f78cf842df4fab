// The scheduler's internals (include/tensorpc/scheduler.h is the public
// side): the caller's graph numbered, its structural signature, the device
// assignment, and the Plan built from them. Owned by the backend layer.
//
// A Plan owns every descriptor it computes on, in its own Context:
//  - shadows of the caller's nodes, one per computed node, in the split that
//    computes it, whose sources point at shadows of the same split, at leaves
//    (weights, shadow inputs, boundary copies) or at proxies;
//  - shadow inputs: one leaf per caller input, placed on its device;
//  - boundary copies: a leaf on the consumer's device per (tensor, device);
//  - proxies: leaves that name bytes computed or placed outside the split
//    that reads them (earlier splits of the same device, views of weights),
//    so that each split's Graph holds exactly that split's nodes;
//  - per device, a planning graph: one descriptor per tensor whose bytes the
//    scheduler owns there, linked by real data flow across all the device's
//    splits, so the GraphAllocator sees true lifetimes.
// The caller's tensors are only ever read, except that allocate() binds each
// one (buffer/offset/data) to the bytes its shadow uses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensorpc/context.h"
#include "tensorpc/device.h"
#include "tensorpc/graph.h"
#include "tensorpc/graph_allocator.h"
#include "tensorpc/scheduler.h"

namespace tensorpc::sched {

// True when the scheduler itself placed a tensor that is not a view (an
// earlier allocate() bound it): such a tensor counts as not placed, and is
// bound again.
using OwnsBuffer = std::function<bool(const Tensor&)>;

// The caller's graph numbered: leaves 0..L-1, then nodes L..L+N-1.
class GraphIndex {
 public:
  explicit GraphIndex(const Graph& g);
  size_t size() const { return tensors_.size(); }
  size_t n_leafs() const { return n_leafs_; }
  bool is_leaf(int id) const { return static_cast<size_t>(id) < n_leafs_; }
  Tensor* at(int id) const { return tensors_[static_cast<size_t>(id)]; }
  // -1 for null.
  int of(const Tensor* t) const;
  // The id of the tensor whose bytes t uses (itself unless a view).
  int root(int id) const;

 private:
  std::vector<Tensor*> tensors_;
  std::unordered_map<const Tensor*, int> ids_;
  size_t n_leafs_ = 0;
};

// True when a node only re-describes bytes (view, reshape, permute, transpose).
inline bool is_pure_view(const Tensor& t) { return t.view_src != nullptr && is_view_op(t.op); }
// True when a node computes into bytes of its view_src (cpy, set_rows).
inline bool writes_in_place(const Tensor& t) { return t.view_src != nullptr && !is_view_op(t.op); }
// True when the caller placed t's bytes (a weight, a KV cache, ...).
bool caller_placed(const Tensor& t, const OwnsBuffer& owns);

// Words that equal exactly when two graphs may share a plan.
std::vector<uint64_t> signature(const GraphIndex& ix, const OwnsBuffer& owns);
uint64_t hash_words(const std::vector<uint64_t>& words);

// Device numbers (indices into the device list) per leaf and node.
struct Assignment {
  std::vector<int> device;  // per id
};
StatusOr<Assignment> assign_devices(const GraphIndex& ix, const std::vector<Device*>& devices, const OwnsBuffer& owns);

struct Split {
  size_t device = 0;
  std::vector<Tensor*> shadows;  // the nodes it computes, in order
  std::vector<size_t> copies;    // into Plan::copies, made before it runs
  Graph graph;                   // shadows plus the leaves they read
  // Bytes of weights (the first operand of each mul_mat, the chosen experts
  // of each mul_mat_id at most) it reads: how long its computation keeps the
  // device busy, roughly.
  uint64_t weight_bytes = 0;
};

struct BoundaryCopy {
  Tensor* src;  // bytes on `from` (a shadow, a weight, a proxy, or another copy on `to`'s server)
  Tensor* dst;  // a leaf owned on `to`
  size_t from, to;
  // The source is a leaf that no node writes into (an input, a weight): its
  // bytes are in place before the run starts, so the copy may be made first.
  bool before_run = false;
};

// A descriptor whose bytes are another's at an offset (proxies, views,
// in-place writers); resolved after the owners are placed, in this order.
struct Derived {
  Tensor* t;
  Tensor* base;
  uint64_t offset;
};

// One device's memory model (see the file comment).
struct DeviceMemory {
  size_t device = 0;
  Graph graph;
  std::vector<std::pair<Tensor*, Tensor*>> owned;  // (planning descriptor, shadow/copy/input)
};

struct Plan {
  std::vector<uint64_t> signature;
  Context ctx;  // every descriptor below
  SchedulePlanInfo info;
  std::vector<std::string> labels;  // per id, for describe()
  std::vector<Split> splits;
  std::vector<BoundaryCopy> copies;
  std::vector<Derived> derived;
  std::vector<DeviceMemory> memory;
  // Per caller id: the descriptor its bytes are bound to, and the offset in
  // it; base null for tensors the caller placed itself.
  std::vector<Derived> home;
  // Which placement of the plan's descriptors is current: a number no other
  // placement (of this plan or any other) had, given whenever place() moves
  // them. Execution plan specs carry it in their key.
  uint64_t placement = 0;
};

// What the scheduler keeps per device across runs.
struct DeviceSlot {
  explicit DeviceSlot(Device& d) : allocator(d) {}
  GraphAllocator allocator;
  std::unique_ptr<Stream> stream;  // made on first use
  const Plan* placed = nullptr;    // the plan whose planning graph the allocator placed last
};

// Builds the plan's descriptors and info (not placed yet). `executors`: per
// device, who runs it, to find runs of splits on one server.
StatusOr<std::unique_ptr<Plan>> build_plan(const GraphIndex& ix, const Assignment& a,
                                           const std::vector<ExecutorId>& executors, const OwnsBuffer& owns);

// Sets t's buffer/offset/data to base's plus offset.
void place_at(Tensor& t, const Tensor& base, uint64_t offset);

// "node 12 mul_mat [64, 5, 1, 1] f32 'ffn_out'".
std::string label(const GraphIndex& ix, int id);

}  // namespace tensorpc::sched
