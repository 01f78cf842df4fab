#include "tensorpc/graph_allocator.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace tensorpc {
namespace {

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// The tensor whose bytes t uses.
Tensor* root_of(Tensor* t) { return t->view_src ? t->view_src : t; }

// Free ranges of the buffer being planned, sorted by offset, coalesced.
class FreeList {
 public:
  uint64_t take(uint64_t size) {
    size_t best = blocks_.size();
    for (size_t i = 0; i < blocks_.size(); ++i) {
      if (blocks_[i].size >= size && (best == blocks_.size() || blocks_[i].size < blocks_[best].size)) best = i;
    }
    if (best != blocks_.size()) {
      const uint64_t offset = blocks_[best].offset;
      blocks_[best].offset += size;
      blocks_[best].size -= size;
      if (blocks_[best].size == 0) blocks_.erase(blocks_.begin() + static_cast<ptrdiff_t>(best));
      return offset;
    }
    // Grow at the top, starting inside a free block that ends there.
    uint64_t offset = top_;
    if (!blocks_.empty() && blocks_.back().offset + blocks_.back().size == top_) {
      offset = blocks_.back().offset;
      blocks_.pop_back();
    }
    top_ = offset + size;
    return offset;
  }

  void give_back(uint64_t offset, uint64_t size) {
    auto it = std::lower_bound(blocks_.begin(), blocks_.end(), offset,
                               [](const Block& b, uint64_t off) { return b.offset < off; });
    it = blocks_.insert(it, {offset, size});
    auto next = it + 1;
    if (next != blocks_.end() && it->offset + it->size == next->offset) {
      it->size += next->size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = it - 1;
      if (prev->offset + prev->size == it->offset) {
        prev->size += it->size;
        blocks_.erase(it);
      }
    }
  }

  uint64_t top() const { return top_; }

 private:
  struct Block {
    uint64_t offset;
    uint64_t size;
  };
  std::vector<Block> blocks_;
  uint64_t top_ = 0;
};

}  // namespace

MemoryPlan plan_memory(const Graph& g, uint64_t alignment) {
  constexpr size_t kForever = std::numeric_limits<size_t>::max();
  MemoryPlan plan;
  FreeList free_list;
  std::unordered_map<const Tensor*, size_t> last_use;
  std::unordered_map<const Tensor*, uint64_t> offsets;

  const auto needs_memory = [](const Tensor* t) { return t->buffer == nullptr && t->view_src == nullptr; };
  const auto allocate = [&](Tensor* t) {
    const uint64_t size = align_up(std::max<uint64_t>(t->nbytes(), 1), alignment);
    const uint64_t offset = free_list.take(size);
    offsets[t] = offset;
    plan.placements.push_back({t, offset});
    plan.sum_of_sizes += size;
  };

  // Liveness: the last node index that reads each owner of bytes.
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor* n = nodes[i];
    for (Tensor* s : n->src) {
      if (s) last_use[root_of(s)] = std::max(last_use[root_of(s)], i);
    }
    if (n->view_src) last_use[n->view_src] = std::max(last_use[n->view_src], i);
    if (n->flags & (kFlagOutput | kFlagInput)) last_use[root_of(n)] = kForever;
  }

  // Leaves without a buffer are inputs: alive for the whole graph.
  for (Tensor* leaf : g.leafs()) {
    if (needs_memory(leaf)) allocate(leaf);
  }

  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor* n = nodes[i];
    if (needs_memory(n)) allocate(n);
    // Release what this node was the last to read. A tensor nobody reads
    // (a dead end of the graph) is released right after it is computed.
    Tensor* candidates[kMaxSources + 2] = {n->src[0], n->src[1], n->src[2], n->view_src, n};
    for (Tensor* c : candidates) {
      if (c == nullptr) continue;
      Tensor* r = root_of(c);
      auto off = offsets.find(r);
      if (off == offsets.end()) continue;  // placed elsewhere, or already released
      auto lu = last_use.find(r);
      const size_t last = lu == last_use.end() ? i : lu->second;
      if (last == i && !(r->flags & (kFlagOutput | kFlagInput)) && r->op != Op::none) {
        free_list.give_back(off->second, align_up(std::max<uint64_t>(r->nbytes(), 1), alignment));
        offsets.erase(off);
      }
    }
  }
  plan.peak = free_list.top();
  return plan;
}

Status GraphAllocator::allocate(Graph& g) {
  // Tensors placed here by an earlier call are planned afresh.
  const auto unplace = [this](Tensor* t) {
    if (buffer_ && t->buffer == buffer_.get()) {
      t->buffer = nullptr;
      t->data = nullptr;
      t->offset = 0;
    }
  };
  for (Tensor* t : g.leafs()) unplace(t);
  for (Tensor* t : g.nodes()) unplace(t);
  plan_ = plan_memory(g, device_.alignment());
  if (!buffer_ || buffer_->size() < plan_.peak) {
    // A buffer that has to grow grows by half again at least: graphs that
    // grow a little each time (a decode step's attention, one KV entry
    // longer) then reallocate now and then, not at every step — on a remote
    // device each reallocation is a round trip and the plans and grants
    // naming the old buffer are made again.
    const uint64_t need = std::max<uint64_t>(plan_.peak, 1);
    const uint64_t roomy = buffer_ ? std::max(need, buffer_->size() + buffer_->size() / 2) : need;
    buffer_.reset();  // release the old one first: the device may be tight on memory
    auto buffer = device_.allocate(roomy);
    if (!buffer.ok() && roomy > need) buffer = device_.allocate(need);
    if (!buffer.ok()) return buffer.status().with_context("graph allocator");
    buffer_ = std::move(buffer).value();
  }
  for (const auto& p : plan_.placements) TENSORPC_RETURN_IF_ERROR(buffer_->place(*p.tensor, p.offset));
  for (Tensor* n : g.nodes()) {
    if (n->view_src) TENSORPC_RETURN_IF_ERROR(Buffer::place_view(*n));
  }
  return Status();
}

}  // namespace tensorpc
