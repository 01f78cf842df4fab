// VulkanDevice: one logical device on one physical device, with its compute
// queue, its pipelines, and the host <-> device transfers its buffers use.
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tensorpc/vulkan_device.h"
#include "vulkan/vk_instance.h"
#include "vulkan/vk_ops.h"

namespace tensorpc::vulkan {

class Pipelines;

// A VkBuffer bound to memory of its own, unmapped on destruction.
class MemoryBlock {
 public:
  MemoryBlock() = default;
  MemoryBlock(VkDevice device, VkBuffer buffer, VkDeviceMemory memory, void* mapped, uint64_t size)
      : device_(device), buffer_(buffer), memory_(memory), mapped_(mapped), size_(size) {}
  MemoryBlock(MemoryBlock&& o) noexcept { *this = std::move(o); }
  MemoryBlock& operator=(MemoryBlock&& o) noexcept;
  ~MemoryBlock() { reset(); }

  VkBuffer buffer() const { return buffer_; }
  char* mapped() const { return static_cast<char*>(mapped_); }  // null: not host-visible
  uint64_t size() const { return size_; }

 private:
  void reset();
  VkDevice device_ = VK_NULL_HANDLE;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  void* mapped_ = nullptr;
  uint64_t size_ = 0;
};

class VulkanDevice final : public Device {
 public:
  static StatusOr<std::unique_ptr<VulkanDevice>> open(const VulkanDeviceOptions& options);
  ~VulkanDevice() override;

  std::string name() const override { return name_; }
  std::string description() const override;
  DeviceKind kind() const override { return DeviceKind::gpu; }
  StatusOr<MemoryInfo> memory() const override;
  uint64_t alignment() const override;
  uint64_t max_allocation() const override;
  bool supports(const Tensor& node) const override { return vulkan::supports(node, limits_); }

  StatusOr<std::unique_ptr<Buffer>> allocate(uint64_t size) override;
  StatusOr<std::unique_ptr<Stream>> create_stream() override;

  VkDevice handle() const { return device_; }
  uint32_t queue_family() const { return static_cast<uint32_t>(facts_.compute_queue_family); }
  const OpLimits& limits() const { return limits_; }
  Pipelines& pipelines() { return *pipelines_; }

  // Submits cmd to the queue (one submitter at a time), signalling fence.
  Status submit(VkCommandBuffer cmd, VkFence fence);
  // Records commands with `record`, runs them and waits: the transfers of
  // buffers (clear, copy, staging).
  Status run_now(const std::function<void(VkCommandBuffer)>& record);
  // Host bytes to and from a device-local block through the staging buffer.
  Status upload(const MemoryBlock& dst, uint64_t offset, const void* src, uint64_t size);
  Status download(const MemoryBlock& src, uint64_t offset, void* dst, uint64_t size);

  // A buffer of `size` bytes: host-visible memory (mapped) when `host` says
  // so, else device-local memory, mapped when the device offers it host-visible.
  StatusOr<MemoryBlock> allocate_block(uint64_t size, bool host);
  void release(uint64_t bytes) { allocated_ -= bytes; }
  // A new VulkanBuffer's id (VulkanBuffer::id).
  uint64_t next_buffer_id() { return ++buffer_ids_; }

 private:
  VulkanDevice() = default;
  Status init(const VulkanDeviceOptions& options);
  Status run_locked(const std::function<void(VkCommandBuffer)>& record);  // transfer_mutex_ held

  std::shared_ptr<Instance> instance_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  PhysicalDeviceFacts facts_;
  OpLimits limits_;
  std::string name_;
  bool force_staging_ = false;
  uint64_t memory_limit_ = 0;  // 0: none
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::mutex queue_mutex_;
  std::unique_ptr<Pipelines> pipelines_;
  std::atomic<uint64_t> allocated_{0};
  std::atomic<uint64_t> buffer_ids_{0};

  // The transfers' command buffer, fence and staging buffer, one transfer at a time.
  std::mutex transfer_mutex_;
  VkCommandPool transfer_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer transfer_cmd_ = VK_NULL_HANDLE;
  VkFence transfer_fence_ = VK_NULL_HANDLE;
  MemoryBlock staging_;
};

}  // namespace tensorpc::vulkan
