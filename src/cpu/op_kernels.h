// The CPU kernels of every op, and the table that maps an op to its kernel.
//
// A kernel computes one node. All threads of the pool call it with the same
// dst and their own ith in [0, nth); each does its share (usually a range of
// rows) and returns. A kernel that needs a preparation step shared by all
// threads (quantizing b for mul_mat) does it in parallel, then calls
// params.barrier->wait() before using the result. Scratch memory `wdata` of
// the size work_size() asked for is shared by all threads of the node, or cut
// into one slot a thread (Scratch::per_thread, see scratch_slot).
// Kernels read sources through ne/nb, so non-contiguous sources work. A
// kernel whose own scratch does not fit in memory throws std::bad_alloc; the
// device stops the graph there and returns a Status (CpuDevice::compute).
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

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
  // nth counters that start at 0 for each node, shared by its threads: kernels
  // that deal out chunks dynamically take the next one with fetch_add on the
  // first (or keep one per thread's part, as mul_mat at decode does), so a
  // thread that is descheduled (a shared or busy machine) delays no one.
  std::atomic<int64_t>* next_chunk = nullptr;
};

using OpKernel = void (*)(const ComputeParams& params, Tensor& dst);
// Scratch bytes a node needs for nth threads (0 for most ops).
using WorkSizeFn = size_t (*)(const Tensor& dst, int nth);

// How a node uses the scratch memory, which decides whether the next node
// may start before every thread is done with it (barrier_plan.h). Ordered:
// a node "in flight" uses the most of its nodes'.
enum class Scratch : uint8_t {
  none,        // not at all
  per_thread,  // each thread only its own slot: scratch_slot()
  shared,      // threads write parts that other threads read
};
using ScratchFn = Scratch (*)(const Tensor& dst);

struct OpEntry {
  OpKernel kernel = nullptr;       // null: op computes nothing (views, none)
  WorkSizeFn work_size = nullptr;  // null: needs no scratch
  ScratchFn scratch = nullptr;     // null: shared when work_size is set
};

// The entry for op; every Op has one.
const OpEntry& op_entry(Op op);

inline Scratch scratch_of(const OpEntry& entry, const Tensor& dst) {
  if (entry.scratch != nullptr) return entry.scratch(dst);
  return entry.work_size != nullptr ? Scratch::shared : Scratch::none;
}

// The slot of thread p.ith in a per-thread scratch. Every node's slot for a
// thread starts at the same place (the graph's scratch split evenly), so a
// node may fill its slot while another thread still reads its own slot of the
// node before. A per-thread node's work_size is nth slots of whole cache lines.
inline char* scratch_slot(const ComputeParams& p) {
  const size_t slot = p.wsize / static_cast<size_t>(p.nth) / 64 * 64;
  return static_cast<char*>(p.wdata) + slot * static_cast<size_t>(p.ith);
}

// For tests of the failure path: the next `count` kernel calls for nodes of
// op `op`, on any CPU device of the process, throw std::bad_alloc as a kernel
// whose scratch did not fit in memory does. count 0 cancels.
void inject_kernel_failures(Op op, int count);
// True (and one injected failure used up) when the next call for op is to fail.
bool take_injected_kernel_failure(Op op);

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

// Position (i1, i2, i3) of row r of t, rows numbered with i1 fastest (the
// order split_rows hands them out in).
struct RowIndex {
  int64_t i1, i2, i3;
};
inline RowIndex row_index(const Tensor& t, int64_t r) {
  return {r % t.ne[1], (r / t.ne[1]) % t.ne[2], r / (t.ne[1] * t.ne[2])};
}

// One f32 element at a byte address (strided rows).
inline float load_f32(const char* p) { return *reinterpret_cast<const float*>(p); }
inline void store_f32(char* p, float v) { *reinterpret_cast<float*>(p) = v; }

// Row c of f32 tensor t as a dense array: t's own memory when its elements are
// dense, else a copy gathered into buf.
inline const float* load_row_f32(const Tensor& t, const RowIndex& c, std::vector<float>& buf) {
  const char* p = t.row(c.i1, c.i2, c.i3);
  if (t.nb[0] == sizeof(float)) return reinterpret_cast<const float*>(p);
  buf.resize(t.ne[0]);
  for (int64_t i = 0; i < t.ne[0]; ++i) buf[i] = load_f32(p + i * t.nb[0]);
  return buf.data();
}

// Scatters the dense values v into row c of f32 tensor t, whatever its stride.
inline void store_row_f32(const Tensor& t, const RowIndex& c, const float* v) {
  char* p = t.row(c.i1, c.i2, c.i3);
  for (int64_t i = 0; i < t.ne[0]; ++i) store_f32(p + i * t.nb[0], v[i]);
}

// Calls fn(c, x, y) for each row c of dst that thread ith takes, where x is
// row c of f32 src and y receives row c of f32 dst, both dense arrays of ne[0]
// (strided rows are gathered into and scattered from buffers around the call).
template <typename Fn>
void for_each_row_f32(const ComputeParams& params, const Tensor& src, Tensor& dst, Fn&& fn) {
  const bool dst_dense = dst.nb[0] == sizeof(float);
  std::vector<float> in_buf, out_buf(dst_dense ? 0 : dst.ne[0]);
  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex c = row_index(dst, r);
    const float* x = load_row_f32(src, c, in_buf);
    float* y = dst_dense ? reinterpret_cast<float*>(dst.row(c.i1, c.i2, c.i3)) : out_buf.data();
    fn(c, x, y);
    if (!dst_dense) store_row_f32(dst, c, y);
  }
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
void op_tanh(const ComputeParams&, Tensor&);
void op_sigmoid(const ComputeParams&, Tensor&);
void op_swiglu(const ComputeParams&, Tensor&);
void op_swiglu_clamp(const ComputeParams&, Tensor&);
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
// ops_top_k.cpp
void op_top_k(const ComputeParams&, Tensor&);
void op_top_k_ids(const ComputeParams&, Tensor&);
// ops_sample.cpp
void op_sample(const ComputeParams&, Tensor&);
void op_set_rows(const ComputeParams&, Tensor&);
// ops_mul_mat.cpp
void op_mul_mat(const ComputeParams&, Tensor&);
size_t mul_mat_work_size(const Tensor& dst, int nth);
Scratch mul_mat_scratch(const Tensor& dst);
// ops_mul_mat_id.cpp
void op_mul_mat_id(const ComputeParams&, Tensor&);
size_t mul_mat_id_work_size(const Tensor& dst, int nth);
Scratch mul_mat_id_scratch(const Tensor& dst);

}  // namespace tensorpc::cpu
