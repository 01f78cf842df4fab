// VulkanDevice: opening a physical device, its memory, and the transfers
// (one-off command buffers, the staging buffer) its buffers use.
#include "vulkan/vk_device.h"

#include <algorithm>
#include <cstring>

#include "core/format.h"
#include "vulkan/vk_buffer.h"
#include "vulkan/vk_pipelines.h"

namespace tensorpc::vulkan {
namespace {

constexpr uint64_t kStagingBytes = uint64_t{16} << 20;  // a transfer larger than this goes in pieces

// The first memory type of `type_bits` with every flag of `want`, or -1.
int memory_type(VkPhysicalDevice physical, uint32_t type_bits, VkMemoryPropertyFlags want) {
  VkPhysicalDeviceMemoryProperties memory;
  vkGetPhysicalDeviceMemoryProperties(physical, &memory);
  for (uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
    if ((type_bits & (1u << i)) && (memory.memoryTypes[i].propertyFlags & want) == want) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

MemoryBlock& MemoryBlock::operator=(MemoryBlock&& o) noexcept {
  if (this != &o) {
    reset();
    std::swap(device_, o.device_);
    std::swap(buffer_, o.buffer_);
    std::swap(memory_, o.memory_);
    std::swap(mapped_, o.mapped_);
    std::swap(size_, o.size_);
  }
  return *this;
}

void MemoryBlock::reset() {
  if (device_ == VK_NULL_HANDLE) return;
  vkDestroyBuffer(device_, buffer_, nullptr);
  if (mapped_) vkUnmapMemory(device_, memory_);
  vkFreeMemory(device_, memory_, nullptr);
  device_ = VK_NULL_HANDLE;
}

StatusOr<std::unique_ptr<VulkanDevice>> VulkanDevice::open(const VulkanDeviceOptions& options) {
  std::unique_ptr<VulkanDevice> d(new VulkanDevice());
  TENSORPC_RETURN_IF_ERROR(d->init(options));
  return d;
}

Status VulkanDevice::init(const VulkanDeviceOptions& options) {
  name_ = options.name.empty() ? "vulkan:" + std::to_string(options.index) : options.name;
  force_staging_ = options.force_staging;
  memory_limit_ = options.memory_limit;
  TENSORPC_ASSIGN_OR_RETURN(instance_, Instance::create());
  TENSORPC_ASSIGN_OR_RETURN(auto physical, instance_->physical_devices());
  if (options.index < 0 || static_cast<size_t>(options.index) >= physical.size()) {
    return not_found(name_ + ": there are " + std::to_string(physical.size()) + " Vulkan devices");
  }
  physical_ = physical[static_cast<size_t>(options.index)];
  TENSORPC_ASSIGN_OR_RETURN(facts_, facts_of(physical_));
  limits_.max_storage_range = facts_.limits.maxStorageBufferRange;
  limits_.storage_alignment = std::max<uint64_t>(facts_.limits.minStorageBufferOffsetAlignment, 4);
  for (int i = 0; i < 3; ++i) limits_.max_groups[i] = facts_.limits.maxComputeWorkGroupCount[i];
  limits_.f16 = facts_.storage_16bit;
  limits_.subgroup_shuffle = facts_.subgroup_shuffle && !options.no_subgroup_ops;

  const float priority = 1.0f;
  auto queue_info = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  queue_info.queueFamilyIndex = queue_family();
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  auto storage16 =
      vk_struct<VkPhysicalDevice16BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
  storage16.storageBuffer16BitAccess = facts_.storage_16bit ? VK_TRUE : VK_FALSE;
  std::vector<const char*> extensions;
  if (facts_.memory_budget) extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  auto info = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  info.pNext = &storage16;
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue_info;
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  TENSORPC_VK_RETURN_IF_ERROR(vkCreateDevice(physical_, &info, nullptr, &device_), name_ + ": vkCreateDevice");
  vkGetDeviceQueue(device_, queue_family(), 0, &queue_);
  TENSORPC_ASSIGN_OR_RETURN(pipelines_, Pipelines::create(device_));

  auto pool_info = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = queue_family();
  TENSORPC_VK_RETURN_IF_ERROR(vkCreateCommandPool(device_, &pool_info, nullptr, &transfer_pool_),
                              "vkCreateCommandPool");
  auto cmd_info = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  cmd_info.commandPool = transfer_pool_;
  cmd_info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cmd_info.commandBufferCount = 1;
  TENSORPC_VK_RETURN_IF_ERROR(vkAllocateCommandBuffers(device_, &cmd_info, &transfer_cmd_), "vkAllocateCommandBuffers");
  auto fence_info = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  TENSORPC_VK_RETURN_IF_ERROR(vkCreateFence(device_, &fence_info, nullptr, &transfer_fence_), "vkCreateFence");
  return Status();
}

VulkanDevice::~VulkanDevice() {
  if (device_ == VK_NULL_HANDLE) return;
  vkDeviceWaitIdle(device_);
  staging_ = MemoryBlock();
  pipelines_.reset();
  if (transfer_fence_) vkDestroyFence(device_, transfer_fence_, nullptr);
  if (transfer_pool_) vkDestroyCommandPool(device_, transfer_pool_, nullptr);
  vkDestroyDevice(device_, nullptr);
}

std::string VulkanDevice::description() const {
  return facts_.name + " (" + facts_.type + "), driver " + facts_.driver;
}

StatusOr<MemoryInfo> VulkanDevice::memory() const {
  const uint64_t allocated = allocated_.load();
  MemoryInfo info = device_local_memory(physical_, facts_, allocated);
  if (memory_limit_ != 0) {
    info.total = std::min(info.total, memory_limit_);
    info.free = std::min(info.free, memory_limit_ > allocated ? memory_limit_ - allocated : 0);
  }
  return info;
}

uint64_t VulkanDevice::alignment() const { return std::max<uint64_t>(limits_.storage_alignment, 32); }

uint64_t VulkanDevice::max_allocation() const {
  return std::min(facts_.max_memory_allocation, facts_.device_local_bytes);
}

StatusOr<MemoryBlock> VulkanDevice::allocate_block(uint64_t size, bool host) {
  auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.size = size;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  TENSORPC_VK_RETURN_IF_ERROR(vkCreateBuffer(device_, &info, nullptr, &buffer), name_ + ": vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, buffer, &req);
  constexpr VkMemoryPropertyFlags kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  int type = host ? memory_type(physical_, req.memoryTypeBits, kHost | VK_MEMORY_PROPERTY_HOST_CACHED_BIT) : -1;
  if (host && type < 0) type = memory_type(physical_, req.memoryTypeBits, kHost);
  if (!host) {
    type = memory_type(physical_, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | kHost);
    if (type < 0) type = memory_type(physical_, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  }
  if (type < 0) {
    vkDestroyBuffer(device_, buffer, nullptr);
    return unsupported(name_ + ": no memory type for a buffer");
  }
  auto alloc = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = static_cast<uint32_t>(type);
  VkDeviceMemory memory = VK_NULL_HANDLE;
  const VkResult r = vkAllocateMemory(device_, &alloc, nullptr, &memory);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(device_, buffer, nullptr);
    return vk_error(r, name_ + ": cannot allocate " + format_bytes(size));
  }
  vkBindBufferMemory(device_, buffer, memory, 0);
  VkPhysicalDeviceMemoryProperties props;
  vkGetPhysicalDeviceMemoryProperties(physical_, &props);
  void* mapped = nullptr;
  if (props.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
    vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &mapped);
  }
  return MemoryBlock(device_, buffer, memory, mapped, size);
}

StatusOr<std::unique_ptr<Buffer>> VulkanDevice::allocate(uint64_t size) {
  const uint64_t rounded = (std::max<uint64_t>(size, 1) + alignment() - 1) / alignment() * alignment();
  if (rounded < size || rounded > max_allocation()) {
    return out_of_memory(name_ + ": " + format_bytes(size) + " is more than one allocation may take (" +
                         format_bytes(max_allocation()) + ")");
  }
  // Counted before it is made, so that two allocations at once cannot both pass the limit.
  const uint64_t before = allocated_.fetch_add(rounded);
  if (memory_limit_ != 0 && before + rounded > memory_limit_) {
    allocated_ -= rounded;
    return out_of_memory(name_ + ": " + format_bytes(size) + " more would pass its memory limit of " +
                         format_bytes(memory_limit_) + " (" + format_bytes(before) + " in use)");
  }
  auto block = allocate_block(rounded, /*host=*/false);
  if (!block.ok()) {
    allocated_ -= rounded;
    return block.status();
  }
  const bool mapped = block.value().mapped() != nullptr && !force_staging_;
  return std::unique_ptr<Buffer>(std::make_unique<VulkanBuffer>(*this, std::move(block).value(), size, mapped));
}

StatusOr<std::unique_ptr<Stream>> VulkanDevice::create_stream() { return make_stream(*this); }

Status VulkanDevice::submit(VkCommandBuffer cmd, VkFence fence) {
  auto submit = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cmd;
  std::lock_guard<std::mutex> lock(queue_mutex_);
  TENSORPC_VK_RETURN_IF_ERROR(vkQueueSubmit(queue_, 1, &submit, fence), name_ + ": vkQueueSubmit");
  return Status();
}

Status VulkanDevice::run_now(const std::function<void(VkCommandBuffer)>& record) {
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  return run_locked(record);
}

Status VulkanDevice::run_locked(const std::function<void(VkCommandBuffer)>& record) {
  auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  TENSORPC_VK_RETURN_IF_ERROR(vkBeginCommandBuffer(transfer_cmd_, &begin), "vkBeginCommandBuffer");
  record(transfer_cmd_);
  TENSORPC_VK_RETURN_IF_ERROR(vkEndCommandBuffer(transfer_cmd_), "vkEndCommandBuffer");
  TENSORPC_RETURN_IF_ERROR(submit(transfer_cmd_, transfer_fence_));
  const VkResult r = vkWaitForFences(device_, 1, &transfer_fence_, VK_TRUE, UINT64_MAX);
  vkResetFences(device_, 1, &transfer_fence_);
  TENSORPC_VK_RETURN_IF_ERROR(r, name_ + ": vkWaitForFences");
  return Status();
}

Status VulkanDevice::upload(const MemoryBlock& dst, uint64_t offset, const void* src, uint64_t size) {
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  if (staging_.buffer() == VK_NULL_HANDLE) {
    TENSORPC_ASSIGN_OR_RETURN(staging_, allocate_block(kStagingBytes, true));
  }
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(size - done, kStagingBytes);
    std::memcpy(staging_.mapped(), static_cast<const char*>(src) + done, n);
    const VkBufferCopy region{0, offset + done, n};
    TENSORPC_RETURN_IF_ERROR(
        run_locked([&](VkCommandBuffer cmd) { vkCmdCopyBuffer(cmd, staging_.buffer(), dst.buffer(), 1, &region); }));
    done += n;
  }
  return Status();
}

Status VulkanDevice::download(const MemoryBlock& src, uint64_t offset, void* dst, uint64_t size) {
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  if (staging_.buffer() == VK_NULL_HANDLE) {
    TENSORPC_ASSIGN_OR_RETURN(staging_, allocate_block(kStagingBytes, true));
  }
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(size - done, kStagingBytes);
    const VkBufferCopy region{offset + done, 0, n};
    TENSORPC_RETURN_IF_ERROR(
        run_locked([&](VkCommandBuffer cmd) { vkCmdCopyBuffer(cmd, src.buffer(), staging_.buffer(), 1, &region); }));
    std::memcpy(static_cast<char*>(dst) + done, staging_.mapped(), n);
    done += n;
  }
  return Status();
}

}  // namespace tensorpc::vulkan

namespace tensorpc {

StatusOr<std::unique_ptr<Device>> open_vulkan_device(VulkanDeviceOptions options) {
  TENSORPC_ASSIGN_OR_RETURN(auto device, vulkan::VulkanDevice::open(options));
  return std::unique_ptr<Device>(std::move(device));
}

StatusOr<std::vector<std::unique_ptr<Device>>> open_vulkan_devices(int index, uint64_t memory_limit,
                                                                   std::map<int, int>& openings) {
  std::vector<int> indices = {index};
  if (index == kEveryVulkanDevice) {
    TENSORPC_ASSIGN_OR_RETURN(auto every, vulkan_devices());
    indices.clear();
    for (const VulkanDeviceInfo& d : every) indices.push_back(d.index);
  }
  std::vector<std::unique_ptr<Device>> devices;
  for (int i : indices) {
    const int opening = ++openings[i];
    VulkanDeviceOptions o{.index = i, .memory_limit = memory_limit};
    if (opening > 1) o.name = "vulkan:" + std::to_string(i) + "#" + std::to_string(opening);
    TENSORPC_ASSIGN_OR_RETURN(auto device, open_vulkan_device(std::move(o)));
    devices.push_back(std::move(device));
  }
  return devices;
}

StatusOr<std::vector<VulkanDeviceInfo>> vulkan_devices() {
  TENSORPC_ASSIGN_OR_RETURN(auto instance, vulkan::Instance::create());
  TENSORPC_ASSIGN_OR_RETURN(auto physical, instance->physical_devices());
  std::vector<VulkanDeviceInfo> list;
  for (size_t i = 0; i < physical.size(); ++i) {
    TENSORPC_ASSIGN_OR_RETURN(auto facts, vulkan::facts_of(physical[i]));
    list.push_back({static_cast<int>(i), facts.name, facts.driver, vulkan::device_local_memory(physical[i], facts, 0),
                    facts.memory_budget});
  }
  return list;
}

}  // namespace tensorpc
