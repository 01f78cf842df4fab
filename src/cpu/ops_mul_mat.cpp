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
#include <vector>

#include "core/quant.h"
#include "cpu/barrier.h"
#include "cpu/kernels.h"
#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

// b is used where it lies when its rows are already what the kernel reads.
bool b_needs_conversion(const Tensor& dst) {
  const Tensor& b = *dst.src[1];
  return vec_dot_type(dst.src[0]->type) != DType::f32 || !b.rows_are_contiguous();
}

// At most this many rows of b, every thread converts all of them.
constexpr int64_t kPerThreadRows = 4;

bool converts_per_thread(const Tensor& dst) { return dst.src[1]->nrows() <= kPerThreadRows; }

size_t converted_bytes(const Tensor& dst) {
  const Tensor& b = *dst.src[1];
  return row_bytes(vec_dot_type(dst.src[0]->type), b.ne[0]) * static_cast<size_t>(b.nrows());
}

// Blocks of weight rows keep at least this many rows, for the kernels' register tiles.
constexpr int64_t kMinRows = 16;

// How many blocks of weight rows one batch is cut into. Enough chunks that a
// slow thread's share can be taken over (several per thread), but not so
// many that per-call costs dominate: the prefill kernels pack b once per
// call, so they get fewer, larger blocks; blocks keep at least kMinRows rows
// for the kernels' register tiles. With many batches (attention heads), the
// batches themselves are the chunks.
int64_t blocks_per_batch_for(int64_t M, int64_t N, int64_t batches, int nth) {
  if (batches >= 4 * nth) return 1;
  const int64_t wanted = (N < 8 ? 8 : 2) * nth;
  const int64_t most = std::max<int64_t>(1, M / kMinRows);
  return std::clamp<int64_t>(wanted / std::max<int64_t>(1, batches), 1, most);
}

// Weight rows at decode (b of a few rows, one batch): thread t owns part t,
// rows [t M / nth, (t + 1) M / nth), cut into pieces it takes in address
// order, so its weights stream from memory as one run. A thread done with
// its own part takes pieces from the far end of the others', so one that is
// descheduled delays no one. Dealing out small blocks in turn instead made
// every thread start a new stream at each block, and decode read about 25 %
// slower (docs/performance.md, "Decode reads one weight row at a time").
bool reads_by_parts(int64_t N, int64_t batches) { return N < 8 && batches == 1; }

// A part's counter holds the pieces taken from its front (low 32 bits, by
// its owner) and from its back (high 32 bits, by the others); zero is none
// taken, so counters need no reset between nodes. -1: none left.
int64_t take_piece(std::atomic<int64_t>& counter, int64_t pieces, bool front) {
  constexpr int64_t kBack = int64_t{1} << 32;
  int64_t v = counter.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t from_front = v & (kBack - 1);
    const int64_t from_back = v >> 32;
    if (from_front + from_back >= pieces) return -1;
    if (counter.compare_exchange_weak(v, v + (front ? 1 : kBack), std::memory_order_relaxed))
      return front ? from_front : pieces - 1 - from_back;
  }
}

template <typename RunRows>
void run_by_parts(const ComputeParams& p, int64_t M, const RunRows& run_rows) {
  constexpr int64_t kPiecesPerPart = 8;
  const int64_t part_rows = (M + p.nth - 1) / p.nth;
  const int64_t pieces = std::clamp<int64_t>(part_rows / kMinRows, 1, kPiecesPerPart);
  const int64_t piece_rows = (part_rows + pieces - 1) / pieces;
  auto run_piece = [&](int part, int64_t piece) {
    const int64_t m0 = std::min(M, part * part_rows + piece * piece_rows);
    const int64_t m1 = std::min({M, m0 + piece_rows, (part + 1) * part_rows});
    if (m0 < m1) run_rows(m0, m1);
  };
  for (int64_t piece; (piece = take_piece(p.next_chunk[p.ith], pieces, true)) >= 0;) run_piece(p.ith, piece);
  for (int k = 1; k < p.nth; ++k) {
    const int part = (p.ith + k) % p.nth;
    for (int64_t piece; (piece = take_piece(p.next_chunk[part], pieces, false)) >= 0;) run_piece(part, piece);
  }
}

}  // namespace

size_t mul_mat_work_size(const Tensor& dst, int nth) {
  if (!b_needs_conversion(dst)) return 0;
  if (!converts_per_thread(dst)) return converted_bytes(dst);
  const size_t slot = (converted_bytes(dst) + 63) / 64 * 64;
  return slot * static_cast<size_t>(nth);
}

Scratch mul_mat_scratch(const Tensor& dst) {
  if (!b_needs_conversion(dst)) return Scratch::none;
  return converts_per_thread(dst) ? Scratch::per_thread : Scratch::shared;
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
  const bool convert = b_needs_conversion(dst);
  const bool own_slot = convert && converts_per_thread(dst);
  char* converted = own_slot ? scratch_slot(p) : static_cast<char*>(p.wdata);
  if (convert) {
    const int64_t rows = b.nrows();
    const RowRange r = own_slot ? RowRange{0, rows} : split_rows(rows, p.ith, p.nth);
    std::vector<float> scratch(b.rows_are_contiguous() ? 0 : static_cast<size_t>(K));
    for (int64_t row = r.begin; row < r.end; ++row) {
      const auto [j, i2, i3] = row_index(b, row);
      const float* src = reinterpret_cast<const float*>(b.row(j, i2, i3));
      if (!b.rows_are_contiguous()) {
        for (int64_t k = 0; k < K; ++k) scratch[k] = load_f32(b.at(k, j, i2, i3));
        src = scratch.data();
      }
      char* out = converted + static_cast<size_t>(row) * vrow;
      if (vtype != DType::f32) {
        quantize_activations(*p.kernels, vtype, src, out, K);
      } else {
        std::copy(src, src + K, reinterpret_cast<float*>(out));
      }
    }
    if (!own_slot) p.barrier->wait();
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
    run_by_parts(p, M, [&](int64_t m0, int64_t m1) { gemm(K, m1 - m0, N, a.row(m0, 0, 0), a.nb[1], B, ldb, C + m0, ldc); });
    return;
  }
  const int64_t blocks_per_batch = blocks_per_batch_for(M, N, batches, p.nth);
  const int64_t rows_per_block = (M + blocks_per_batch - 1) / blocks_per_batch;
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
