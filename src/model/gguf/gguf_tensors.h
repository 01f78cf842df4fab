// Bridging GGUF tensors to tensorpc tensors: a descriptor in a Context for
// each GGUF tensor, and the upload of its bytes into the buffer it is placed
// in, straight from the file's mapping.
//
// Ownership: descriptors belong to the Context; the bytes stay in the
// GgufFile's mapping until uploaded, and the buffer owns its copy after.
// Placing the descriptors into buffers (where, on which device) is the
// caller's choice and not made here.
#pragma once

#include <vector>

#include "model/gguf/gguf.h"
#include "tensorpc/context.h"
#include "tensorpc/device.h"
#include "tensorpc/status.h"
#include "tensorpc/tensor.h"

namespace tensorpc {

// A new contiguous leaf in ctx with info's type, shape and name, flagged as
// a weight. Not placed in any buffer yet.
StatusOr<Tensor*> new_gguf_tensor(Context& ctx, const GgufTensorInfo& info);

// One descriptor per tensor of the file, in file order.
StatusOr<std::vector<Tensor*>> new_gguf_tensors(Context& ctx, const GgufFile& file);

// Copies info's bytes from the mapping into t's buffer (Buffer::set: one
// copy, the device's own). t must be placed, contiguous, and have info's
// type and shape.
Status upload_gguf_tensor(const GgufTensorInfo& info, const Tensor& t);
// The same checks, and t with info's bytes in the mapping, for uploading
// many tensors of one buffer at once (Buffer::set_tensors).
StatusOr<TensorBytes> gguf_tensor_bytes(const GgufTensorInfo& info, const Tensor& t);

}  // namespace tensorpc
