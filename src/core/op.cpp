#include "tensorpc/op.h"

namespace tensorpc {

const char* name_of(Op op) {
  static constexpr const char* kNames[kOpCount] = {
      "none",          "add",      "sub",    "mul",        "div",       "scale",        "mul_mat",   "get_rows",
      "cpy",           "rms_norm", "norm",   "rope",       "soft_max",  "silu",         "gelu",      "swiglu",
      "diag_mask_inf", "concat",   "argmax", "view",       "reshape",   "permute",      "transpose", "set_rows",
      "top_k",         "tanh",     "sample", "mul_mat_id", "top_k_ids", "swiglu_clamp", "sigmoid"};
  const auto i = static_cast<uint32_t>(op);
  return i < kOpCount ? kNames[i] : "unknown op";
}

bool is_view_op(Op op) {
  return op == Op::view || op == Op::reshape || op == Op::permute || op == Op::transpose;
}

}  // namespace tensorpc
