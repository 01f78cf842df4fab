// mul_mat on the CPU: dst[M,N,…] = a[K,M,…] x b[K,N,…], a broadcast over b in
// dims 2 and 3.
//
// Two phases. First, all threads convert b's rows into the "vec-dot type" the
// weight kernel reads (q8_0 for quantized weights, f32 otherwise) in scratch
// memory; f32 b with dense rows is used in place. A b of a few rows (decode)
// is converted whole by every thread into its own slot instead: a few
// microseconds of repeated work, and no barrier between the phases or
// before the next node that shares b (barrier_plan.h). Then blocks of weight
// rows are dealt out to threads, and each calls the table's gemm kernel on its
// block against all N columns, so the weights — the bulk of the bytes at
// decode — are read once. At decode each thread reads one contiguous part of
// the rows (run_by_parts), as one stream from DRAM; otherwise (batch, block)
// pairs are taken in turn.
#include <algorithm>

#include "cpu/mul_mat_common.h"

namespace tensorpc::cpu {
namespace {

bool needs_conversion(const Tensor& dst) { return b_needs_conversion(dst.src[0]->type, *dst.src[1]); }

// Weight rows are read by parts (run_by_parts) at decode: b of a few rows, one batch.
bool reads_by_parts(int64_t N, int64_t batches) { return N < 8 && batches == 1; }

}  // namespace

size_t mul_mat_work_size(const Tensor& dst, int nth) {
  if (!needs_conversion(dst)) return 0;
  const size_t bytes = converted_bytes(dst.src[0]->type, *dst.src[1]);
  if (!converts_per_thread(*dst.src[1])) return bytes;
  const size_t slot = (bytes + 63) / 64 * 64;
  return slot * static_cast<size_t>(nth);
}

Scratch mul_mat_scratch(const Tensor& dst) {
  if (!needs_conversion(dst)) return Scratch::none;
  return converts_per_thread(*dst.src[1]) ? Scratch::per_thread : Scratch::shared;
}

void op_mul_mat(const ComputeParams& p, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const Tensor& b = *dst.src[1];
  const int64_t K = a.ne[0];
  const int64_t M = a.ne[1];
  const int64_t N = b.ne[1];
  const int64_t r2 = b.ne[2] / a.ne[2];  // b batches per a batch (broadcast)
  const int64_t r3 = b.ne[3] / a.ne[3];
  if (M == 0 || N == 0 || b.ne[2] == 0 || b.ne[3] == 0) return;

  // Phase 1: b in the vec-dot type, densely: row (j, i2, i3) at index j + N*(i2 + ne2*i3).
  const DType vtype = vec_dot_type(a.type);
  const size_t vrow = row_bytes(vtype, K);
  const char* bdata = static_cast<const char*>(b.data);
  size_t ldb = b.nb[1];
  const bool convert = needs_conversion(dst);
  if (convert) {
    const bool own_slot = converts_per_thread(b);
    char* converted = own_slot ? scratch_slot(p) : static_cast<char*>(p.wdata);
    convert_b(p, a.type, b, converted, own_slot);
    bdata = converted;
    ldb = vrow;
  }

  // Phase 2: blocks of weight rows, taken dynamically.
  const GemmFn gemm = gemm_for(*p.kernels, a.type);  // every table has every weight type
  const int64_t batches = b.ne[2] * b.ne[3];
  const size_t ldc = dst.nb[1] / sizeof(float);
  if (reads_by_parts(N, batches)) {
    const char* B = convert ? bdata : static_cast<const char*>(b.data);
    float* C = reinterpret_cast<float*>(dst.data);
    run_by_parts(
        p, M, [&](int64_t m0, int64_t m1) { gemm(K, m1 - m0, N, a.row(m0, 0, 0), a.nb[1], B, ldb, C + m0, ldc); },
        N > 1 ? kRowAlign : 1);
    return;
  }
  const int64_t blocks_per_batch = blocks_per_batch_for(M, N, batches, p.nth);
  const int64_t rows_per_block = rows_per_block_for(M, blocks_per_batch, N);
  for (int64_t item = p.next_chunk->fetch_add(1); item < batches * blocks_per_batch; item = p.next_chunk->fetch_add(1)) {
    const int64_t batch = item / blocks_per_batch;
    const int64_t m0 = (item % blocks_per_batch) * rows_per_block;
    const int64_t m1 = std::min(M, m0 + rows_per_block);
    if (m0 >= m1) continue;
    const int64_t i2 = batch % b.ne[2];
    const int64_t i3 = batch / b.ne[2];
    const char* A = a.row(m0, i2 / r2, i3 / r3);
    const char* B = convert ? bdata + static_cast<size_t>(N * batch) * vrow : bdata + i2 * b.nb[2] + i3 * b.nb[3];
    float* C = reinterpret_cast<float*>(dst.row(0, i2, i3)) + m0;
    gemm(K, m1 - m0, N, A, a.nb[1], B, ldb, C, ldc);
  }
}

}  // namespace tensorpc::cpu
