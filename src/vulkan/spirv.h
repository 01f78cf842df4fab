// The SPIR-V of the Vulkan device's shaders (src/vulkan/shaders/*.comp),
// compiled by glslc at build time and embedded by cmake/embed_files.cmake.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace tensorpc::vulkan {

struct SpirvModule {
  std::string_view name;  // the shader's file name without ".comp"
  std::span<const uint32_t> words;
};

std::span<const SpirvModule> spirv_modules();

}  // namespace tensorpc::vulkan
