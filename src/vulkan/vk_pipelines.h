// The compute pipelines of one device: a pipeline a shader and set of
// specialization constants, made on first use and kept. Every shader has the
// same layout: four storage buffers (the node, src[0..2]) and the
// 128 bytes of PushArgs.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "tensorpc/status.h"
#include "vulkan/vk_ops.h"

namespace tensorpc::vulkan {

class Pipelines {
 public:
  static StatusOr<std::unique_ptr<Pipelines>> create(VkDevice device);
  ~Pipelines();
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  VkPipelineLayout layout() const { return layout_; }
  // The pipeline of shader (a module of spirv.h) with its specialization constants set to spec.
  StatusOr<VkPipeline> get(const char* shader, const SpecConstants& spec);

 private:
  explicit Pipelines(VkDevice device) : device_(device) {}
  VkDevice device_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::mutex mutex_;
  std::map<std::string, VkShaderModule> modules_;
  std::map<std::pair<std::string, SpecConstants>, VkPipeline> pipelines_;
};

}  // namespace tensorpc::vulkan
