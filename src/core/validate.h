// Validation of tensor descriptors that come from outside the process (the
// wire), before anything reads or writes the bytes they describe.
//
// validate_layout checks one descriptor on its own: a known type, a shape and
// strides whose byte span can be computed without overflow. validate_node
// checks a computed node against its sources with the same shape and type
// rules Context applies when it builds the node (context.cpp), so a node that
// passes is one Context could have built and a kernel can run. Neither looks
// at buffers or offsets: whoever places the tensor range-checks
// [offset, offset + address_span()) against its buffer.
#pragma once

#include "tensorpc/status.h"
#include "tensorpc/tensor.h"

namespace tensorpc {

// t's type is a known DType; every ne[i] >= 0; ne[0] is a whole number of
// blocks; nb[0] is at least the element (block) size, and exactly it for
// quantized types (their rows are read as dense blocks); strides of plain
// types are multiples of the element size (kernels load elements aligned);
// nelements() and nbytes() are computed without overflow.
Status validate_layout(const Tensor& t);

// Bytes from t's first element to the end of the last address a kernel may
// form from it: nbytes() for a tensor with elements, and for an empty one
// the reach of its strides along the dims it has (kernels still form row
// addresses). Call only after validate_layout accepted t.
uint64_t address_span(const Tensor& t);

// node (op, params, src[] and layout set; view_src not needed) satisfies its
// op's rule: the sources it needs and no others, params in range, and the
// type and shape its sources give under Context's builder. Computed nodes
// (not views) write to a destination whose elements do not overlap, with
// dense rows except for cpy. Leaves (op none) must have no sources. Every
// failure is invalid_argument naming the op and the shapes.
Status validate_node(const Tensor& node);

// True when no two elements of t share a byte (whatever the order of its
// strides). Requires a valid layout.
bool elements_do_not_overlap(const Tensor& t);

}  // namespace tensorpc
