// Graph memory planning: places every tensor a graph computes into one
// buffer, reusing the bytes of tensors that are no longer needed.
//
// A tensor is live from the node that computes it to the last node that reads
// it (directly or through a view). Outputs (kFlagOutput) and inputs
// (kFlagInput) are never reused. Leaves that already have a buffer (weights)
// and views take no space. Offsets are chosen best-fit from a free list, so
// the peak is usually far below the sum of sizes.
#pragma once

#include <memory>
#include <vector>

#include "tensorpc/device.h"
#include "tensorpc/graph.h"

namespace tensorpc {

struct MemoryPlan {
  struct Placement {
    Tensor* tensor;
    uint64_t offset;
  };
  std::vector<Placement> placements;
  uint64_t peak = 0;          // bytes the buffer needs
  uint64_t sum_of_sizes = 0;  // bytes without reuse, for comparison
};

// Plans g's memory with offsets aligned to `alignment`. Pure: touches no tensor.
MemoryPlan plan_memory(const Graph& g, uint64_t alignment);

// Owns one buffer on a device that grows as needed (by half again at least,
// or exactly as needed when that does not fit), and places graphs in it.
class GraphAllocator {
 public:
  explicit GraphAllocator(Device& device) : device_(device) {}

  // Plans g, (re)allocates the buffer if it is too small, and places every
  // planned tensor and every view. Tensors of an earlier graph placed here
  // become invalid.
  Status allocate(Graph& g);

  Buffer* buffer() const { return buffer_.get(); }
  const MemoryPlan& last_plan() const { return plan_; }

 private:
  Device& device_;
  std::unique_ptr<Buffer> buffer_;
  MemoryPlan plan_;
};

}  // namespace tensorpc
