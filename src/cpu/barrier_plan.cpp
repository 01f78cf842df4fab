#include "cpu/barrier_plan.h"

#include <algorithm>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

struct ByteRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool overlaps(const ByteRange& o) const { return begin < o.end && o.begin < end; }
};

ByteRange bytes_of(const Tensor& t) {
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  return {begin, begin + t.nbytes()};
}

bool overlaps_any(const ByteRange& r, const std::vector<ByteRange>& set) {
  return std::any_of(set.begin(), set.end(), [&r](const ByteRange& o) { return r.overlaps(o); });
}

}  // namespace

std::vector<uint8_t> plan_barriers(const Graph& g) {
  const std::vector<Tensor*>& nodes = g.nodes();
  std::vector<uint8_t> wait(nodes.size(), 0);
  // What the nodes since the last barrier write and read, and their scratch.
  std::vector<ByteRange> written;
  std::vector<ByteRange> read;
  Scratch scratch = Scratch::none;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Tensor& n = *nodes[i];
    const OpEntry& entry = op_entry(n.op);
    if (entry.kernel == nullptr || n.nelements() == 0) continue;
    const ByteRange out = bytes_of(n);
    const Scratch uses = scratch_of(entry, n);
    bool hazard = overlaps_any(out, written) || overlaps_any(out, read);
    for (const Tensor* s : n.src) {
      if (s != nullptr && !hazard) hazard = overlaps_any(bytes_of(*s), written);
    }
    // Shared scratch is written by every thread and read by every thread;
    // per-thread scratch only by its own thread, which runs nodes in order.
    if (uses == Scratch::shared && scratch != Scratch::none) hazard = true;
    if (uses == Scratch::per_thread && scratch == Scratch::shared) hazard = true;
    if (hazard) {
      wait[i] = 1;
      written.clear();
      read.clear();
      scratch = Scratch::none;
    }
    written.push_back(out);
    for (const Tensor* s : n.src) {
      if (s != nullptr) read.push_back(bytes_of(*s));
    }
    scratch = std::max(scratch, uses);
  }
  return wait;
}

}  // namespace tensorpc::cpu
