// Building a Plan from an assignment: splits, shadows, proxies, boundary
// copies and each device's planning graph (see scheduler_plan.h for what
// each descriptor is for). Owned by the backend layer.
#include "backend/scheduler_plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_set>

namespace tensorpc::sched {

void place_at(Tensor& t, const Tensor& base, uint64_t offset) {
  t.buffer = base.buffer;
  t.offset = base.offset + offset;
  t.data = base.data ? static_cast<char*>(base.data) + offset : nullptr;
}

namespace {

class PlanBuilder {
 public:
  PlanBuilder(const GraphIndex& ix, const Assignment& a, const std::vector<ExecutorId>& executors,
              const OwnsBuffer& owns)
      : ix_(ix),
        dev_(a.device),
        executors_(executors),
        owns_(owns),
        plan_(std::make_unique<Plan>()),
        owner_(ix.size(), nullptr),
        split_of_(ix.size(), -1) {}

  StatusOr<std::unique_ptr<Plan>> build() {
    make_inputs();
    make_splits();
    for (size_t s = 0; s < plan_->splits.size(); ++s) TENSORPC_RETURN_IF_ERROR(make_shadows(s));
    make_homes();
    make_memory();
    make_info();
    return std::move(plan_);
  }

 private:
  size_t device(int id) const { return static_cast<size_t>(dev_[static_cast<size_t>(id)]); }
  Tensor*& owner(int id) { return owner_[static_cast<size_t>(id)]; }

  // A descriptor of t's type and layout, op none, unplaced.
  Tensor* clone_leaf(const Tensor& t, const std::string& prefix) {
    Tensor* c = plan_->ctx.new_tensor(t.type, {1});
    c->ne = t.ne;
    c->nb = t.nb;
    c->flags = t.flags & kFlagInput;
    c->name = prefix + t.name;
    return c;
  }

  void own(size_t device, Tensor* real) { owned_[device].push_back(real); }

  // Inputs get a leaf of the plan's; weights are used as they are. Also
  // notes which tensors nodes write into.
  void make_inputs() {
    for (size_t id = ix_.n_leafs(); id < ix_.size(); ++id) {
      const Tensor& t = *ix_.at(static_cast<int>(id));
      if (writes_in_place(t)) written_.insert(ix_.root(ix_.of(t.view_src)));
    }
    for (size_t id = 0; id < ix_.n_leafs(); ++id) {
      Tensor* t = ix_.at(static_cast<int>(id));
      if (caller_placed(*t, owns_)) {
        owner(static_cast<int>(id)) = t;
      } else {
        owner(static_cast<int>(id)) = clone_leaf(*t, "");
        own(device(static_cast<int>(id)), owner(static_cast<int>(id)));
      }
    }
  }

  // Runs of consecutive computing nodes on one device; views do not cut them.
  void make_splits() {
    for (size_t id = ix_.n_leafs(); id < ix_.size(); ++id) {
      const Tensor& t = *ix_.at(static_cast<int>(id));
      if (is_pure_view(t)) continue;
      const size_t d = device(static_cast<int>(id));
      if (plan_->splits.empty() || plan_->splits.back().device != d) {
        plan_->splits.emplace_back().device = d;
        SchedulePlanInfo::Split info;
        info.device = d;
        info.first_node = id - ix_.n_leafs();
        plan_->info.splits.push_back(info);
        members_.emplace_back();
      }
      plan_->info.splits.back().last_node = id - ix_.n_leafs();
      plan_->info.splits.back().n_nodes++;
      members_.back().push_back(static_cast<int>(id));
      split_of_[id] = static_cast<int>(plan_->splits.size() - 1);
    }
  }

  // A leaf naming the bytes of id where they live (outside the split reading them).
  Tensor* proxy(int id) {
    auto it = proxies_.find(id);
    if (it != proxies_.end()) return it->second;
    const Tensor& t = *ix_.at(id);
    Tensor* p = clone_leaf(t, "proxy:");
    p->flags = 0;
    plan_->derived.push_back({p, owner(ix_.root(id)), t.view_src ? t.view_offset : 0});
    proxies_.emplace(id, p);
    return p;
  }

  // The bytes of id on device `to`, copied there before split s runs, once
  // per device: from another device of `to`'s server that has a copy already
  // (bytes nothing writes into after they were made), else from where they are.
  Tensor* copy(int id, size_t s) {
    const size_t to = plan_->splits[s].device;
    auto it = copies_.find({id, to});
    if (it != copies_.end()) return it->second;
    const Tensor& t = *ix_.at(id);
    const bool unchanging = !written_.count(ix_.root(id));
    Tensor* src = t.view_src == nullptr ? owner(id) : proxy(id);
    size_t from = device(ix_.root(id));
    bool before_run = unchanging && ix_.is_leaf(ix_.root(id));
    if (const auto sibling = copy_on_server_of(id, to); unchanging && sibling) {
      std::tie(src, from) = *sibling;
      before_run = false;
      copied_out_.insert(src);
    } else {
      copied_out_.insert(owner(ix_.root(id)));
    }
    Tensor* dst = clone_leaf(t, "copy:");
    dst->flags = 0;
    own(to, dst);
    plan_->copies.push_back({src, dst, from, to, before_run});
    plan_->splits[s].copies.push_back(plan_->copies.size() - 1);
    SchedulePlanInfo::Copy info;
    info.is_leaf = ix_.is_leaf(id);
    info.index = info.is_leaf ? static_cast<size_t>(id) : static_cast<size_t>(id) - ix_.n_leafs();
    info.tensor = label(ix_, id);
    info.from = from;
    info.to = to;
    info.bytes = t.nbytes();
    info.split = s;
    info.before_run = before_run;
    plan_->info.copies.push_back(info);
    plan_->info.splits[s].copies.push_back(plan_->info.copies.size() - 1);
    plan_->info.splits[s].copy_bytes += info.bytes;
    copies_.emplace(std::make_pair(id, to), dst);
    return dst;
  }

  // A copy of id already made to another device of the server `to` is on.
  std::optional<std::pair<Tensor*, size_t>> copy_on_server_of(int id, size_t to) const {
    for (auto it = copies_.lower_bound({id, 0}); it != copies_.end() && it->first.first == id; ++it) {
      if (it->first.second != to && executors_[it->first.second].same_server(executors_[to])) {
        return std::make_pair(it->second, it->first.second);
      }
    }
    return std::nullopt;
  }

  // What a node of split s reads for caller tensor id.
  Tensor* source(int id, size_t s, std::unordered_map<int, Tensor*>& local) {
    auto it = local.find(id);
    if (it != local.end()) return it->second;
    const Tensor& t = *ix_.at(id);
    const int root = ix_.root(id);
    if (is_pure_view(t) && split_of_[static_cast<size_t>(root)] == static_cast<int>(s)) {
      // A view of bytes this split computes: a view node of its own, so the
      // split's graph keeps the data flow (and a server can check the view).
      Tensor* v = plan_->ctx.new_tensor(t.type, {1});
      *v = t;
      v->buffer = nullptr;
      v->data = nullptr;
      v->src = {source(ix_.of(t.src[0]), s, local), nullptr, nullptr};
      v->view_src = source(root, s, local);
      plan_->derived.push_back({v, v->view_src, t.view_offset});
      local.emplace(id, v);
      return v;
    }
    if (device(root) != plan_->splits[s].device) return copy(id, s);
    Tensor* o = owner(id);
    if (t.view_src == nullptr && o != nullptr && o->op == Op::none) return o;  // a weight or an input
    return proxy(id);
  }

  Status make_shadows(size_t s) {
    Split& split = plan_->splits[s];
    std::unordered_map<int, Tensor*> local;
    for (int id : members_[s]) {
      Tensor& t = *ix_.at(id);
      Tensor* x = plan_->ctx.new_tensor(t.type, {1});
      *x = t;
      x->buffer = nullptr;
      x->data = nullptr;
      for (int k = 0; k < kMaxSources; ++k) x->src[k] = t.src[k] ? source(ix_.of(t.src[k]), s, local) : nullptr;
      if (writes_in_place(t)) {
        const int root = ix_.of(t.view_src);
        if (device(root) != split.device) {
          return internal_error("scheduler: " + label(ix_, id) + " writes into bytes on another device");
        }
        x->view_src = source(root, s, local);
        plan_->derived.push_back({x, x->view_src, t.view_offset});
      } else if (caller_placed(t, owns_)) {
        plan_->derived.push_back({x, &t, 0});  // the caller gave this node its bytes
      } else {
        own(split.device, x);
      }
      owner(id) = x;
      local.emplace(id, x);
      split.shadows.push_back(x);
    }
    for (Tensor* x : split.shadows) split.graph.expand(x);
    for (const Tensor* n : split.graph.nodes()) {
      if (n->op == Op::mul_mat && n->src[0] != nullptr) split.weight_bytes += n->src[0]->nbytes();
      // mul_mat_id reads only the chosen experts: at most k * T of the E.
      if (n->op == Op::mul_mat_id && n->src[0] != nullptr && n->src[0]->ne[2] > 0) {
        const auto experts = static_cast<uint64_t>(n->src[0]->ne[2]);
        const auto chosen = std::min(experts, static_cast<uint64_t>(n->ne[1] * n->ne[2]));
        split.weight_bytes += n->src[0]->nbytes() / experts * chosen;
      }
    }
    return Status();
  }

  // Where each caller tensor's bytes are, for binding a graph to this plan.
  void make_homes() {
    plan_->home.resize(ix_.size(), {nullptr, nullptr, 0});
    for (size_t id = 0; id < ix_.size(); ++id) {
      const Tensor& t = *ix_.at(static_cast<int>(id));
      if (t.view_src == nullptr && caller_placed(t, owns_)) continue;
      plan_->home[id] = {nullptr, owner(ix_.root(static_cast<int>(id))), t.view_src ? t.view_offset : 0};
    }
  }

  // The tensor whose bytes the scheduler owns behind descriptor e, or null.
  Tensor* owned_root(Tensor* e) const {
    while (e != nullptr) {
      if (planning_.count(e)) return e;
      auto it = base_.find(e);
      e = it == base_.end() ? nullptr : it->second;
    }
    return nullptr;
  }

  void make_memory() {
    for (const Derived& d : plan_->derived) base_.emplace(d.t, d.base);
    std::unordered_set<const Tensor*> keep(copied_out_.begin(), copied_out_.end());
    for (size_t id = 0; id < ix_.size(); ++id) {
      if (ix_.at(static_cast<int>(id))->flags & kFlagOutput) keep.insert(owner(ix_.root(static_cast<int>(id))));
    }
    for (auto& [device, reals] : owned_) {
      DeviceMemory& m = plan_->memory.emplace_back();
      m.device = device;
      for (Tensor* real : reals) {
        Tensor* p = plan_->ctx.new_tensor(real->type, {1});
        p->ne = real->ne;
        p->nb = real->nb;
        p->op = real->op;
        p->flags = (real->flags & kFlagInput) | (keep.count(real) ? uint32_t{kFlagOutput} : 0u);
        p->name = "plan:" + real->name;
        planning_.emplace(real, p);
        m.owned.emplace_back(p, real);
      }
      // Edges: what each owned node reads of this device's owned bytes.
      for (auto& [p, real] : m.owned) {
        if (real->op == Op::none) continue;
        for (int k = 0; k < kMaxSources; ++k) {
          Tensor* r = owned_root(real->src[k]);
          p->src[k] = r ? planning_.at(r) : nullptr;
        }
      }
      for (auto& [p, real] : m.owned) {
        if (p->op == Op::none) m.graph.expand(p);
      }
      for (const Split& split : plan_->splits) {
        if (split.device != device) continue;
        for (Tensor* x : split.shadows) {
          auto it = planning_.find(x);
          if (it != planning_.end()) {
            m.graph.expand(it->second);
          } else if (writes_in_place(*x)) {
            // Computes into bytes it does not own: in the planning graph a
            // view, so its source stays alive up to it.
            Tensor* p = plan_->ctx.new_tensor(x->type, {1});
            *p = *x;
            Tensor* r = owned_root(x->view_src);
            p->view_src = r ? planning_.at(r) : x->view_src;  // else a tensor the caller placed
            p->buffer = nullptr;
            p->data = nullptr;
            for (int k = 0; k < kMaxSources; ++k) {
              Tensor* sr = owned_root(x->src[k]);
              p->src[k] = sr ? planning_.at(sr) : nullptr;
            }
            m.graph.expand(p);
          }
        }
      }
    }
  }

  void make_info() {
    SchedulePlanInfo& info = plan_->info;
    for (size_t id = 0; id < ix_.size(); ++id) {
      (ix_.is_leaf(static_cast<int>(id)) ? info.leaf_device : info.node_device).push_back(dev_[id]);
      plan_->labels.push_back(label(ix_, static_cast<int>(id)));
    }
    // Server runs: a split on a server continues the run of the split
    // before it when that one is on the same server.
    const auto server_of = [&](size_t s) -> const ExecutorId& { return executors_[plan_->splits[s].device]; };
    for (size_t s = 0; s < plan_->splits.size(); ++s) {
      const ExecutorId& server = server_of(s);
      if (server.is_local()) continue;
      if (s > 0 && server_of(s - 1) == server) {
        info.server_runs.back().n_splits++;
      } else {
        info.server_runs.push_back({server.name(), s, 1});
      }
    }
  }

  const GraphIndex& ix_;
  const std::vector<int>& dev_;
  const std::vector<ExecutorId>& executors_;  // per device
  const OwnsBuffer& owns_;
  std::unique_ptr<Plan> plan_;
  std::vector<Tensor*> owner_;             // per id: the descriptor holding its bytes (non-views)
  std::vector<int> split_of_;              // per id: the split computing it, or -1
  std::vector<std::vector<int>> members_;  // per split: caller ids it computes
  std::unordered_map<int, Tensor*> proxies_;
  std::map<std::pair<int, size_t>, Tensor*> copies_;
  std::map<size_t, std::vector<Tensor*>> owned_;  // per device, in order of creation
  std::unordered_set<Tensor*> copied_out_;
  std::unordered_set<int> written_;                      // ids of tensors a node writes into (cpy, set_rows)
  std::unordered_map<const Tensor*, Tensor*> planning_;  // owned descriptor -> planning descriptor
  std::unordered_map<const Tensor*, Tensor*> base_;      // derived descriptor -> its base
};

}  // namespace

StatusOr<std::unique_ptr<Plan>> build_plan(const GraphIndex& ix, const Assignment& a,
                                           const std::vector<ExecutorId>& executors, const OwnsBuffer& owns) {
  return PlanBuilder(ix, a, executors, owns).build();
}

}  // namespace tensorpc::sched
