// The Vulkan instance and what the device needs to know of a physical device
// before opening it: names, the compute queue, memory heaps, limits.
#pragma once

#include <vulkan/vulkan.h>

#include <memory>
#include <string>
#include <vector>

#include "tensorpc/device.h"
#include "tensorpc/status.h"

namespace tensorpc::vulkan {

// A Vulkan struct of type T, zeroed but for its sType.
template <typename T>
T vk_struct(VkStructureType type) {
  T t{};
  t.sType = type;
  return t;
}

// A Status for a failed Vulkan call: `what` and the result's name.
Status vk_error(VkResult result, const std::string& what);

// Returns vk_error(result, what) from the enclosing function when it failed.
#define TENSORPC_VK_RETURN_IF_ERROR(call, what)                                                            \
  do {                                                                                                     \
    const VkResult tensorpc_vk_result_ = (call);                                                           \
    if (tensorpc_vk_result_ != VK_SUCCESS) return ::tensorpc::vulkan::vk_error(tensorpc_vk_result_, what); \
  } while (0)

// Owns a VkInstance; devices opened from it keep it alive (shared_ptr).
class Instance {
 public:
  // An error naming what is missing when the loader finds no driver.
  static StatusOr<std::shared_ptr<Instance>> create();
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  // At least one; an error naming what is missing when there is none.
  StatusOr<std::vector<VkPhysicalDevice>> physical_devices() const;

 private:
  explicit Instance(VkInstance instance) : instance_(instance) {}
  VkInstance instance_;
};

struct PhysicalDeviceFacts {
  std::string name;
  std::string driver;
  std::string type;  // "discrete GPU", "integrated GPU", "CPU", …
  int compute_queue_family = -1;
  bool memory_budget = false;  // VK_EXT_memory_budget
  bool storage_16bit = false;  // f16 in storage buffers
  bool subgroup_shuffle = false;  // compute shaders' subgroups have the basic and shuffle operations
  VkPhysicalDeviceLimits limits{};
  uint64_t max_memory_allocation = 0;  // maintenance3
  uint64_t device_local_bytes = 0;     // the device-local heaps' sizes
};

StatusOr<PhysicalDeviceFacts> facts_of(VkPhysicalDevice physical);

// Free and total bytes of the device-local heaps: the driver's budget where
// VK_EXT_memory_budget is there, else their size less `allocated_here`.
MemoryInfo device_local_memory(VkPhysicalDevice physical, const PhysicalDeviceFacts& facts, uint64_t allocated_here);

}  // namespace tensorpc::vulkan
