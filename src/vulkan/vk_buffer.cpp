// VulkanBuffer: set and get through the mapping of host-visible device
// memory, or through the device's staging buffer; clear and copy as
// transfer commands.
#include "vulkan/vk_buffer.h"

#include <cstring>

namespace tensorpc::vulkan {

VulkanBuffer::VulkanBuffer(VulkanDevice& device, MemoryBlock block, uint64_t size, bool mapped_access)
    : device_(device),
      block_(std::move(block)),
      size_(size),
      id_(device.next_buffer_id()),
      mapped_access_(mapped_access) {}

VulkanBuffer::~VulkanBuffer() { device_.release(block_.size()); }

Status VulkanBuffer::set(const Tensor& t, const void* src, uint64_t offset, uint64_t size) {
  TENSORPC_RETURN_IF_ERROR(check_range(t, offset, size, "set"));
  if (size == 0) return Status();
  if (mapped_access_) {
    std::memcpy(block_.mapped() + t.offset + offset, src, size);
    return Status();
  }
  return device_.upload(block_, t.offset + offset, src, size);
}

Status VulkanBuffer::get(const Tensor& t, void* dst, uint64_t offset, uint64_t size) const {
  TENSORPC_RETURN_IF_ERROR(check_range(t, offset, size, "get"));
  if (size == 0) return Status();
  if (mapped_access_) {
    std::memcpy(dst, block_.mapped() + t.offset + offset, size);
    return Status();
  }
  return device_.download(block_, t.offset + offset, dst, size);
}

Status VulkanBuffer::clear(uint8_t value) {
  const uint32_t word = value * 0x01010101u;
  return device_.run_now([&](VkCommandBuffer cmd) { vkCmdFillBuffer(cmd, block_.buffer(), 0, VK_WHOLE_SIZE, word); });
}

Status VulkanBuffer::copy(const Tensor& src, const Tensor& dst) {
  TENSORPC_RETURN_IF_ERROR(check_range(dst, 0, dst.nbytes(), "copy"));
  if (src.nbytes() != dst.nbytes()) {
    return invalid_argument("copy: " + describe(src) + " and " + describe(dst) + " differ in size");
  }
  const auto* from = dynamic_cast<const VulkanBuffer*>(src.buffer);
  if (from != nullptr && &from->device_ == &device_) {
    TENSORPC_RETURN_IF_ERROR(from->check_range(src, 0, src.nbytes(), "copy"));
    if (dst.nbytes() == 0) return Status();
    const VkBufferCopy region{src.offset, dst.offset, dst.nbytes()};
    return device_.run_now([&](VkCommandBuffer cmd) { vkCmdCopyBuffer(cmd, from->handle(), handle(), 1, &region); });
  }
  if (src.data != nullptr) return set(dst, src.data, 0, dst.nbytes());
  return unsupported("copy: the source " + describe(src) + " is neither on " + device_.name() + " nor in host memory");
}

}  // namespace tensorpc::vulkan
