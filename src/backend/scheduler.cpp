// Scheduler: the plan cache, placing a plan's descriptors with the
// per-device GraphAllocators, and binding a caller's graph to them. Running
// is in scheduler_run.cpp, the debug print in scheduler_describe.cpp.
// Owned by the backend layer.
#include "tensorpc/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/scheduler_plan.h"

namespace tensorpc {
namespace sched {

// Entries of Scheduler::bound_ before it is cleared.
constexpr size_t kMaxBound = size_t{1} << 20;

// Binds the caller's tensors to the plan's bytes, by index, and notes in
// `bound` each one (not a view) so bound and the buffer it was bound to.
void bind(const GraphIndex& ix, const Plan& plan, std::unordered_map<const Tensor*, const Buffer*>& bound) {
  for (size_t id = 0; id < ix.size(); ++id) {
    const Derived& h = plan.home[id];
    if (h.base == nullptr) continue;
    Tensor& t = *ix.at(static_cast<int>(id));
    place_at(t, *h.base, h.offset);
    if (t.view_src == nullptr) bound[&t] = t.buffer;
  }
}

}  // namespace sched

SchedulerCounters& SchedulerCounters::operator+=(const SchedulerCounters& o) {
  runs += o.runs;
  splits_run += o.splits_run;
  copies += o.copies;
  copies_through_host += o.copies_through_host;
  bytes_copied += o.bytes_copied;
  round_trips += o.round_trips;
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  plans_run += o.plans_run;
  early_sends += o.early_sends;
  for (const auto& [channel, t] : o.channels) {
    DeviceTraffic& mine = channels[channel];
    mine.channel = channel;
    mine.round_trips += t.round_trips;
    mine.bytes_sent += t.bytes_sent;
    mine.bytes_received += t.bytes_received;
  }
  return *this;
}

Scheduler::Scheduler(std::vector<Device*> devices, SchedulerOptions options)
    : devices_(std::move(devices)), options_(options) {
  options_.max_cached_plans = std::max<size_t>(options_.max_cached_plans, 1);
  for (Device* d : devices_) {
    // A null device is reported by allocate(); a slot keeps indices aligned.
    executors_.push_back(d ? ExecutorId::of(*d) : ExecutorId());
    slots_.push_back(d ? std::make_unique<sched::DeviceSlot>(*d) : nullptr);
  }
}

// Plans (and the descriptors the allocators' plans point at) go before the
// allocators' buffers and the streams, which go before the devices.
Scheduler::~Scheduler() {
  runners_.clear();
  plans_.clear();
  slots_.clear();
}

const SchedulePlanInfo* Scheduler::last_plan() const { return last_ ? &last_->info : nullptr; }

StatusOr<sched::Plan*> Scheduler::plan_for(Graph& g) {
  allocated_ = false;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i] == nullptr) return invalid_argument("scheduler: device " + std::to_string(i) + " is null");
  }
  // Ours: in a buffer of our allocators now, or bound by us to the buffer it
  // is in (which an allocator may since have replaced when it grew).
  const sched::OwnsBuffer owns = [this](const Tensor& t) {
    for (const auto& slot : slots_) {
      if (slot->allocator.buffer() == t.buffer) return true;
    }
    auto it = bound_.find(&t);
    return it != bound_.end() && it->second == t.buffer;
  };
  if (bound_.size() > sched::kMaxBound) bound_.clear();  // keeps memory bounded; costs at most a re-plan
  const sched::GraphIndex ix(g);
  std::vector<uint64_t> words = sched::signature(ix, owns);
  const uint64_t hash = sched::hash_words(words);

  sched::Plan* plan = nullptr;
  bool made = false;
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if ((*it)->info.hash != hash || (*it)->signature != words) continue;
    std::rotate(it, it + 1, plans_.end());  // most recently used last
    plan = plans_.back().get();
    break;
  }
  if (plan == nullptr) {
    TENSORPC_ASSIGN_OR_RETURN(const sched::Assignment assignment, sched::assign_devices(ix, devices_, owns));
    TENSORPC_ASSIGN_OR_RETURN(std::unique_ptr<sched::Plan> built, sched::build_plan(ix, assignment, executors_, owns));
    built->signature = std::move(words);
    built->info.hash = hash;
    if (plans_.size() >= options_.max_cached_plans) {
      for (auto& slot : slots_) {
        if (slot->placed == plans_.front().get()) slot->placed = nullptr;
      }
      plans_.erase(plans_.begin());
    }
    plans_.push_back(std::move(built));
    plan = plans_.back().get();
    ++plans_made_;
    made = true;
  }
  planned_ = {};
  TENSORPC_RETURN_IF_ERROR(place(*plan));
  last_ = plan;
  if (made) {
    const char* debug = std::getenv("TENSORPC_SCHED_DEBUG");
    if (debug != nullptr && std::strcmp(debug, "0") != 0) std::fprintf(stderr, "%s", describe().c_str());
  }

  sched::bind(ix, *plan, bound_);
  planned_ = GraphMark::of(g);
  return plan;
}

// Places the plan's descriptors: each device's planning graph through its
// allocator (unless it is the plan that allocator placed last, whose offsets
// are still there), then everything derived from those.
Status Scheduler::place(sched::Plan& plan) {
  if (plan.info.device_bytes.empty()) plan.info.device_bytes.assign(devices_.size(), 0);
  bool moved = plan.placement == 0;
  for (sched::DeviceMemory& m : plan.memory) {
    sched::DeviceSlot& slot = *slots_[m.device];
    if (slot.placed != &plan) {
      moved = true;
      // Another plan may have moved or freed the buffer these pointed into.
      for (auto& [p, real] : m.owned) {
        p->buffer = nullptr;
        p->data = nullptr;
        p->offset = 0;
      }
      slot.placed = nullptr;
      Status s = slot.allocator.allocate(m.graph);
      if (!s.ok()) return s.with_context("scheduler: placing on " + devices_[m.device]->name());
      slot.placed = &plan;
      plan.info.device_bytes[m.device] = slot.allocator.last_plan().peak;
    }
    for (auto& [p, real] : m.owned) sched::place_at(*real, *p, 0);
  }
  for (const sched::Derived& d : plan.derived) {
    if (d.base->buffer == nullptr) {
      return internal_error("scheduler: " + tensorpc::describe(*d.t) + " is derived from unplaced " +
                            tensorpc::describe(*d.base));
    }
    sched::place_at(*d.t, *d.base, d.offset);
  }
  if (moved) plan.placement = ++placements_;
  return Status();
}

Status Scheduler::allocate(Graph& g) {
  TENSORPC_RETURN_IF_ERROR(plan_for(g).status());
  allocated_ = true;
  return Status();
}

Status Scheduler::allocate_again(Graph& g) {
  bool placed = planned_.is(g);
  if (placed) {
    for (const sched::DeviceMemory& m : last_->memory) placed = placed && slots_[m.device]->placed == last_;
  }
  // Still placed: every tensor of g is bound where the plan put it.
  if (!placed) return allocate(g);
  allocated_ = true;
  return Status();
}

Status Scheduler::compute(Graph& g) { return compute_and_read(g, nullptr, nullptr); }

Status Scheduler::compute_and_read(Graph& g, const Tensor& t, void* dst) { return compute_and_read(g, &t, dst); }

Status Scheduler::compute_and_read(Graph& g, const Tensor* t, void* dst) {
  if (allocated_ && planned_.is(g)) {
    allocated_ = false;
    return run(*last_, t, dst);
  }
  TENSORPC_ASSIGN_OR_RETURN(auto* plan, plan_for(g));
  return run(*plan, t, dst);
}

}  // namespace tensorpc
