// Scheduler: runs one graph across several devices (local and remote).
//
// Given an ordered list of devices, the scheduler assigns every node of a
// graph a device (where its weights live, else where its inputs are; see
// docs/architecture.md, "Scheduler"), cuts the node list into splits (runs of
// consecutive nodes on one device), copies each tensor a split reads from
// another device into a tensor on the split's device at the split's start
// (once per consumer device), places every split's tensors with one
// GraphAllocator per device, and runs the splits in order on one stream per
// device — or, for a run of consecutive splits on one server, as one
// execution plan the server carries out itself (tensorpc/execution_plan.h).
//
// The caller's graph is never rewired. The scheduler computes on descriptors
// of its own (shadows of the caller's nodes whose sources point at copies
// where needed) and binds the caller's tensors — inputs, nodes, outputs — to
// the bytes their shadows use. So after allocate() the caller writes its
// inputs through its own input tensors, and after compute() it reads any of
// its tensors (outputs above all) through their buffers, as with a
// GraphAllocator. A tensor the caller placed itself (a weight, a KV cache, a
// node it gave a buffer) keeps its placement and fixes its device.
//
// Plans are cached by structure: a graph with the same ops, shapes, types,
// params, flags, topology and the same placed tensors (pointer, buffer,
// offset) as a cached one reuses its plan, and the new graph's tensors are
// bound to the cached placement by index.
//
// Ownership: the scheduler owns its plans, its per-device GraphAllocators
// (and their buffers) and its streams; the devices must outlive it. A graph
// allocated here is valid until the next allocate()/compute() of a graph of
// another shape, which may reuse the same bytes. Not thread-safe: one thread
// calls a Scheduler at a time.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensorpc/device.h"
#include "tensorpc/graph.h"
#include "tensorpc/status.h"

namespace tensorpc {

namespace sched {
struct Plan;        // src/backend/scheduler_plan.h
struct DeviceSlot;  // src/backend/scheduler.cpp
}  // namespace sched

// Who carries out the work of a device: the server behind the connection the
// device is reached by (every device of one server has the same id), or this
// process for local devices. A server runs the commands of all its devices
// in order and may run execution plans; this process gives each local device
// a stream of its own. Made from DeviceTraffic::channel, which names the
// connection; that name is also how describe() and SchedulerCounters show it.
class ExecutorId {
 public:
  ExecutorId() = default;  // this process
  explicit ExecutorId(std::string channel) : channel_(std::move(channel)) {}
  static ExecutorId of(const Device& d) { return ExecutorId(d.traffic().channel); }

  bool is_local() const { return channel_.empty(); }
  // Both name one server, which runs their commands in order.
  bool same_server(const ExecutorId& o) const { return !is_local() && channel_ == o.channel_; }
  // The server's DeviceTraffic::channel; empty for this process.
  const std::string& name() const { return channel_; }

  bool operator==(const ExecutorId&) const = default;
  std::strong_ordering operator<=>(const ExecutorId&) const = default;

 private:
  std::string channel_;
};

struct SchedulerOptions {
  // Plans kept for reuse (least recently used goes first); at least 1.
  size_t max_cached_plans = 4;
  // Each server run (SchedulePlanInfo::server_runs) is handed to its server
  // as one execution plan (tensorpc/execution_plan.h) when its devices can
  // run plans: one request per run, and hand-overs to the next server go
  // server to server. Off: every split and copy is sent on its own.
  bool execution_plans = true;
  // How long a plan waits for a tensor the previous server sends it.
  uint32_t plan_wait_timeout_ms = 30000;
  // A server run whose computations read fewer bytes of weights than this
  // sends the inputs that runs on other servers take from it (tensors set
  // before the run) before it computes: its computations are short, and
  // bytes arriving early keep the receiver awake for the hand-over that soon
  // follows. A longer one sends them after its computations, next to the
  // hand-over, and its server writes sends to one peer that follow each other
  // in one go: the receiver wakes once, not once more in the middle of a
  // computation that, on a machine whose cores the servers share, it would
  // interrupt. 0: always after.
  uint64_t early_inputs_below_bytes = uint64_t{8} << 20;
};

// The last plan, for tests and debug prints. Device numbers index the
// scheduler's device list; node numbers index Graph::nodes(), leaf numbers
// Graph::leafs().
struct SchedulePlanInfo {
  struct Split {
    size_t device = 0;
    size_t first_node = 0;  // the node range [first_node, last_node] it covers
    size_t last_node = 0;
    size_t n_nodes = 0;          // nodes it computes (views in the range compute nothing)
    std::vector<size_t> copies;  // indices into `copies`, made before the split runs
    uint64_t copy_bytes = 0;     // bytes those copies move into this split's device
  };
  struct Copy {
    std::string tensor;  // "node 12 mul_mat [64, 5, 1, 1] f32 'ffn_out'", "leaf 3 [5, 1, 1, 1] i32 'pos'"
    bool is_leaf = false;
    size_t index = 0;  // node or leaf number of the tensor copied
    size_t from = 0, to = 0;
    uint64_t bytes = 0;
    size_t split = 0;  // the first split (on `to`) that reads it
    // Its bytes are in place before the run (an input or weight nothing
    // writes into): a server's plan sends it before computing anything.
    bool before_run = false;
  };
  // Consecutive splits on devices reached through one connection (devices of
  // one server): the unit a server-side execution plan carries out
  // (SchedulerOptions::execution_plans), so that only the run's inputs go in
  // and its outputs come out.
  struct ServerRun {
    std::string channel;  // the server's ExecutorId::name()
    size_t first_split = 0;
    size_t n_splits = 0;
  };

  uint64_t hash = 0;             // the structural hash the plan is cached under
  std::vector<int> node_device;  // per node
  std::vector<int> leaf_device;  // per leaf
  std::vector<Split> splits;
  std::vector<Copy> copies;
  std::vector<ServerRun> server_runs;
  std::vector<uint64_t> device_bytes;  // per device: bytes its graph allocator's plan needs
};

// Counts of a run (or summed over all runs). Traffic counts each connection
// once however many of its devices took part.
struct SchedulerCounters {
  uint64_t runs = 0;
  uint64_t splits_run = 0;
  uint64_t copies = 0;               // boundary copies made
  uint64_t copies_through_host = 0;  // of those, the ones done as get + set here
  uint64_t bytes_copied = 0;         // between devices, whichever way they went
  uint64_t round_trips = 0;          // remote devices: requests that waited for a reply
  uint64_t bytes_sent = 0;           // remote devices: bytes through this client, out
  uint64_t bytes_received = 0;       //   and in (frame headers included)
  uint64_t plans_run = 0;            // server runs carried out as one execution plan
  uint64_t early_sends = 0;          // of their sends, inputs sent before their computations
  // The three traffic counters above, per server (ExecutorId::name(), the
  // connection's DeviceTraffic::channel).
  std::map<std::string, DeviceTraffic> channels;

  SchedulerCounters& operator+=(const SchedulerCounters& o);
};

class Scheduler {
 public:
  // `devices`: in order of preference; none may be null. Weights must live
  // on devices of this list.
  explicit Scheduler(std::vector<Device*> devices, SchedulerOptions options = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Plans g (or reuses the plan of a graph of the same structure) and places
  // every tensor it needs; the caller's tensors are bound to those bytes, so
  // the caller can now write its inputs (leaves it did not place).
  Status allocate(Graph& g);
  // allocate(g) for the graph this scheduler planned last, unchanged since
  // (the same tensors and descriptors; only input bytes differ), as a decode
  // loop reuses its step: nothing is planned again, and unless another
  // graph was placed since, nothing is placed again either. For any other
  // graph it is allocate(g).
  Status allocate_again(Graph& g);
  // Runs g: allocate(g) first (cheap when g is already placed; input bytes
  // written since are kept), then each split's copies and graph. Returns when
  // every result is on its device; the caller reads them through its tensors.
  // Called right after allocate(g) on the same graph — which the caller must
  // not change in between, except for the bytes of its inputs — it runs the
  // plan allocate() chose without looking at the graph again.
  Status compute(Graph& g);
  // compute(g), then reads all of t (a tensor of g) into dst. When t lies
  // on a server that ran an execution plan, the read itself waits for that
  // server's plans and reports their errors, and a server whose plan ends
  // by sending its result on to that server (directly or through others
  // that do the same) needs no wait of its own: its plan is done once the
  // bytes it sent have been used. A pipeline over servers thus costs one
  // round trip per run, to the server holding t. On an error every server
  // is waited for, and the first error returned.
  Status compute_and_read(Graph& g, const Tensor& t, void* dst);

  // The last plan: node -> device, splits, copies, bytes per boundary.
  std::string describe() const;
  // Null before the first plan.
  const SchedulePlanInfo* last_plan() const;

  const SchedulerCounters& last_run() const { return last_run_; }
  const SchedulerCounters& totals() const { return totals_; }
  // Plans made from scratch (cache misses).
  uint64_t plans_made() const { return plans_made_; }
  const std::vector<Device*>& devices() const { return devices_; }

 private:
  class Execution;  // one run of a plan (scheduler_run.cpp)

  StatusOr<sched::Plan*> plan_for(Graph& g);
  Status compute_and_read(Graph& g, const Tensor* t, void* dst);
  Status place(sched::Plan& plan);
  // Runs the plan; then reads `read` into `read_dst` when given (see compute_and_read).
  Status run(sched::Plan& plan, const Tensor* read = nullptr, void* read_dst = nullptr);
  StatusOr<Stream*> stream(size_t device);
  // The plan runner of a server, made on first use from `device`; null when
  // its devices run no plans (remembered, so they are asked once).
  PlanRunner* runner(const ExecutorId& server, size_t device);

  std::vector<Device*> devices_;
  std::vector<ExecutorId> executors_;  // per device
  SchedulerOptions options_;
  std::vector<std::unique_ptr<sched::DeviceSlot>> slots_;      // per device: allocator, stream
  std::vector<std::unique_ptr<sched::Plan>> plans_;            // most recently used last
  std::map<ExecutorId, std::unique_ptr<PlanRunner>> runners_;  // per server; null: no plans there
  sched::Plan* last_ = nullptr;
  // A graph object, told apart from another at the same address by its node
  // count and last node.
  struct GraphMark {
    const Graph* graph = nullptr;
    size_t nodes = 0;
    const Tensor* last = nullptr;
    static GraphMark of(const Graph& g) { return {&g, g.n_nodes(), g.nodes().empty() ? nullptr : g.nodes().back()}; }
    bool is(const Graph& g) const {
      const GraphMark m = of(g);
      return graph != nullptr && graph == m.graph && nodes == m.nodes && last == m.last;
    }
  };
  // The graph last_ was planned for (empty when the last plan_for failed),
  // and whether allocate() placed it for the next compute() to run as is.
  GraphMark planned_;
  bool allocated_ = false;
  // Caller tensors (not views) allocate() bound, and the buffer it bound
  // them to: so a tensor still pointing at a buffer an allocator has since
  // replaced is known as ours, not taken for a weight.
  std::unordered_map<const Tensor*, const Buffer*> bound_;
  SchedulerCounters last_run_;
  SchedulerCounters totals_;
  uint64_t plans_made_ = 0;
  uint64_t placements_ = 0;  // the last number given to a placement (sched::Plan::placement)
};

}  // namespace tensorpc

template <>
struct std::hash<tensorpc::ExecutorId> {
  size_t operator()(const tensorpc::ExecutorId& e) const noexcept { return std::hash<std::string>{}(e.name()); }
};
