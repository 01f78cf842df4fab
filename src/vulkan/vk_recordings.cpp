// Recordings: keys, recording, replay and eviction of a stream's command buffers.
#include "vulkan/vk_recordings.h"

#include <array>
#include <cstring>
#include <functional>
#include <string_view>

#include "vulkan/vk_buffer.h"
#include "vulkan/vk_pipelines.h"

namespace tensorpc::vulkan {
namespace {

const VulkanBuffer& buffer_of(const Binding& b) { return *static_cast<const VulkanBuffer*>(b.tensor->buffer); }

// Everything a recording of `steps` holds, as words.
StatusOr<std::vector<uint64_t>> key_of(Pipelines& pipelines, const std::vector<Step>& steps) {
  constexpr size_t kArgWords = sizeof(PushArgs) / sizeof(uint64_t);
  std::vector<uint64_t> key;
  key.reserve(steps.size() * (3 + 3 * kBindings + kArgWords));
  for (const Step& s : steps) {
    const Dispatch& d = s.dispatch;
    TENSORPC_ASSIGN_OR_RETURN(VkPipeline pipeline, pipelines.get(d.shader, d.spec));
    key.push_back(reinterpret_cast<uint64_t>(pipeline));  // pipelines live as long as the device
    key.push_back((uint64_t{d.groups[0]} << 32) | d.groups[1]);
    key.push_back((uint64_t{d.groups[2]} << 1) | (s.barrier ? 1 : 0));
    for (const Binding& b : d.bindings) key.insert(key.end(), {buffer_of(b).id(), b.base, b.range});
    std::array<uint64_t, kArgWords> args;
    std::memcpy(args.data(), &d.args, sizeof(PushArgs));
    key.insert(key.end(), args.begin(), args.end());
  }
  return key;
}

uint64_t hash_of(const std::vector<uint64_t>& key) {
  return std::hash<std::string_view>{}(
      std::string_view(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(uint64_t)));
}

}  // namespace

Recordings::~Recordings() {
  while (auto oldest = store_.pop_oldest()) destroy(oldest->second);
}

void Recordings::destroy(Recording& r) {
  if (r.cmd != VK_NULL_HANDLE) vkFreeCommandBuffers(device_.handle(), pool_, 1, &r.cmd);
  if (r.descriptors != VK_NULL_HANDLE) vkDestroyDescriptorPool(device_.handle(), r.descriptors, nullptr);
  r = {};
}

StatusOr<VkCommandBuffer> Recordings::command_buffer(const std::vector<Step>& steps) {
  TENSORPC_ASSIGN_OR_RETURN(std::vector<uint64_t> key, key_of(device_.pipelines(), steps));
  const uint64_t hash = hash_of(key);
  if (Recording* r = store_.find(hash); r != nullptr && r->key == key) {
    ++replayed_;
    return r->cmd;
  }
  TENSORPC_ASSIGN_OR_RETURN(Recording made, record(steps, std::move(key)));
  if (Recording* r = store_.find(hash); r != nullptr) destroy(*r);  // another key of the same hash
  const VkCommandBuffer cmd = store_.put(hash, std::move(made)).cmd;
  while (store_.size() > kCapacity) destroy(store_.pop_oldest()->second);
  ++recorded_;
  return cmd;
}

StatusOr<Recordings::Recording> Recordings::record(const std::vector<Step>& steps, std::vector<uint64_t> key) {
  VkDevice dev = device_.handle();
  Recording r;
  r.key = std::move(key);
  // Freed on every early return; handed over at the end.
  struct Undo {
    Recordings& self;
    Recording& r;
    ~Undo() { self.destroy(r); }
  };
  Undo undo{*this, r};

  const auto sets = static_cast<uint32_t>(steps.size());
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindings * sets};
  auto pool_info = vk_struct<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
  pool_info.maxSets = sets;
  pool_info.poolSizeCount = 1;
  pool_info.pPoolSizes = &size;
  TENSORPC_VK_RETURN_IF_ERROR(vkCreateDescriptorPool(dev, &pool_info, nullptr, &r.descriptors),
                              "vkCreateDescriptorPool");
  auto cmd_info = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  cmd_info.commandPool = pool_;
  cmd_info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cmd_info.commandBufferCount = 1;
  TENSORPC_VK_RETURN_IF_ERROR(vkAllocateCommandBuffers(dev, &cmd_info, &r.cmd), "vkAllocateCommandBuffers");

  auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  TENSORPC_VK_RETURN_IF_ERROR(vkBeginCommandBuffer(r.cmd, &begin), "vkBeginCommandBuffer");
  for (const Step& s : steps) {
    if (s.barrier) {
      auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
      barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
      barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
      vkCmdPipelineBarrier(r.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                           &barrier, 0, nullptr, 0, nullptr);
    }
    TENSORPC_RETURN_IF_ERROR(record_dispatch(r.cmd, r.descriptors, s.dispatch));
  }
  TENSORPC_VK_RETURN_IF_ERROR(vkEndCommandBuffer(r.cmd), "vkEndCommandBuffer");
  Recording done = std::move(r);
  r = {};
  return done;
}

Status Recordings::record_dispatch(VkCommandBuffer cmd, VkDescriptorPool descriptors, const Dispatch& d) {
  Pipelines& pipelines = device_.pipelines();
  TENSORPC_ASSIGN_OR_RETURN(VkPipeline pipeline, pipelines.get(d.shader, d.spec));
  VkDescriptorSetLayout layout = pipelines.set_layout();
  auto alloc = vk_struct<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
  alloc.descriptorPool = descriptors;
  alloc.descriptorSetCount = 1;
  alloc.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  TENSORPC_VK_RETURN_IF_ERROR(vkAllocateDescriptorSets(device_.handle(), &alloc, &set), "vkAllocateDescriptorSets");
  std::array<VkDescriptorBufferInfo, kBindings> infos{};
  std::array<VkWriteDescriptorSet, kBindings> writes{};
  for (uint32_t i = 0; i < kBindings; ++i) {
    infos[i] = {buffer_of(d.bindings[i]).handle(), d.bindings[i].base, d.bindings[i].range};
    writes[i] = vk_struct<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(device_.handle(), kBindings, writes.data(), 0, nullptr);
  vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines.layout(), 0, 1, &set, 0, nullptr);
  vkCmdPushConstants(cmd, pipelines.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(PushArgs), &d.args);
  vkCmdDispatch(cmd, d.groups[0], d.groups[1], d.groups[2]);
  return Status();
}

}  // namespace tensorpc::vulkan
