// Validation of descriptors from outside the process (validate.h).
//
// Node rules are not restated here: validate_node rebuilds the node in a
// scratch Context from stand-ins of its sources (same type, shape and
// strides) with the node's params, so Context's builders stay the single
// statement of every op's shape and type rule, and a rule added there is
// enforced on the wire too. What Context cannot see — the params of the
// builder call, a node's own layout, overflow — is checked here.
#include "core/validate.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/sample_chain.h"
#include "tensorpc/context.h"

namespace tensorpc {
namespace {

std::string shape_str(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < kMaxDims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "]";
}

std::string strides_str(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < kMaxDims; ++i) s += (i ? ", " : "") + std::to_string(t.nb[i]);
  return s + "]";
}

Status node_error(const Tensor& node, const std::string& what) {
  return invalid_argument(std::string(name_of(node.op)) + ": " + what);
}

// How many sources each op reads; soft_max's mask (src[1]) and rope's
// frequency factors (src[2]) are optional.
struct Arity {
  int required;
  int optional;
};

Arity arity_of(Op op) {
  switch (op) {
    case Op::none: return {0, 0};
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::mul_mat:
    case Op::get_rows:
    case Op::swiglu:
    case Op::concat:
    case Op::set_rows: return {2, 0};
    case Op::soft_max: return {1, 2};  // mask, sinks
    case Op::mul_mat_id: return {3, 0};
    case Op::swiglu_clamp: return {2, 0};
    case Op::rope: return {2, 1};
    case Op::sample: return {3, 0};
    case Op::scale:
    case Op::cpy:
    case Op::rms_norm:
    case Op::norm:
    case Op::silu:
    case Op::gelu:
    case Op::tanh:
    case Op::sigmoid:
    case Op::diag_mask_inf:
    case Op::argmax:
    case Op::top_k:
    case Op::top_k_ids:
    case Op::view:
    case Op::reshape:
    case Op::permute:
    case Op::transpose: return {1, 0};
  }
  return {0, 0};
}

// A leaf in the scratch context with t's type, shape and strides.
Tensor* stand_in(Context& ctx, const Tensor& t) {
  Tensor* s = ctx.new_tensor(t.type, t.ne.data(), kMaxDims);
  s->nb = t.nb;
  return s;
}

// Builds the node from stand-ins of its sources; throws Error on a rule
// violation. Views and cpy are compared by the caller, not by this result.
Tensor* rebuild(Context& ctx, const Tensor& node) {
  Tensor* a = stand_in(ctx, *node.src[0]);
  Tensor* b = node.src[1] ? stand_in(ctx, *node.src[1]) : nullptr;
  switch (node.op) {
    case Op::add: return ctx.add(a, b);
    case Op::sub: return ctx.sub(a, b);
    case Op::mul: return ctx.mul(a, b);
    case Op::div: return ctx.div(a, b);
    case Op::scale: return ctx.scale(a, node.param<float>(0));
    case Op::mul_mat: return ctx.mul_mat(a, b);
    case Op::get_rows: return ctx.get_rows(a, b);
    // The node is cpy's destination: its layout is what a is copied into.
    case Op::cpy: return ctx.cpy(a, stand_in(ctx, node));
    // Likewise the node is set_rows' destination.
    case Op::set_rows: return ctx.set_rows(stand_in(ctx, node), a, b);
    case Op::rms_norm: return ctx.rms_norm(a, node.param<float>(0));
    case Op::norm: return ctx.norm(a, node.param<float>(0));
    case Op::rope: {
      RopeParams p;
      const int32_t mode = node.param<int32_t>(kRopeParamMode);
      p.n_dims = node.param<int32_t>(kRopeParamNDims);
      p.mode = mode & ~kRopeYarnBit;
      p.freq_base = node.param<float>(kRopeParamFreqBase);
      p.freq_scale = node.param<float>(kRopeParamFreqScale);
      if (mode & kRopeYarnBit) {
        p.ext_factor = node.param<float>(kRopeParamExtFactor);
        p.attn_factor = node.param<float>(kRopeParamAttnFactor);
        // The node carries the ramp itself (check_packed_params), not the
        // context it came from; any context lets Context check the rest.
        p.n_ctx_orig = 4096;
      }
      Tensor* factors = node.src[2] ? stand_in(ctx, *node.src[2]) : nullptr;
      return ctx.rope(a, b, p, factors);
    }
    case Op::soft_max:
      return ctx.soft_max(a, b, node.param<float>(0), node.src[2] ? stand_in(ctx, *node.src[2]) : nullptr);
    case Op::mul_mat_id: return ctx.mul_mat_id(a, b, stand_in(ctx, *node.src[2]));
    case Op::top_k_ids: return ctx.top_k_ids(a, node.param<int32_t>(0));
    case Op::swiglu_clamp: return ctx.swiglu_clamp(a, b, node.param<float>(0), node.param<float>(1));
    case Op::silu: return ctx.silu(a);
    case Op::gelu: return ctx.gelu(a);
    case Op::tanh: return ctx.tanh(a);
    case Op::sigmoid: return ctx.sigmoid(a);
    case Op::swiglu: return ctx.swiglu(a, b);
    case Op::diag_mask_inf: return ctx.diag_mask_inf(a, node.param<int32_t>(0));
    case Op::concat: return ctx.concat(a, b, node.param<int32_t>(0));
    case Op::argmax: return ctx.argmax(a);
    case Op::top_k: return ctx.top_k(a, node.param<int32_t>(0));
    case Op::sample:
      return ctx.sample(a, b, stand_in(ctx, *node.src[2]), sample_settings_of(node),
                        node.param<int32_t>(kSampleParamNVocab));
    case Op::reshape: return ctx.reshape(a, {node.ne[0], node.ne[1], node.ne[2], node.ne[3]});
    case Op::permute:
      return ctx.permute(a, node.param<int32_t>(0), node.param<int32_t>(1), node.param<int32_t>(2),
                         node.param<int32_t>(3));
    case Op::transpose: return ctx.transpose(a);
    case Op::view:  // has no rule beyond the layout; checked by the caller
    case Op::none: break;
  }
  return nullptr;
}

// Checks Context cannot make because the builder would overflow first.
Status check_before_rebuild(const Tensor& node) {
  if (node.op == Op::concat) {
    const int dim = node.param<int32_t>(0);
    if (dim < 0 || dim >= kMaxDims) return node_error(node, "dim " + std::to_string(dim) + " is not in [0, 4)");
    int64_t sum;
    if (__builtin_add_overflow(node.src[0]->ne[dim], node.src[1]->ne[dim], &sum)) {
      return node_error(node, "the joined dim " + std::to_string(dim) + " overflows");
    }
  }
  return Status();
}

// Params that Context computes rather than takes, so rebuilding the node
// does not check them: rope's YaRN ramp.
Status check_packed_params(const Tensor& node) {
  if (node.op != Op::rope) return Status();
  if ((node.param<int32_t>(kRopeParamMode) & kRopeYarnBit) == 0) {
    for (int i = kRopeParamExtFactor; i <= kRopeParamCorrHigh; ++i) {
      if (node.params[i] != 0) {
        return node_error(node, "param " + std::to_string(i) + " is set but the mode has no YaRN bit");
      }
    }
    return Status();
  }
  const double top = node.param<int32_t>(kRopeParamNDims) - 1;
  for (int i : {kRopeParamCorrLow, kRopeParamCorrHigh}) {
    const float v = node.param<float>(i);
    if (!(v >= 0.0f && v <= top)) {  // NaN fails too
      return node_error(node, std::string(i == kRopeParamCorrLow ? "corr_low " : "corr_high ") + std::to_string(v) +
                                  " is not in [0, n_dims - 1]");
    }
  }
  return Status();
}

}  // namespace

Status validate_layout(const Tensor& t) {
  const auto id = static_cast<uint32_t>(t.type);
  if (!dtype_from_id(id)) {
    return invalid_argument("type " + gguf_type_name(id) + " (id " + std::to_string(id) + ") is not one tensorpc runs");
  }
  const DTypeTraits& tr = traits(t.type);
  // Built only on failure: this runs for every tensor of every graph.
  const auto fail = [&](const std::string& why) {
    return invalid_argument(std::string(tr.name) + " tensor " + shape_str(t) + " with strides " + strides_str(t) +
                            ": " + why);
  };
  // The product of the non-zero dims bounds every product of dims that code
  // forms (nelements, nrows, ne[2] * ne[3], in any order), so none of them
  // overflows even for an empty tensor with huge other dims.
  int64_t nonzero_product = 1;
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] < 0) return fail("ne[" + std::to_string(i) + "] is negative");
    if (t.ne[i] != 0 && __builtin_mul_overflow(nonzero_product, t.ne[i], &nonzero_product)) {
      return fail("the element count overflows");
    }
  }
  if (t.ne[0] % tr.block_size != 0) {
    return fail("ne[0] is not a multiple of the block size " + std::to_string(tr.block_size));
  }
  if (tr.is_quantized ? t.nb[0] != tr.block_bytes : t.nb[0] < tr.block_bytes) {
    return fail(tr.is_quantized ? "nb[0] must be the block size " + std::to_string(tr.block_bytes)
                                : "nb[0] must be at least the element size " + std::to_string(tr.block_bytes));
  }
  const size_t align = storage_alignment(t.type);
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.nb[i] % align != 0) {
      return fail("nb[" + std::to_string(i) + "] is not a multiple of the " + std::string(tr.name) + " alignment " +
                  std::to_string(align));
    }
  }
  // The same sum as Tensor::nbytes(), each step checked. An empty tensor
  // spans no bytes, but kernels still form row addresses along its other
  // dims, so those must not overflow either.
  uint64_t bytes = tr.block_bytes;
  for (int i = 0; i < kMaxDims; ++i) {
    const int64_t count = i == 0 ? t.ne[0] / tr.block_size : t.ne[i];
    const auto steps = static_cast<uint64_t>(std::max<int64_t>(count - 1, 0));
    uint64_t span;
    if (__builtin_mul_overflow(steps, t.nb[i], &span) || __builtin_add_overflow(bytes, span, &bytes)) {
      return fail("the byte span overflows");
    }
  }
  return Status();
}

uint64_t address_span(const Tensor& t) {
  uint64_t bytes = block_bytes(t.type);
  for (int i = 0; i < kMaxDims; ++i) {
    const int64_t count = i == 0 ? t.ne[0] / block_size(t.type) : t.ne[i];
    bytes += static_cast<uint64_t>(std::max<int64_t>(count - 1, 0)) * t.nb[i];
  }
  return bytes;
}

bool elements_do_not_overlap(const Tensor& t) {
  struct Dim {
    uint64_t count;  // blocks for dim 0
    uint64_t stride;
  };
  Dim dims[kMaxDims];
  int n = 0;
  for (int i = 0; i < kMaxDims; ++i) {
    const auto count = static_cast<uint64_t>(i == 0 ? t.ne[0] / block_size(t.type) : t.ne[i]);
    if (count == 0) return true;  // no elements at all
    if (count > 1) dims[n++] = {count, t.nb[i]};
  }
  // Insertion sort by stride: at most four dims.
  for (int i = 1; i < n; ++i) {
    for (int j = i; j > 0 && dims[j].stride < dims[j - 1].stride; --j) std::swap(dims[j], dims[j - 1]);
  }
  // Each dim must step past everything the smaller-strided dims span. The
  // partial spans are bounded by nbytes(), which validate_layout checked.
  uint64_t extent = block_bytes(t.type);
  for (int i = 0; i < n; ++i) {
    if (dims[i].stride < extent) return false;
    extent += (dims[i].count - 1) * dims[i].stride;
  }
  return true;
}

Status validate_node(const Tensor& node) {
  const auto op_id = static_cast<uint32_t>(node.op);
  if (op_id >= kOpCount) return invalid_argument("unknown op " + std::to_string(op_id));
  if (Status s = validate_layout(node); !s.ok()) return s.with_context(std::string(name_of(node.op)) + ": the node");

  const Arity arity = arity_of(node.op);
  for (int i = 0; i < kMaxSources; ++i) {
    const bool present = node.src[i] != nullptr;
    if (i < arity.required && !present) return node_error(node, "source " + std::to_string(i) + " is missing");
    if (i >= arity.required + arity.optional && present) {
      return node_error(node, "has a source " + std::to_string(i) + " it does not read");
    }
    if (present) {
      TENSORPC_RETURN_IF_ERROR(
          validate_layout(*node.src[i]).with_context(std::string(name_of(node.op)) + ": source " + std::to_string(i)));
    }
  }
  if (node.op == Op::none) return Status();

  const Tensor& a = *node.src[0];
  if (is_view_op(node.op)) {
    // A view names its own bytes on the wire; it must keep its source's type.
    if (node.type != a.type) {
      return node_error(node, "a view of " + describe(a) + " cannot be " + name_of(node.type));
    }
    if (node.nb[0] != block_bytes(node.type) && node.op == Op::view) {
      return node_error(node, "nb[0] must be the element (block) size of " + describe(a));
    }
  } else {
    // Kernels write a destination element by element: overlapping elements
    // would be written twice (by different threads), and dense rows are what
    // every kernel but cpy's and set_rows' writes.
    if (!elements_do_not_overlap(node)) {
      return node_error(node, describe(node) + " with strides " + strides_str(node) + ": its elements overlap");
    }
    if (node.op != Op::cpy && node.op != Op::set_rows && node.nb[0] != block_bytes(node.type)) {
      return node_error(node, describe(node) + " with strides " + strides_str(node) + ": rows must be dense");
    }
  }
  TENSORPC_RETURN_IF_ERROR(check_before_rebuild(node));
  if (node.op == Op::view) return Status();

  Context ctx;
  const Tensor* built = nullptr;
  try {
    built = rebuild(ctx, node);
  } catch (const Error& e) {
    return e.status();
  }
  if (built == nullptr) return internal_error(std::string(name_of(node.op)) + ": no rule to check");
  const bool compare_strides = is_view_op(node.op);  // a view's layout follows from its source's
  if (built->type != node.type || built->ne != node.ne || (compare_strides && built->nb != node.nb)) {
    std::string want = describe(*built);
    std::string got = describe(node);
    if (compare_strides) {
      want += " with strides " + strides_str(*built);
      got += " with strides " + strides_str(node);
    }
    return node_error(node, "the node is " + got + " but its sources make " + want);
  }
  return check_packed_params(node);
}

}  // namespace tensorpc
