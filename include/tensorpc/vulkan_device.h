// The Vulkan device: a GPU (or lavapipe, Vulkan on the CPU) as a Device.
//
// Buffers are device-local memory, reached from the host by mapping it where
// the device offers host-visible device-local memory and through a staging
// buffer otherwise. A stream is a queue with a command buffer: a graph
// becomes one recorded command buffer of compute dispatches, with a pipeline
// barrier only before a node that touches bytes an earlier node of the
// graph wrote (or writes bytes one read). supports(node) is true only for the
// op, type and layout combinations the shaders implement (src/vulkan/vk_ops.cpp);
// a scheduler runs the rest elsewhere.
//
// Available only in builds with TENSORPC_VULKAN (TENSORPC_HAVE_VULKAN is then
// defined for programs that link tensorpc_vulkan).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensorpc/device.h"
#include "tensorpc/status.h"

namespace tensorpc {

// One physical device the Vulkan loader reports.
struct VulkanDeviceInfo {
  int index = 0;               // the N of `vulkan:N`
  std::string name;            // the device's name
  std::string driver;          // the driver's name and version
  MemoryInfo memory;           // as VulkanDevice::memory() would report it
  bool memory_budget = false;  // memory from VK_EXT_memory_budget (else see memory())
};

// Every physical device, in the loader's order; an error naming what is
// missing when there is no Vulkan driver.
StatusOr<std::vector<VulkanDeviceInfo>> vulkan_devices();

struct VulkanDeviceOptions {
  int index = 0;  // which physical device (vulkan_devices()[index])
  // Move every byte between host and device through a staging buffer even
  // where device memory can be mapped: the path a discrete GPU takes, for
  // tests on devices whose memory is host-visible.
  bool force_staging = false;
  // Use no subgroup operations, as on a device without them: the shaders'
  // portable paths, for tests on devices that have them.
  bool no_subgroup_ops = false;
  // The device's name; empty: `vulkan:N`. A server that opens one physical
  // device twice names the second opening apart.
  std::string name{};
  // Bytes this device may hold in buffers (its memory account, as a CPU
  // device's limit); 0: only the GPU's own. memory() reports at most it.
  uint64_t memory_limit = 0;
};

// Opens physical device options.index as a Device named `vulkan:N` (or
// options.name). Opening one physical device twice gives two devices, each
// with its own queue and buffers, as two GPUs would be. Its
// memory(): free and total bytes of its device-local heaps from
// VK_EXT_memory_budget where the driver has it; without it, the heaps' size
// and that size less the bytes this device allocated (other users of the
// GPU unseen), never a guess.
StatusOr<std::unique_ptr<Device>> open_vulkan_device(VulkanDeviceOptions options = {});

// What a Vulkan stream did with the graphs it computed: recorded them into a
// command buffer, or submitted again the one it had recorded for the same
// dispatches (a decode step's graph, run again, records nothing).
struct VulkanStreamCounters {
  uint64_t recorded = 0;
  uint64_t replayed = 0;
};

// The counters of `stream`; an error when it is not a Vulkan device's.
StatusOr<VulkanStreamCounters> vulkan_stream_counters(const Stream& stream);

inline constexpr int kEveryVulkanDevice = -1;

// Device `index` (kEveryVulkanDevice: every one vulkan_devices() lists), for
// a list of devices in which physical device N was opened `openings[N]`
// times so far (counted here): the first opening is named `vulkan:N`, the
// K-th `vulkan:N#K`. Each with `memory_limit` (0: none). An error names the
// device and what is missing.
StatusOr<std::vector<std::unique_ptr<Device>>> open_vulkan_devices(int index, uint64_t memory_limit,
                                                                   std::map<int, int>& openings);

}  // namespace tensorpc
