// The ops the Vulkan device computes: for each, the types and layouts its
// shader takes (supports) and the dispatch that computes a node (plan_dispatch).
//
// Every shader reads its tensors through ne and element strides
// (shaders/common.glsl), so views, permutes and broadcasts need nothing
// special; what a node needs is that each of its tensors has a type the
// shader reads, strides that are whole elements, and a span one binding covers.
#include "vulkan/vk_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "tensorpc/context.h"

namespace tensorpc::vulkan {
namespace {

// The types of shaders/quant.glsl, by their number there: i32 is read as
// f32's 4 bytes; f16, bf16 and the block types, as 16-bit words, need
// 16-bit storage.
constexpr DType kShaderTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,   DType::q4_0,
                                  DType::q4_1, DType::q5_0, DType::q5_1, DType::iq4_nl, DType::q2_K,
                                  DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K,   DType::iq4_xs};
constexpr uint32_t kF32 = 0;
constexpr uint64_t kMaxElements = uint64_t{1} << 31;
// The largest k of top_k: its candidates are sorted in shared memory (shaders/top_k.comp).
constexpr int64_t kTopKMaxK = 1024;

// The shader type of t, or -1.
int shader_type(const Tensor& t, const OpLimits& limits) {
  if (t.type == DType::f32 || t.type == DType::i32) return static_cast<int>(kF32);
  if (!limits.f16) return -1;
  for (size_t i = 1; i < std::size(kShaderTypes); ++i) {
    if (kShaderTypes[i] == t.type) return static_cast<int>(i);
  }
  return -1;
}

// Whether t is a weight only mul_mat and get_rows read: bf16 or a block type.
bool is_weight_type(const Tensor* t) {
  return t != nullptr && (t->type == DType::bf16 || is_quantized(t->type)) &&
         shader_type(*t, OpLimits{.f16 = true}) >= 0;
}

// The unit of t's offset and strides in a shader: an element, or for a block
// type a 16-bit word.
uint64_t element_size(const Tensor& t) { return t.type == DType::f16 || is_weight_type(&t) ? 2 : 4; }

// Whether a shader can address every element of t through one binding.
bool addressable(const Tensor& t, const OpLimits& limits) {
  if (shader_type(t, limits) < 0) return false;
  if (static_cast<uint64_t>(t.nelements()) >= kMaxElements) return false;
  const uint64_t size = element_size(t);
  if (t.offset % size != 0) return false;
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] <= 0 && t.nelements() != 0) return false;
    if (t.nb[i] % size != 0 || t.nb[i] / size > UINT32_MAX) return false;
  }
  return t.nbytes() + limits.storage_alignment <= limits.max_storage_range;
}

bool is(const Tensor* t, DType type) { return t != nullptr && t->type == type; }

// f32, f16 or bf16: what cpy converts between, and set_rows writes.
bool is_float(const Tensor* t) { return is(t, DType::f32) || is(t, DType::f16) || is(t, DType::bf16); }

// Dispatch shapes: a flat job of n invocations in groups of `group`, or one
// group per row; both spread over x and y (x holds at most max_groups[0]).
std::array<uint32_t, 3> spread(uint64_t groups, const OpLimits& limits) {
  const uint64_t x = std::max<uint64_t>(1, std::min<uint64_t>(groups, limits.max_groups[0]));
  return {static_cast<uint32_t>(x), static_cast<uint32_t>((groups + x - 1) / x), 1};
}

bool spreadable(uint64_t groups, const OpLimits& limits) { return spread(groups, limits)[1] <= limits.max_groups[1]; }

uint64_t flat_groups(const Tensor& node) { return (static_cast<uint64_t>(node.nelements()) + 255) / 256; }

// mul_mat's tiles for N > 1 (shaders/mul_mat.comp): kTileM rows of the node
// by mul_mat_tile_n columns a workgroup, K through shared memory kTileK at a
// time (a multiple of 8: the weights' slice is filled a run of 8 an
// invocation). Multiples of 16 (a workgroup is 16 x 16 invocations, each
// computing the outputs 16 apart: 8 x 8 of them in a 128 x 128 tile, whose
// weights and activations each serve 128 outputs); the two tiles take
// (kTileM + tile_n) (kTileK + 4) floats of shared memory (a row padded by a
// vec4), 12 KiB at 128 x 128, within the 16 KiB every device has.
constexpr uint32_t kTileM = 128, kTileK = 8;
uint32_t mul_mat_tile_n(int64_t n) { return n > 64 ? 128 : n > 32 ? 64 : 16; }

// mul_mat's matrix-vector path (N == 1) and mul_mat_id's for few tokens
// (shaders/mul_mat.comp's MODE 1 and 2): an invocation sums kVecRowsEach
// rows, each run of b read once for them; the lanes of a row group take
// steps of 8 values of K (a plain weight) or 32 (a block type's units). 32
// lanes a group, fewer (at least 4) where K has fewer steps than half of
// them (an attention head's 64 or 128 values), so that lanes do not idle.
// vec_rows is the rows a workgroup of 256: at most 256, for which the
// shader's tile arrays (sized by it and the narrowest tile, unused on this
// path: 12.8 KiB) and its sums still fit in 16 KiB of shared memory.
constexpr uint32_t kVecRowsEach = 4;
uint32_t vec_rows(const Tensor& node) {
  const int64_t step = is_quantized(node.src[0]->type) ? 32 : 8;
  const int64_t steps = (node.src[0]->ne[0] + step - 1) / step;
  uint32_t lanes = 32;
  while (lanes > 4 && lanes / 2 >= steps) lanes /= 2;
  return 256 / lanes * kVecRowsEach;
}

// shaders/mul_mat.comp's VEC4: bit 0 where b's runs of 8 are two aligned
// vec4s (dim 0 contiguous, offset and strides in elements multiples of 4);
// bit 1 where a's are too (f32 or f16, K a multiple of 8), or where every
// block of a block type starts at an even 16-bit word (offset and strides in
// words even); bit 2 where a's runs (f16) or blocks (q4_K and q5_K, whose
// blocks are whole 16-byte lines) all start at multiples of 16 bytes from
// the binding's start.
uint32_t vec4_runs(const Tensor& node, const PushArgs& args) {
  const auto multiples = [&](int t, uint32_t of) {
    return args.off[t] % of == 0 && args.nb[t][1] % of == 0 && args.nb[t][2] % of == 0 && args.nb[t][3] % of == 0;
  };
  const Tensor* a = node.src[0];
  const bool plain = is(a, DType::f32) || is(a, DType::f16);
  const bool blocks = is_quantized(a->type);
  uint32_t bits = args.nb[2][0] == 1 && multiples(2, 4) ? 1u : 0u;
  if (plain && args.nb[1][0] == 1 && a->ne[0] % 8 == 0) {
    if (multiples(1, 4)) bits |= 2u;
    if (is(a, DType::f16) && multiples(1, 8)) bits |= 4u;
  }
  if (blocks && args.nb[1][0] % 2 == 0 && multiples(1, 2)) bits |= 2u;
  if (blocks && args.nb[1][0] % 8 == 0 && multiples(1, 8)) bits |= 4u;
  return bits;
}

// mul_mat_id of fewer tokens than this takes the vector path's workgroups
// for each pair, the expert its id picks (shaders/mul_mat.comp's MODE 2);
// more share the tiles over the pairs, one expert a group along z (MODE 3).
constexpr int64_t kMulMatIdVecTokens = 4;

// mul_mat's and mul_mat_id's shader mode (shaders/mul_mat.comp): 1 and 2 the
// vector path (vec_rows outputs a workgroup), 0 and 3 tiles.
uint32_t mul_mat_mode(const Tensor& node) {
  if (node.op == Op::mul_mat_id) return node.ne[2] < kMulMatIdVecTokens ? 2 : 3;
  return node.ne[1] == 1 ? 1 : 0;
}

bool vector_mode(uint32_t mode) { return mode == 1 || mode == 2; }

// The columns a tile covers: mul_mat's N, mul_mat_id's k T pairs.
int64_t mul_mat_columns(const Tensor& node) { return node.op == Op::mul_mat_id ? node.ne[1] * node.ne[2] : node.ne[1]; }

// mul_mat's groups: one vec_rows outputs (spread over x and y for one
// column; mul_mat_id's pairs along y and z) or a tile, and dims 2 and 3
// (mul_mat) or the experts (mul_mat_id's tiles) along z.
std::array<uint32_t, 3> mul_mat_groups(const Tensor& node, const OpLimits& limits) {
  const auto m = static_cast<uint64_t>(node.ne[0]);
  const uint32_t mode = mul_mat_mode(node);
  const uint64_t row_groups = (m + vec_rows(node) - 1) / vec_rows(node);
  if (mode == 1) {  // the row groups over x and y (N is 1)
    const auto xy = spread(row_groups, limits);
    return {xy[0], xy[1], static_cast<uint32_t>(node.ne[2] * node.ne[3])};
  }
  if (mode == 2)
    return {static_cast<uint32_t>(row_groups), static_cast<uint32_t>(node.ne[1]), static_cast<uint32_t>(node.ne[2])};
  const auto n = static_cast<uint64_t>(mul_mat_columns(node));
  const uint32_t tile_n = mul_mat_tile_n(static_cast<int64_t>(n));
  const auto z = static_cast<uint32_t>(mode == 3 ? node.src[0]->ne[2] : node.ne[2] * node.ne[3]);
  return {static_cast<uint32_t>((m + kTileM - 1) / kTileM), static_cast<uint32_t>((n + tile_n - 1) / tile_n), z};
}

bool mul_mat_groups_fit(const Tensor& node, const OpLimits& limits) {
  const auto g = mul_mat_groups(node, limits);
  for (size_t i = 0; i < 3; ++i) {
    if (g[i] > limits.max_groups[i]) return false;
  }
  return true;
}

// A weight mul_mat, mul_mat_id and get_rows read: f32, f16, bf16 or a block
// type of quant.glsl.
bool is_matrix_weight(const Tensor* a) { return is(a, DType::f32) || is(a, DType::f16) || is_weight_type(a); }

bool op_supported(const Tensor& node, const OpLimits& limits) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  switch (node.op) {
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::swiglu:
    case Op::swiglu_clamp:
      return is(&node, DType::f32) && is(a, DType::f32) && is(b, DType::f32) && spreadable(flat_groups(node), limits);
    case Op::scale:
    case Op::diag_mask_inf:
    case Op::silu:
    case Op::gelu:
    case Op::tanh:
    case Op::sigmoid: return is(&node, DType::f32) && is(a, DType::f32) && spreadable(flat_groups(node), limits);
    case Op::rms_norm:
    case Op::norm: return is(&node, DType::f32) && is(a, DType::f32) && spreadable(node.nrows(), limits);
    case Op::soft_max:  // the sinks, f32 [ne2], are contiguous (Context::soft_max)
      return is(&node, DType::f32) && is(a, DType::f32) && (b == nullptr || is(b, DType::f32)) &&
             (node.src[2] == nullptr || is(node.src[2], DType::f32)) && spreadable(node.nrows(), limits);
    case Op::get_rows:
      return is(&node, DType::f32) && is_matrix_weight(a) && is(b, DType::i32) && spreadable(flat_groups(node), limits);
    case Op::set_rows:
      return (is_float(&node) || is(&node, DType::q8_0) || is(&node, DType::q4_0)) && is(a, DType::f32) &&
             is(b, DType::i32) && spreadable(flat_groups(*a), limits);
    case Op::concat:
      return (is(&node, DType::f32) || is(&node, DType::i32)) && a->type == node.type && b->type == node.type &&
             spreadable(flat_groups(node), limits);
    case Op::argmax: return is(&node, DType::i32) && is(a, DType::f32) && spreadable(a->nrows(), limits);
    case Op::top_k:
    case Op::top_k_ids:
      return is(&node, node.op == Op::top_k ? DType::f32 : DType::i32) && is(a, DType::f32) &&
             node.ne[0] <= kTopKMaxK && spreadable(a->nrows(), limits);
    case Op::cpy: return is_float(&node) && is_float(a) && spreadable(flat_groups(node), limits);
    case Op::rope: {
      const Tensor* factors = node.src[2];
      return is(&node, DType::f32) && is(a, DType::f32) && is(b, DType::i32) &&
             (factors == nullptr || (is(factors, DType::f32) && factors->nb[0] == 4)) &&
             spreadable(flat_groups(node), limits);
    }
    case Op::mul_mat:
      return is(&node, DType::f32) && is_matrix_weight(a) && is(b, DType::f32) &&
             node.ne[2] * node.ne[3] <= limits.max_groups[2] && mul_mat_groups_fit(node, limits);
    case Op::mul_mat_id:
      return is(&node, DType::f32) && is_matrix_weight(a) && is(b, DType::f32) && is(node.src[2], DType::i32) &&
             mul_mat_groups_fit(node, limits);
    // No shaders: sample (and anything newer); the scheduler runs them on the CPU.
    default: return false;
  }
}

Binding bind(const Tensor& t, const OpLimits& limits) {
  const uint64_t base = t.offset / limits.storage_alignment * limits.storage_alignment;
  const uint64_t range = (t.offset - base + t.nbytes() + 3) / 4 * 4;
  return {&t, base, std::max<uint64_t>(range, 4)};
}

void describe_tensor(PushArgs& args, int slot, const Binding& binding) {
  const Tensor& t = *binding.tensor;
  const uint64_t size = element_size(t);
  for (int i = 0; i < kMaxDims; ++i) {
    args.ne[slot][i] = static_cast<uint32_t>(t.ne[i]);
    args.nb[slot][i] = static_cast<uint32_t>(t.nb[i] / size);
  }
  args.off[slot] = static_cast<uint32_t>((t.offset - binding.base) / size);
}

uint32_t f32_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// rope's params, where shaders/rope.comp reads them: in p, and in the slots
// of the positions' descriptor (tensor 2, 1-D) that its dims 1 and 2 leave.
void rope_args(const Tensor& node, PushArgs& args) {
  int32_t n_dims = std::clamp<int32_t>(node.param<int32_t>(kRopeParamNDims), 0, static_cast<int32_t>(node.ne[0]));
  n_dims &= ~1;
  const bool yarn = (node.param<int32_t>(kRopeParamMode) & kRopeYarnBit) != 0;
  const float freq_scale = node.param<float>(kRopeParamFreqScale);
  const float ext_factor = yarn ? node.param<float>(kRopeParamExtFactor) : 0.0f;
  double magnitude = yarn ? node.param<float>(kRopeParamAttnFactor) : 1.0;
  if (ext_factor != 0.0f) magnitude *= 1.0 + 0.1 * std::log(1.0 / freq_scale);
  args.ne[2][1] = static_cast<uint32_t>(n_dims);
  args.ne[2][2] = node.src[2] != nullptr ? static_cast<uint32_t>(node.src[2]->ne[0]) : 0;
  args.nb[2][1] = f32_bits(yarn ? node.param<float>(kRopeParamCorrLow) : 0.0f);
  args.nb[2][2] = f32_bits(yarn ? node.param<float>(kRopeParamCorrHigh) : 0.0f);
  args.p[0] = f32_bits(node.param<float>(kRopeParamFreqBase));
  args.p[1] = f32_bits(freq_scale);
  args.p[2] = f32_bits(ext_factor);
  args.p[3] = f32_bits(static_cast<float>(magnitude));
}

// Which shader computes op, and its specialization constants.
void choose_shader(const Tensor& node, const OpLimits& limits, Dispatch& d) {
  const auto type_of = [&](const Tensor* t) { return static_cast<uint32_t>(shader_type(*t, limits)); };
  switch (node.op) {
    case Op::add: d.shader = "elementwise", d.spec[0] = 0; break;
    case Op::sub: d.shader = "elementwise", d.spec[0] = 1; break;
    case Op::mul: d.shader = "elementwise", d.spec[0] = 2; break;
    case Op::div: d.shader = "elementwise", d.spec[0] = 3; break;
    case Op::scale: d.shader = "elementwise", d.spec[0] = 4; break;
    case Op::silu: d.shader = "elementwise", d.spec[0] = 5; break;
    case Op::gelu: d.shader = "elementwise", d.spec[0] = 6; break;
    case Op::tanh: d.shader = "elementwise", d.spec[0] = 7; break;
    case Op::swiglu: d.shader = "elementwise", d.spec[0] = 8; break;
    case Op::sigmoid: d.shader = "elementwise", d.spec[0] = 10; break;
    case Op::swiglu_clamp: d.shader = "elementwise", d.spec[0] = 11; break;
    case Op::rms_norm: d.shader = "norm", d.spec[0] = 0; break;
    case Op::norm: d.shader = "norm", d.spec[0] = 1; break;
    case Op::soft_max: d.shader = "soft_max"; break;
    case Op::cpy: d.shader = "copy", d.spec = {type_of(node.src[0]), type_of(&node), 0}; break;
    case Op::get_rows: d.shader = "copy", d.spec = {type_of(node.src[0]), kF32, 1}; break;
    case Op::set_rows: d.shader = "copy", d.spec = {kF32, type_of(&node), 2}; break;
    case Op::concat: d.shader = "copy", d.spec = {kF32, kF32, 3}; break;
    case Op::diag_mask_inf: d.shader = "elementwise", d.spec[0] = 9; break;
    case Op::argmax: d.shader = "argmax"; break;
    case Op::top_k: d.shader = "top_k", d.spec[0] = 0; break;
    case Op::top_k_ids: d.shader = "top_k", d.spec[0] = 1; break;
    case Op::rope:
      d.shader = "rope";
      d.spec = {(node.param<int32_t>(kRopeParamMode) & kRopeNeox) != 0 ? 1u : 0u, node.src[2] != nullptr ? 1u : 0u, 0};
      break;
    case Op::mul_mat:
    case Op::mul_mat_id: {
      const uint32_t mode = mul_mat_mode(node);
      const bool vec = vector_mode(mode);
      d.shader = vec && limits.subgroup_shuffle ? "mul_mat_subgroup" : "mul_mat";
      // The vector path uses no tiles: its TILE_N is the narrowest, so that
      // the shader's shared arrays stay small.
      const uint32_t tile_n = vec ? mul_mat_tile_n(1) : mul_mat_tile_n(mul_mat_columns(node));
      d.spec = {type_of(node.src[0]), mode, vec ? vec_rows(node) : kTileM, tile_n, kTileK, 0, kVecRowsEach};
      break;
    }
    default: break;
  }
}

}  // namespace

bool computes(const Tensor& node) { return node.op != Op::none && !is_view_op(node.op); }

bool supports(const Tensor& node, const OpLimits& limits) {
  if (static_cast<uint32_t>(node.op) >= kOpCount) return false;
  if (!computes(node)) return true;
  if (!addressable(node, limits)) return false;
  for (const Tensor* s : node.src) {
    if (s != nullptr && !addressable(*s, limits)) return false;
  }
  return op_supported(node, limits);
}

Dispatch plan_dispatch(const Tensor& node, const OpLimits& limits) {
  Dispatch d;
  choose_shader(node, limits, d);
  d.bindings[0] = bind(node, limits);
  for (uint32_t i = 1; i < kBindings; ++i) {
    // An op without the source binds the node there: every binding is valid.
    const Tensor* s = node.src[i - 1];
    d.bindings[i] = s != nullptr ? bind(*s, limits) : d.bindings[0];
  }
  for (int i = 0; i < 3; ++i) describe_tensor(d.args, i, d.bindings[i]);
  if (const Tensor* s = node.src[2]; s != nullptr)
    d.args.off[3] = static_cast<uint32_t>((s->offset - d.bindings[3].base) / element_size(*s));
  switch (node.op) {
    case Op::scale:
    case Op::rms_norm:
    case Op::norm: d.args.p[0] = f32_bits(node.param<float>(0)); break;
    case Op::soft_max:
      d.args.p[0] = f32_bits(node.param<float>(0));
      d.args.p[1] = node.src[1] != nullptr ? 1 : 0;
      d.args.p[2] = node.src[2] != nullptr ? 1 : 0;
      break;
    case Op::swiglu_clamp:
      d.args.p[0] = f32_bits(node.param<float>(0));
      d.args.p[1] = f32_bits(node.param<float>(1));
      break;
    case Op::mul_mat_id:  // the ids' element strides (their offset is off[3])
      d.args.p[0] = static_cast<uint32_t>(node.src[2]->nb[0] / 4);
      d.args.p[1] = static_cast<uint32_t>(node.src[2]->nb[1] / 4);
      break;
    case Op::rope: rope_args(node, d.args); break;
    case Op::concat:
    case Op::top_k:
    case Op::top_k_ids:
    case Op::diag_mask_inf: d.args.p[0] = static_cast<uint32_t>(node.param<int32_t>(0)); break;
    default: break;
  }
  if (node.op == Op::mul_mat || node.op == Op::mul_mat_id) {
    d.groups = mul_mat_groups(node, limits);
    d.spec[5] = vec4_runs(node, d.args);
  } else if (node.op == Op::rms_norm || node.op == Op::norm || node.op == Op::soft_max) {
    d.groups = spread(static_cast<uint64_t>(node.nrows()), limits);
  } else if (node.op == Op::argmax || node.op == Op::top_k || node.op == Op::top_k_ids) {
    d.groups = spread(static_cast<uint64_t>(node.src[0]->nrows()), limits);
  } else if (node.op == Op::set_rows) {
    d.groups = spread(flat_groups(*node.src[0]), limits);
  } else {
    d.groups = spread(flat_groups(node), limits);
  }
  return d;
}

}  // namespace tensorpc::vulkan
