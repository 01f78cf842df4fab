// GGUF tensors as tensorpc tensors (see gguf_tensors.h).
#include "model/gguf/gguf_tensors.h"

#include <string>

#include "tensorpc/device.h"

namespace tensorpc {

StatusOr<Tensor*> new_gguf_tensor(Context& ctx, const GgufTensorInfo& info) {
  try {
    Tensor* t = ctx.new_tensor(info.type, info.ne.data(), kMaxDims, info.name);
    t->flags |= kFlagWeight;
    return t;
  } catch (const Error& e) {
    // GgufFile validated the shape, so only a hand-made info gets here.
    return e.status().with_context("GGUF tensor '" + info.name + "'");
  }
}

StatusOr<std::vector<Tensor*>> new_gguf_tensors(Context& ctx, const GgufFile& file) {
  std::vector<Tensor*> out;
  out.reserve(file.tensors().size());
  for (const GgufTensorInfo& info : file.tensors()) {
    TENSORPC_ASSIGN_OR_RETURN(auto* t, new_gguf_tensor(ctx, info));
    out.push_back(t);
  }
  return out;
}

StatusOr<TensorBytes> gguf_tensor_bytes(const GgufTensorInfo& info, const Tensor& t) {
  const std::string what = "upload of GGUF tensor '" + info.name + "' into " + describe(t);
  if (t.buffer == nullptr) return invalid_argument(what + ": the tensor is not placed in a buffer");
  if (t.type != info.type || t.ne != info.ne) {
    return invalid_argument(what + ": the file has " + name_of(info.type) + " [" + std::to_string(info.ne[0]) + ", " +
                            std::to_string(info.ne[1]) + ", " + std::to_string(info.ne[2]) + ", " +
                            std::to_string(info.ne[3]) + "]");
  }
  if (!t.is_contiguous()) return invalid_argument(what + ": the tensor is not contiguous");
  if (t.nbytes() != info.bytes.size()) {
    return internal_error(what + ": " + std::to_string(t.nbytes()) + " bytes in the tensor, " +
                          std::to_string(info.bytes.size()) + " in the file");
  }
  return TensorBytes{.tensor = &t, .data = info.bytes.data()};
}

Status upload_gguf_tensor(const GgufTensorInfo& info, const Tensor& t) {
  TENSORPC_RETURN_IF_ERROR(gguf_tensor_bytes(info, t).status());
  if (info.bytes.empty()) return Status();
  return t.buffer->set(t, info.bytes.data(), 0, info.bytes.size());
}

}  // namespace tensorpc
