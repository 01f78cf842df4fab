// The scheduler's view of a caller's graph: numbering, the structural
// signature that keys the plan cache, and the device assignment rules
// (docs/architecture.md, "Scheduler"). Owned by the backend layer.
#include <algorithm>
#include <string>

#include "backend/scheduler_plan.h"

namespace tensorpc::sched {

GraphIndex::GraphIndex(const Graph& g) : n_leafs_(g.leafs().size()) {
  tensors_.reserve(g.leafs().size() + g.nodes().size());
  tensors_.insert(tensors_.end(), g.leafs().begin(), g.leafs().end());
  tensors_.insert(tensors_.end(), g.nodes().begin(), g.nodes().end());
  ids_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) ids_.emplace(tensors_[i], static_cast<int>(i));
}

int GraphIndex::of(const Tensor* t) const {
  if (t == nullptr) return -1;
  auto it = ids_.find(t);
  return it == ids_.end() ? -1 : it->second;  // a Graph holds every source: -1 only for null
}

int GraphIndex::root(int id) const {
  const Tensor* t = at(id);
  return t->view_src ? of(t->view_src) : id;
}

bool caller_placed(const Tensor& t, const OwnsBuffer& owns) {
  const Tensor& root = t.view_src ? *t.view_src : t;
  return root.buffer != nullptr && !owns(root);
}

std::vector<uint64_t> signature(const GraphIndex& ix, const OwnsBuffer& owns) {
  std::vector<uint64_t> w;
  w.reserve(ix.size() * 24 + 2);
  w.push_back(ix.n_leafs());
  w.push_back(ix.size());
  const auto u32pair = [](uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; };
  for (size_t i = 0; i < ix.size(); ++i) {
    const Tensor& t = *ix.at(static_cast<int>(i));
    w.push_back(u32pair(static_cast<uint32_t>(t.type), static_cast<uint32_t>(t.op)));
    for (int d = 0; d < kMaxDims; ++d) w.push_back(static_cast<uint64_t>(t.ne[d]));
    for (int d = 0; d < kMaxDims; ++d) w.push_back(t.nb[d]);
    for (int p = 0; p < kMaxParams; p += 2) {
      w.push_back(u32pair(static_cast<uint32_t>(t.params[p]), static_cast<uint32_t>(t.params[p + 1])));
    }
    w.push_back(t.flags & (kFlagInput | kFlagOutput));
    for (const Tensor* s : t.src) w.push_back(static_cast<uint64_t>(ix.of(s) + 1));
    w.push_back(static_cast<uint64_t>(ix.of(t.view_src) + 1));
    w.push_back(t.view_offset);
    // Bytes the caller placed are part of the plan (the exec graphs read
    // them directly): the same tensor in the same place, or another plan.
    if (t.view_src == nullptr && caller_placed(t, owns)) {
      w.push_back(reinterpret_cast<uintptr_t>(&t));
      w.push_back(reinterpret_cast<uintptr_t>(t.buffer));
      w.push_back(t.offset);
    } else {
      w.push_back(0);
    }
  }
  return w;
}

uint64_t hash_words(const std::vector<uint64_t>& words) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t v : words) {  // splitmix-style mixing per word
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h;
}

std::string label(const GraphIndex& ix, int id) {
  const Tensor& t = *ix.at(id);
  const bool leaf = ix.is_leaf(id);
  std::string s =
      leaf ? "leaf " + std::to_string(id) : "node " + std::to_string(static_cast<size_t>(id) - ix.n_leafs());
  if (!leaf) s += std::string(" ") + name_of(t.op);
  return s + " " + describe(t);  // describe() names the tensor too
}

namespace {

// Applies the rules in order; see docs/architecture.md, "Scheduler".
class Assigner {
 public:
  Assigner(const GraphIndex& ix, const std::vector<Device*>& devices, const OwnsBuffer& owns)
      : ix_(ix), devices_(devices), owns_(owns), device_(ix.size(), -1) {}

  StatusOr<Assignment> run() {
    // Bytes the caller placed fix the device of what lives in them.
    for (size_t id = 0; id < ix_.size(); ++id) {
      const Tensor& t = *ix_.at(static_cast<int>(id));
      if (t.view_src == nullptr && caller_placed(t, owns_)) {
        TENSORPC_ASSIGN_OR_RETURN(device_[id], index_of(t.buffer->device(), t));
      }
    }
    for (size_t id = ix_.n_leafs(); id < ix_.size(); ++id) TENSORPC_RETURN_IF_ERROR(assign_node(static_cast<int>(id)));
    // Inputs nobody computes with go to the first device.
    for (size_t id = 0; id < ix_.n_leafs(); ++id) {
      if (device_[id] < 0) device_[id] = 0;
    }
    move_to_readers();
    // Views follow their bytes, to where those are now.
    for (size_t id = ix_.n_leafs(); id < ix_.size(); ++id) {
      if (is_pure_view(*ix_.at(static_cast<int>(id))))
        device_[id] = device_[static_cast<size_t>(ix_.root(static_cast<int>(id)))];
    }
    return Assignment{std::move(device_)};
  }

 private:
  StatusOr<int> index_of(const Device& d, const Tensor& t) const {
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i] == &d) return static_cast<int>(i);
    }
    return invalid_argument("scheduler: " + describe(t) + " lives on " + d.name() +
                            ", which is not in the scheduler's device list");
  }

  int device_of(const Tensor* s) const { return device_[static_cast<size_t>(ix_.root(ix_.of(s)))]; }

  Status assign_node(int id) {
    const Tensor& t = *ix_.at(id);
    const int root = ix_.root(id);
    if (is_pure_view(t)) {  // stays with its bytes; pending while those are an unclaimed input
      device_[static_cast<size_t>(id)] = device_[static_cast<size_t>(root)];
      return Status();
    }
    if (writes_in_place(t) && device_[static_cast<size_t>(root)] >= 0) {
      const int d = device_[static_cast<size_t>(root)];
      if (const Device& dev = *devices_[static_cast<size_t>(d)]; !dev.supports(t)) {
        // A server that cannot be reached says no to everything: its error is the reason.
        const std::string what = "scheduler: " + label(ix_, id) + " writes into bytes on " + dev.name();
        if (auto m = dev.memory(); !m.ok()) return m.status().with_context(what);
        return unsupported(what + ", which cannot compute it");
      }
      device_[static_cast<size_t>(id)] = d;
      return Status();
    }
    int d = -1;
    // Where its weights live: the first source whose bytes the caller placed.
    for (const Tensor* s : t.src) {
      if (s != nullptr && caller_placed(*s, owns_)) {
        d = device_of(s);
        break;
      }
    }
    // Else with its inputs: the one computed last. Following the freshest
    // data keeps a run going where the work is — a residual add after a
    // layer's attention stays on that layer's device instead of going back
    // to wherever the residual stream started.
    for (int latest = -1; const Tensor* s : t.src) {
      if (d >= 0 && latest < 0) break;  // weights decided it
      if (s == nullptr || device_of(s) < 0) continue;
      if (ix_.of(s) > latest) {
        latest = ix_.of(s);
        d = device_of(s);
      }
    }
    if (d < 0) d = 0;
    TENSORPC_ASSIGN_OR_RETURN(const int chosen, fallback(d, t, id));
    device_[static_cast<size_t>(id)] = chosen;
    // Inputs go to their first consumer (reading them directly or through a view).
    for (const Tensor* s : t.src) {
      if (s != nullptr && device_of(s) < 0) device_[static_cast<size_t>(ix_.root(ix_.of(s)))] = chosen;
    }
    if (writes_in_place(t)) device_[static_cast<size_t>(root)] = chosen;
    return Status();
  }

  // A node that reads nothing the caller placed, whose readers all run on
  // one other device that receives every tensor the node reads anyway, moves
  // there when the next node that computes runs there too: its result no
  // longer crosses, nothing new does, and no split is added (it joins the
  // start of the next). The norm that begins a layer on another device is
  // such a node: the residual it normalises crosses anyway, the normalised
  // copy no more. Backwards, so that a chain of such nodes moves together.
  void move_to_readers() {
    const size_t n = ix_.size();
    // Per tensor (by the root of its bytes): the computing nodes that read it.
    std::vector<std::vector<int>> readers(n);
    for (size_t id = ix_.n_leafs(); id < n; ++id) {
      const Tensor& t = *ix_.at(static_cast<int>(id));
      if (is_pure_view(t)) continue;
      for (const Tensor* s : t.src) {
        if (s != nullptr) readers[static_cast<size_t>(ix_.root(ix_.of(s)))].push_back(static_cast<int>(id));
      }
    }
    const auto at = [this](int id) { return device_[static_cast<size_t>(id)]; };
    int next_device = -1;  // of the next node that computes
    for (size_t id = n; id-- > ix_.n_leafs();) {
      const Tensor& t = *ix_.at(static_cast<int>(id));
      if (is_pure_view(t)) continue;
      const int here = at(static_cast<int>(id));
      const int to = next_device;
      next_device = here;
      if (to < 0 || to == here || writes_in_place(t) || (t.flags & kFlagOutput) != 0) continue;
      const std::vector<int>& mine = readers[id];
      if (mine.empty()) continue;
      // A source is already on `to`, or read there by a later node (whose
      // device is final by now); never bytes the caller placed.
      const auto there_anyway = [&](const Tensor* s) {
        if (s == nullptr) return true;
        if (caller_placed(*s, owns_)) return false;
        const int root = ix_.root(ix_.of(s));
        const std::vector<int>& theirs = readers[static_cast<size_t>(root)];
        return at(root) == to || std::any_of(theirs.begin(), theirs.end(),
                                             [&](int r) { return r > static_cast<int>(id) && at(r) == to; });
      };
      const bool moves = std::all_of(mine.begin(), mine.end(), [&](int r) { return at(r) == to; }) &&
                         std::all_of(t.src.begin(), t.src.end(), there_anyway);
      if (!moves || !devices_[static_cast<size_t>(to)]->supports(t)) continue;
      device_[id] = to;
      next_device = to;
    }
  }

  // d if it can run t; else the next device of the list that can; else the
  // first CPU that can.
  StatusOr<int> fallback(int d, const Tensor& t, int id) const {
    if (devices_[static_cast<size_t>(d)]->supports(t)) return d;
    for (size_t j = static_cast<size_t>(d) + 1; j < devices_.size(); ++j) {
      if (devices_[j]->supports(t)) return static_cast<int>(j);
    }
    for (size_t j = 0; j < devices_.size(); ++j) {
      if (devices_[j]->kind() == DeviceKind::cpu && devices_[j]->supports(t)) return static_cast<int>(j);
    }
    return unsupported("scheduler: no device can compute " + label(ix_, id));
  }

  const GraphIndex& ix_;
  const std::vector<Device*>& devices_;
  const OwnsBuffer& owns_;
  std::vector<int> device_;
};

}  // namespace

StatusOr<Assignment> assign_devices(const GraphIndex& ix, const std::vector<Device*>& devices, const OwnsBuffer& owns) {
  if (devices.empty()) return invalid_argument("scheduler: no devices");
  return Assigner(ix, devices, owns).run();
}

}  // namespace tensorpc::sched
