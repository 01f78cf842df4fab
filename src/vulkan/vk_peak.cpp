// The FMA shader's dispatch (vk_peak.h), timed around the device's own
// record-submit-wait of its transfers.
#include "vulkan/vk_peak.h"

#include <array>
#include <bit>
#include <chrono>

#include "vulkan/vk_buffer.h"
#include "vulkan/vk_device.h"
#include "vulkan/vk_ops.h"
#include "vulkan/vk_pipelines.h"

namespace tensorpc::vulkan {
namespace {

constexpr uint32_t kGroups = 1024;    // 262,144 invocations: more than any GPU runs at once
constexpr uint32_t kGroupSize = 256;  // the shader's local_size_x
constexpr uint32_t kChains = 16;      // the shader's CHAINS

// A descriptor pool holding one set, destroyed with it.
class OneSetPool {
 public:
  explicit OneSetPool(VkDevice device) : device_(device) {}
  ~OneSetPool() {
    if (pool_ != VK_NULL_HANDLE) vkDestroyDescriptorPool(device_, pool_, nullptr);
  }
  OneSetPool(const OneSetPool&) = delete;
  OneSetPool& operator=(const OneSetPool&) = delete;

  // A set of `layout` whose every binding is the whole of `buffer`.
  StatusOr<VkDescriptorSet> make_set(VkDescriptorSetLayout layout, VkBuffer buffer) {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindings};
    auto info = vk_struct<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
    info.maxSets = 1;
    info.poolSizeCount = 1;
    info.pPoolSizes = &size;
    TENSORPC_VK_RETURN_IF_ERROR(vkCreateDescriptorPool(device_, &info, nullptr, &pool_), "vkCreateDescriptorPool");
    auto alloc = vk_struct<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
    alloc.descriptorPool = pool_;
    alloc.descriptorSetCount = 1;
    alloc.pSetLayouts = &layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    TENSORPC_VK_RETURN_IF_ERROR(vkAllocateDescriptorSets(device_, &alloc, &set), "vkAllocateDescriptorSets");
    const VkDescriptorBufferInfo whole{buffer, 0, VK_WHOLE_SIZE};
    std::array<VkWriteDescriptorSet, kBindings> writes{};
    for (uint32_t i = 0; i < kBindings; ++i) {
      writes[i] = vk_struct<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
      writes[i].dstSet = set;
      writes[i].dstBinding = i;
      writes[i].descriptorCount = 1;
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &whole;
    }
    vkUpdateDescriptorSets(device_, kBindings, writes.data(), 0, nullptr);
    return set;
  }

 private:
  VkDevice device_;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
};

}  // namespace

StatusOr<double> time_fma_dispatch(Device& device, uint32_t rounds, uint64_t& fmas) {
  auto* vk = dynamic_cast<VulkanDevice*>(&device);
  if (vk == nullptr) return invalid_argument("FMA peak: " + device.name() + " is not a Vulkan device");
  TENSORPC_ASSIGN_OR_RETURN(auto out, vk->allocate(uint64_t{kGroups} * kGroupSize * sizeof(float)));
  const VkBuffer result = static_cast<VulkanBuffer&>(*out).handle();
  Pipelines& pipelines = vk->pipelines();
  TENSORPC_ASSIGN_OR_RETURN(VkPipeline pipeline, pipelines.get("fma_peak", {0, 0, 0}));
  OneSetPool pool(vk->handle());
  TENSORPC_ASSIGN_OR_RETURN(VkDescriptorSet set, pool.make_set(pipelines.set_layout(), result));
  PushArgs args{};
  args.p[0] = rounds;
  args.p[1] = std::bit_cast<uint32_t>(0.999999f);  // the chains shrink towards a / (1 - m): no overflow
  args.p[2] = std::bit_cast<uint32_t>(1e-6f);
  const auto start = std::chrono::steady_clock::now();
  TENSORPC_RETURN_IF_ERROR(vk->run_now([&](VkCommandBuffer cmd) {
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines.layout(), 0, 1, &set, 0, nullptr);
    vkCmdPushConstants(cmd, pipelines.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(PushArgs), &args);
    vkCmdDispatch(cmd, kGroups, 1, 1);
  }));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmas = uint64_t{kGroups} * kGroupSize * rounds * kChains;
  return seconds;
}

}  // namespace tensorpc::vulkan
