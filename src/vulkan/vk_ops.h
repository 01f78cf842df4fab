// What the Vulkan device computes, and how: for each node, whether its op,
// types and layout are implemented (supports), and the dispatch of a shader
// that computes it (plan_dispatch). The table of ops lives in vk_ops.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "tensorpc/tensor.h"

namespace tensorpc::vulkan {

// The device's limits that decide what a dispatch can cover.
struct OpLimits {
  uint64_t max_storage_range = 0;   // bytes one binding covers
  uint64_t storage_alignment = 16;  // of a binding's offset
  std::array<uint32_t, 3> max_groups{};
  bool f16 = false;               // f16 in storage buffers
  bool subgroup_shuffle = false;  // subgroups' basic and shuffle operations in compute shaders
};

// Every shader binds four storage buffers: the node and its src[0..2]; an op
// without a source binds the node in its place.
inline constexpr uint32_t kBindings = 4;

// The shaders' push constants (shaders/common.glsl): tensor 0 is the node,
// 1 and 2 its sources; offsets and strides in elements of each one's type
// (off[3] is src[2]'s offset, for the ops that read it).
struct PushArgs {
  uint32_t ne[3][4];
  uint32_t nb[3][4];
  uint32_t off[4];
  uint32_t p[4];
};
static_assert(sizeof(PushArgs) == 128);

// The bytes of buffer a tensor is bound to: [base, base + range).
struct Binding {
  const Tensor* tensor = nullptr;
  uint64_t base = 0;
  uint64_t range = 0;
};

// Specialization constants a shader may have: types and variants first,
// tile sizes after them (shaders/mul_mat.comp).
inline constexpr uint32_t kSpecConstants = 7;
using SpecConstants = std::array<uint32_t, kSpecConstants>;

struct Dispatch {
  const char* shader = nullptr;  // the module's name (spirv.h)
  SpecConstants spec{};          // specialization constants 0..kSpecConstants - 1
  std::array<Binding, kBindings> bindings{};
  PushArgs args{};
  std::array<uint32_t, 3> groups{1, 1, 1};
};

// True when node computes nothing (a leaf, a view) or a shader computes it.
bool supports(const Tensor& node, const OpLimits& limits);
// True when node has a dispatch (it is supported and not a leaf or a view).
bool computes(const Tensor& node);
// The dispatch computing node, whose tensors are placed. node must be supported.
Dispatch plan_dispatch(const Tensor& node, const OpLimits& limits);

}  // namespace tensorpc::vulkan
