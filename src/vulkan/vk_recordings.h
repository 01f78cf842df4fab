// Recordings: the command buffers a Vulkan stream recorded, each with the
// descriptor sets its dispatches bind, kept so that a graph run again with
// the same dispatches (a decode step's graph: the same tensors in the same
// places) is submitted again instead of recorded again.
//
// A recording is keyed by everything it holds: for each dispatch its
// pipeline, its buffers (by VulkanBuffer::id, never reused, so a buffer freed
// and another allocated at the same handle records anew), their offsets and
// ranges, its push constants and group counts, and whether a barrier goes
// before it. Any change records anew. The least recently used recording goes
// once there are more than a few.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <vector>

#include "core/lru.h"
#include "tensorpc/status.h"
#include "vulkan/vk_ops.h"

namespace tensorpc::vulkan {

class VulkanDevice;

// One dispatch of a graph, and whether a barrier goes before it.
struct Step {
  Dispatch dispatch;
  bool barrier = false;
};

class Recordings {
 public:
  // Command buffers come from `pool` (which must allow resetting them).
  Recordings(VulkanDevice& device, VkCommandPool pool) : device_(device), pool_(pool) {}
  ~Recordings();
  Recordings(const Recordings&) = delete;
  Recordings& operator=(const Recordings&) = delete;

  // The command buffer of `steps`: the recording of the same steps, or a new
  // one. No command buffer of this store may be in flight.
  StatusOr<VkCommandBuffer> command_buffer(const std::vector<Step>& steps);

  uint64_t recorded() const { return recorded_; }
  uint64_t replayed() const { return replayed_; }

  // Recordings kept; the decode step, a prefill and the splits around them.
  static constexpr size_t kCapacity = 8;

 private:
  struct Recording {
    std::vector<uint64_t> key;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkDescriptorPool descriptors = VK_NULL_HANDLE;
  };

  StatusOr<Recording> record(const std::vector<Step>& steps, std::vector<uint64_t> key);
  Status record_dispatch(VkCommandBuffer cmd, VkDescriptorPool descriptors, const Dispatch& d);
  void destroy(Recording& r);

  VulkanDevice& device_;
  VkCommandPool pool_;
  LruStore<uint64_t, Recording> store_;  // by a hash of the key
  uint64_t recorded_ = 0;
  uint64_t replayed_ = 0;
};

}  // namespace tensorpc::vulkan
