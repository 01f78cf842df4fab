// The CPU kernels of every op, and the table that maps an op to its kernel.
//
// A kernel computes one node. All threads of the pool call it with the same
// dst and their own ith in [0, nth); each does its share (usually a range of
// rows) and returns. A kernel that needs a preparation step shared by all
// threads (quantizing b for mul_mat) does it in parallel, then calls
// params.barrier->wait() before using the result. Scratch memory `wdata` of
// the size work_size() asked for is shared by all threads of the node.
// Kernels read sources through ne/nb, so non-contiguous sources work.
#pragma once

#include <cstddef>

#include "tensorpc/tensor.h"

namespace tensorpc::cpu {

class Barrier;
struct KernelTable;

struct ComputeParams {
  int ith = 0;
  int nth = 1;
  void* wdata = nullptr;
  size_t wsize = 0;
  Barrier* barrier = nullptr;
  const KernelTable* kernels = nullptr;
};

using OpKernel = void (*)(const ComputeParams& params, Tensor& dst);
// Scratch bytes a node needs for nth threads (0 for most ops).
using WorkSizeFn = size_t (*)(const Tensor& dst, int nth);

struct OpEntry {
  OpKernel kernel = nullptr;      // null: op computes nothing (views, none)
  WorkSizeFn work_size = nullptr;  // null: needs no scratch
};

// The entry for op; every Op has one.
const OpEntry& op_entry(Op op);

// Rows [begin, end) of `n` rows that thread ith of nth takes.
struct RowRange {
  int64_t begin;
  int64_t end;
};
inline RowRange split_rows(int64_t n, int ith, int nth) {
  const int64_t per = (n + nth - 1) / nth;
  const int64_t begin = per * ith < n ? per * ith : n;
  const int64_t end = begin + per < n ? begin + per : n;
  return {begin, end};
}

// Kernels, grouped by the file that defines them.
// ops_binary.cpp
void op_add(const ComputeParams&, Tensor&);
void op_sub(const ComputeParams&, Tensor&);
void op_mul(const ComputeParams&, Tensor&);
void op_div(const ComputeParams&, Tensor&);
void op_scale(const ComputeParams&, Tensor&);
// ops_unary.cpp
void op_silu(const ComputeParams&, Tensor&);
void op_gelu(const ComputeParams&, Tensor&);
void op_swiglu(const ComputeParams&, Tensor&);
// ops_norm.cpp
void op_rms_norm(const ComputeParams&, Tensor&);
void op_norm(const ComputeParams&, Tensor&);
// ops_rope.cpp
void op_rope(const ComputeParams&, Tensor&);
// ops_softmax.cpp
void op_soft_max(const ComputeParams&, Tensor&);
void op_diag_mask_inf(const ComputeParams&, Tensor&);
// ops_copy.cpp
void op_cpy(const ComputeParams&, Tensor&);
void op_get_rows(const ComputeParams&, Tensor&);
void op_concat(const ComputeParams&, Tensor&);
void op_argmax(const ComputeParams&, Tensor&);
// ops_mul_mat.cpp
void op_mul_mat(const ComputeParams&, Tensor&);
size_t mul_mat_work_size(const Tensor& dst, int nth);

}  // namespace tensorpc::cpu
