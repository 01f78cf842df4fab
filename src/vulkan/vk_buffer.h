// VulkanBuffer: device-local memory for tensors, and the stream's access to
// the VkBuffer behind a tensor.
#pragma once

#include "vulkan/vk_device.h"

namespace tensorpc::vulkan {

class VulkanBuffer final : public Buffer {
 public:
  VulkanBuffer(VulkanDevice& device, MemoryBlock block, uint64_t size, bool mapped_access);
  ~VulkanBuffer() override;

  Device& device() const override { return device_; }
  uint64_t size() const override { return size_; }
  Status set(const Tensor& t, const void* src, uint64_t offset, uint64_t size) override;
  Status get(const Tensor& t, void* dst, uint64_t offset, uint64_t size) const override;
  Status clear(uint8_t value) override;
  Status copy(const Tensor& src, const Tensor& dst) override;

  VkBuffer handle() const { return block_.buffer(); }
  // Names this buffer among every buffer of its device, before and after: a
  // handle may be reused once freed, an id never is.
  uint64_t id() const { return id_; }

 private:
  VulkanDevice& device_;
  MemoryBlock block_;
  uint64_t size_;
  uint64_t id_;
  bool mapped_access_;  // set/get through the mapping, not the staging buffer
};

// The stream of a VulkanDevice (vk_stream.cpp).
StatusOr<std::unique_ptr<Stream>> make_stream(VulkanDevice& device);

}  // namespace tensorpc::vulkan
