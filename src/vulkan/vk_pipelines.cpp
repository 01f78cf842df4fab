// Pipelines: the shared layout, shader modules from the embedded SPIR-V, and
// one pipeline a specialization.
#include "vulkan/vk_pipelines.h"

#include <memory>

#include "vulkan/spirv.h"
#include "vulkan/vk_instance.h"
#include "vulkan/vk_ops.h"

namespace tensorpc::vulkan {

StatusOr<std::unique_ptr<Pipelines>> Pipelines::create(VkDevice device) {
  std::unique_ptr<Pipelines> p(new Pipelines(device));
  std::array<VkDescriptorSetLayoutBinding, kBindings> bindings{};
  for (uint32_t i = 0; i < bindings.size(); ++i) {
    bindings[i].binding = i;
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  auto set_info = vk_struct<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  set_info.bindingCount = static_cast<uint32_t>(bindings.size());
  set_info.pBindings = bindings.data();
  TENSORPC_VK_RETURN_IF_ERROR(vkCreateDescriptorSetLayout(device, &set_info, nullptr, &p->set_layout_),
                              "vkCreateDescriptorSetLayout");
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(PushArgs)};
  auto layout_info = vk_struct<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &p->set_layout_;
  layout_info.pushConstantRangeCount = 1;
  layout_info.pPushConstantRanges = &push;
  TENSORPC_VK_RETURN_IF_ERROR(vkCreatePipelineLayout(device, &layout_info, nullptr, &p->layout_),
                              "vkCreatePipelineLayout");
  return p;
}

Pipelines::~Pipelines() {
  for (auto& [key, pipeline] : pipelines_) vkDestroyPipeline(device_, pipeline, nullptr);
  for (auto& [name, module] : modules_) vkDestroyShaderModule(device_, module, nullptr);
  vkDestroyPipelineLayout(device_, layout_, nullptr);
  vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
}

StatusOr<VkPipeline> Pipelines::get(const char* shader, const SpecConstants& spec) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(std::string(shader), spec);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;

  VkShaderModule& module = modules_[shader];
  if (module == VK_NULL_HANDLE) {
    for (const SpirvModule& m : spirv_modules()) {
      if (m.name != shader) continue;
      auto info = vk_struct<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
      info.codeSize = m.words.size() * 4;
      info.pCode = m.words.data();
      TENSORPC_VK_RETURN_IF_ERROR(vkCreateShaderModule(device_, &info, nullptr, &module),
                                  std::string("vkCreateShaderModule ") + shader);
    }
    if (module == VK_NULL_HANDLE) return internal_error(std::string("no shader named ") + shader);
  }
  std::array<VkSpecializationMapEntry, kSpecConstants> entries{};
  for (uint32_t i = 0; i < entries.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo specialization{static_cast<uint32_t>(entries.size()), entries.data(), sizeof spec, spec.data()};
  auto info = vk_struct<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = &specialization;
  info.layout = layout_;
  VkPipeline pipeline = VK_NULL_HANDLE;
  TENSORPC_VK_RETURN_IF_ERROR(vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &pipeline),
                              std::string("vkCreateComputePipelines ") + shader);
  pipelines_[key] = pipeline;
  return pipeline;
}

}  // namespace tensorpc::vulkan
