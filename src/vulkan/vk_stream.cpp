// The Vulkan stream: a graph recorded into one command buffer of dispatches
// and submitted; a pipeline barrier goes before a node only where it reads or
// writes bytes an earlier node since the last barrier wrote, or writes bytes
// one read. A graph whose dispatches were recorded before is submitted from
// that recording (vk_recordings.h). Sets and gets wait for the graph in
// flight first, so they land in the stream's order.
#include <optional>
#include <vector>

#include "backend/first_error.h"
#include "vulkan/vk_buffer.h"
#include "vulkan/vk_recordings.h"

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
    recordings_.reset();
    if (fence_) vkDestroyFence(d, fence_, nullptr);
    if (pool_) vkDestroyCommandPool(d, pool_, nullptr);
  }

  Status init() {
    auto pool_info = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool_info.queueFamilyIndex = device_.queue_family();
    TENSORPC_VK_RETURN_IF_ERROR(vkCreateCommandPool(device_.handle(), &pool_info, nullptr, &pool_),
                                "vkCreateCommandPool");
    recordings_.emplace(device_, pool_);
    auto fence_info = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    TENSORPC_VK_RETURN_IF_ERROR(vkCreateFence(device_.handle(), &fence_info, nullptr, &fence_), "vkCreateFence");
    return Status();
  }

  Device& device() const override { return device_; }
  VulkanStreamCounters counters() const { return {recordings_->recorded(), recordings_->replayed()}; }

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
    for (Tensor* n : g.nodes()) {
      if (!device_.supports(*n))
        return unsupported(device_.name() + " cannot compute " + name_of(n->op) + " " + describe(*n));
      if (!computes(*n) || n->nelements() == 0) continue;
      TENSORPC_RETURN_IF_ERROR(check_placed(*n, *n));
      for (const Tensor* s : n->src) {
        if (s != nullptr) TENSORPC_RETURN_IF_ERROR(check_placed(*s, *n));
      }
    }
    const std::vector<Step> steps = plan_steps(g);
    if (steps.empty()) return Status();
    TENSORPC_ASSIGN_OR_RETURN(VkCommandBuffer cmd, recordings_->command_buffer(steps));
    TENSORPC_RETURN_IF_ERROR(device_.submit(cmd, fence_));
    in_flight_ = true;
    return Status();
  }

  // The dispatches of g's nodes, each with a barrier before it where it
  // touches what the nodes since the last barrier wrote (or writes what they read).
  std::vector<Step> plan_steps(Graph& g) const {
    std::vector<Step> steps;
    std::vector<Span> written, read;
    for (Tensor* n : g.nodes()) {
      if (!computes(*n) || n->nelements() == 0) continue;
      const Span out{buffer_of(*n), n->offset, n->offset + n->nbytes()};
      bool hazard = any_overlap(out, written) || any_overlap(out, read);
      for (const Tensor* s : n->src) {
        if (s != nullptr) hazard = hazard || any_overlap({buffer_of(*s), s->offset, s->offset + s->nbytes()}, written);
      }
      if (hazard) {
        written.clear();
        read.clear();
      }
      written.push_back(out);
      for (const Tensor* s : n->src) {
        if (s != nullptr) read.push_back({buffer_of(*s), s->offset, s->offset + s->nbytes()});
      }
      steps.push_back({plan_dispatch(*n, device_.limits()), hazard});
    }
    return steps;
  }

  VulkanDevice& device_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::optional<Recordings> recordings_;  // from pool_, after init()
  VkFence fence_ = VK_NULL_HANDLE;
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

namespace tensorpc {

StatusOr<VulkanStreamCounters> vulkan_stream_counters(const Stream& stream) {
  const auto* s = dynamic_cast<const vulkan::VulkanStream*>(&stream);
  if (s == nullptr) return invalid_argument("vulkan_stream_counters: a stream of " + stream.device().name());
  return s->counters();
}

}  // namespace tensorpc
