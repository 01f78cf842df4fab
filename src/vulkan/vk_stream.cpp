// The Vulkan stream: a graph recorded into one command buffer of dispatches
// and submitted; a pipeline barrier goes before a node only where it reads or
// writes bytes an earlier node since the last barrier wrote, or writes bytes
// one read. Sets and gets wait for the graph in flight first, so they land in
// the stream's order.
#include <vector>

#include "backend/first_error.h"
#include "vulkan/vk_buffer.h"
#include "vulkan/vk_pipelines.h"

namespace tensorpc::vulkan {
namespace {

// Bytes [begin, end) of one VkBuffer that a node reads or writes.
struct Span {
  VkBuffer buffer;
  uint64_t begin, end;
  bool overlaps(const Span& o) const { return buffer == o.buffer && begin < o.end && o.begin < end; }
};

bool any_overlap(const Span& s, const std::vector<Span>& spans) {
  for (const Span& o : spans) {
    if (s.overlaps(o)) return true;
  }
  return false;
}

class VulkanStream final : public Stream {
 public:
  explicit VulkanStream(VulkanDevice& device) : device_(device) {}
  ~VulkanStream() override {
    (void)wait();
    VkDevice d = device_.handle();
    if (descriptors_) vkDestroyDescriptorPool(d, descriptors_, nullptr);
    if (fence_) vkDestroyFence(d, fence_, nullptr);
    if (pool_) vkDestroyCommandPool(d, pool_, nullptr);
  }

  Status init() {
    auto pool_info = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool_info.queueFamilyIndex = device_.queue_family();
    TENSORPC_VK_RETURN_IF_ERROR(vkCreateCommandPool(device_.handle(), &pool_info, nullptr, &pool_),
                                "vkCreateCommandPool");
    auto cmd_info = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    cmd_info.commandPool = pool_;
    cmd_info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cmd_info.commandBufferCount = 1;
    TENSORPC_VK_RETURN_IF_ERROR(vkAllocateCommandBuffers(device_.handle(), &cmd_info, &cmd_),
                                "vkAllocateCommandBuffers");
    auto fence_info = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    TENSORPC_VK_RETURN_IF_ERROR(vkCreateFence(device_.handle(), &fence_info, nullptr, &fence_), "vkCreateFence");
    return Status();
  }

  Device& device() const override { return device_; }

  Status compute_async(Graph& g) override { return remember(record_and_submit(g)); }

  Status set_async(const Tensor& t, const void* src, uint64_t offset, uint64_t size) override {
    TENSORPC_RETURN_IF_ERROR(remember(wait()));
    if (t.buffer == nullptr) return remember(invalid_argument("set: " + describe(t) + " is not placed"));
    return remember(t.buffer->set(t, src, offset, size));
  }

  Status get_async(const Tensor& t, void* dst, uint64_t offset, uint64_t size) override {
    TENSORPC_RETURN_IF_ERROR(remember(wait()));
    if (t.buffer == nullptr) return remember(invalid_argument("get: " + describe(t) + " is not placed"));
    return remember(t.buffer->get(t, dst, offset, size));
  }

  Status synchronize() override {
    (void)remember(wait());
    return pending_.take();
  }

 private:
  Status remember(Status s) { return pending_.remember(std::move(s)); }

  // Waits for the graph in flight, if any.
  Status wait() {
    if (!in_flight_) return Status();
    in_flight_ = false;
    const VkResult r = vkWaitForFences(device_.handle(), 1, &fence_, VK_TRUE, UINT64_MAX);
    vkResetFences(device_.handle(), 1, &fence_);
    TENSORPC_VK_RETURN_IF_ERROR(r, device_.name() + ": vkWaitForFences");
    return Status();
  }

  // A descriptor pool with a set for each of `nodes` dispatches.
  Status reset_descriptors(uint32_t nodes) {
    if (descriptors_ && nodes <= descriptor_capacity_) {
      vkResetDescriptorPool(device_.handle(), descriptors_, 0);
      return Status();
    }
    if (descriptors_) vkDestroyDescriptorPool(device_.handle(), descriptors_, nullptr);
    descriptors_ = VK_NULL_HANDLE;
    descriptor_capacity_ = std::max<uint32_t>(nodes, 16);
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindings * descriptor_capacity_};
    auto info = vk_struct<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
    info.maxSets = descriptor_capacity_;
    info.poolSizeCount = 1;
    info.pPoolSizes = &size;
    TENSORPC_VK_RETURN_IF_ERROR(vkCreateDescriptorPool(device_.handle(), &info, nullptr, &descriptors_),
                                "vkCreateDescriptorPool");
    return Status();
  }

  static VkBuffer buffer_of(const Tensor& t) { return static_cast<const VulkanBuffer*>(t.buffer)->handle(); }

  Status check_placed(const Tensor& t, const Tensor& node) const {
    const auto* b = dynamic_cast<const VulkanBuffer*>(t.buffer);
    if (b == nullptr || &b->device() != &device_) {
      return invalid_argument("compute: " + describe(t) + " of " + name_of(node.op) + " is not placed on " +
                              device_.name());
    }
    return Status();
  }

  Status record_and_submit(Graph& g) {
    TENSORPC_RETURN_IF_ERROR(wait());
    uint32_t dispatches = 0;
    for (Tensor* n : g.nodes()) {
      if (!device_.supports(*n))
        return unsupported(device_.name() + " cannot compute " + name_of(n->op) + " " + describe(*n));
      if (!computes(*n) || n->nelements() == 0) continue;
      TENSORPC_RETURN_IF_ERROR(check_placed(*n, *n));
      for (const Tensor* s : n->src) {
        if (s != nullptr) TENSORPC_RETURN_IF_ERROR(check_placed(*s, *n));
      }
      ++dispatches;
    }
    if (dispatches == 0) return Status();
    TENSORPC_RETURN_IF_ERROR(reset_descriptors(dispatches));

    auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    TENSORPC_VK_RETURN_IF_ERROR(vkBeginCommandBuffer(cmd_, &begin), "vkBeginCommandBuffer");
    std::vector<Span> written, read;
    for (Tensor* n : g.nodes()) {
      if (!computes(*n) || n->nelements() == 0) continue;
      const Dispatch d = plan_dispatch(*n, device_.limits());
      // Hazards with what the nodes since the last barrier read and wrote.
      const Span out{buffer_of(*n), n->offset, n->offset + n->nbytes()};
      bool hazard = any_overlap(out, written) || any_overlap(out, read);
      for (const Tensor* s : n->src) {
        if (s != nullptr) hazard = hazard || any_overlap({buffer_of(*s), s->offset, s->offset + s->nbytes()}, written);
      }
      if (hazard) {
        auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
        barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
        barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
        vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                             &barrier, 0, nullptr, 0, nullptr);
        written.clear();
        read.clear();
      }
      written.push_back(out);
      for (const Tensor* s : n->src) {
        if (s != nullptr) read.push_back({buffer_of(*s), s->offset, s->offset + s->nbytes()});
      }
      TENSORPC_RETURN_IF_ERROR(record(d));
    }
    TENSORPC_VK_RETURN_IF_ERROR(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    TENSORPC_RETURN_IF_ERROR(device_.submit(cmd_, fence_));
    in_flight_ = true;
    return Status();
  }

  Status record(const Dispatch& d) {
    Pipelines& pipelines = device_.pipelines();
    TENSORPC_ASSIGN_OR_RETURN(VkPipeline pipeline, pipelines.get(d.shader, d.spec));
    VkDescriptorSetLayout layout = pipelines.set_layout();
    auto alloc = vk_struct<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
    alloc.descriptorPool = descriptors_;
    alloc.descriptorSetCount = 1;
    alloc.pSetLayouts = &layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    TENSORPC_VK_RETURN_IF_ERROR(vkAllocateDescriptorSets(device_.handle(), &alloc, &set), "vkAllocateDescriptorSets");
    std::array<VkDescriptorBufferInfo, kBindings> infos{};
    std::array<VkWriteDescriptorSet, kBindings> writes{};
    for (uint32_t i = 0; i < kBindings; ++i) {
      infos[i] = {buffer_of(*d.bindings[i].tensor), d.bindings[i].base, d.bindings[i].range};
      writes[i] = vk_struct<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
      writes[i].dstSet = set;
      writes[i].dstBinding = i;
      writes[i].descriptorCount = 1;
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &infos[i];
    }
    vkUpdateDescriptorSets(device_.handle(), kBindings, writes.data(), 0, nullptr);
    vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines.layout(), 0, 1, &set, 0, nullptr);
    vkCmdPushConstants(cmd_, pipelines.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(PushArgs), &d.args);
    vkCmdDispatch(cmd_, d.groups[0], d.groups[1], d.groups[2]);
    return Status();
  }

  VulkanDevice& device_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkDescriptorPool descriptors_ = VK_NULL_HANDLE;
  uint32_t descriptor_capacity_ = 0;
  bool in_flight_ = false;
  FirstError pending_;
};

}  // namespace

StatusOr<std::unique_ptr<Stream>> make_stream(VulkanDevice& device) {
  auto stream = std::make_unique<VulkanStream>(device);
  TENSORPC_RETURN_IF_ERROR(stream->init());
  return std::unique_ptr<Stream>(std::move(stream));
}

}  // namespace tensorpc::vulkan
