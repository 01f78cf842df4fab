// What mul_mat and mul_mat_id share (ops_mul_mat.cpp, ops_mul_mat_id.cpp):
// converting the activations b into the weight kernel's vec-dot type, and
// the ways of dealing blocks of weight rows out to threads.
//
// Both ops read weights a (src[0]) with a gemm of the kernel table
// (kernels.h) against activations b (src[1]) in the vec-dot type: q8_0 or
// q8_K for quantized weights, f32 otherwise. An f32 b with dense rows is
// read in place where that type is f32.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "cpu/barrier.h"
#include "cpu/kernels.h"
#include "cpu/op_kernels.h"

namespace tensorpc::cpu {

// b must be converted before the weight kernel reads it: its rows are not
// the kernel's type, or not dense.
inline bool b_needs_conversion(DType weights, const Tensor& b) {
  return vec_dot_type(weights) != DType::f32 || !b.rows_are_contiguous();
}

// At most this many rows of b, every thread converts all of them into its
// own scratch slot: a few microseconds of repeated work, and no barrier
// between conversion and use, nor before the next node that shares b
// (barrier_plan.h).
inline constexpr int64_t kPerThreadRows = 4;

inline bool converts_per_thread(const Tensor& b) { return b.nrows() <= kPerThreadRows; }

// Bytes of all of b's rows in the vec-dot type of `weights`.
inline size_t converted_bytes(DType weights, const Tensor& b) {
  return row_bytes(vec_dot_type(weights), b.ne[0]) * static_cast<size_t>(b.nrows());
}

// Row (j, i2, i3) of f32 b in the vec-dot type `vtype`, written to out.
// `gather` (K floats) receives the row first when b's rows are not dense.
inline void convert_b_row(const KernelTable& kernels, DType vtype, const Tensor& b, int64_t j, int64_t i2, int64_t i3,
                          char* out, std::vector<float>& gather) {
  const int64_t K = b.ne[0];
  const float* src = reinterpret_cast<const float*>(b.row(j, i2, i3));
  if (!b.rows_are_contiguous()) {
    gather.resize(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) gather[k] = load_f32(b.at(k, j, i2, i3));
    src = gather.data();
  }
  if (vtype != DType::f32) {
    quantize_activations(kernels, vtype, src, out, K);
  } else {
    std::copy(src, src + K, reinterpret_cast<float*>(out));
  }
}

// Converts every row of b into `out`, densely: row (j, i2, i3) at index
// j + ne1 * (i2 + ne2 * i3), each row_bytes(vec_dot_type(weights), K) bytes.
// With own_slot every thread converts all rows into its own `out`;
// otherwise the threads split the rows of one shared `out` and meet at the
// barrier before any reads them.
inline void convert_b(const ComputeParams& p, DType weights, const Tensor& b, char* out, bool own_slot) {
  const DType vtype = vec_dot_type(weights);
  const size_t vrow = row_bytes(vtype, b.ne[0]);
  const int64_t rows = b.nrows();
  const RowRange r = own_slot ? RowRange{0, rows} : split_rows(rows, p.ith, p.nth);
  std::vector<float> gather;
  for (int64_t row = r.begin; row < r.end; ++row) {
    const auto [j, i2, i3] = row_index(b, row);
    convert_b_row(*p.kernels, vtype, b, j, i2, i3, out + static_cast<size_t>(row) * vrow, gather);
  }
  if (!own_slot) p.barrier->wait();
}

// Blocks of weight rows keep at least this many rows, for the kernels' register tiles.
inline constexpr int64_t kMinRows = 16;

// Against several activation rows (N > 1) the kernels group weight rows in
// register tiles (2, 3 or 6 rows) and cache blocks (96) counted from a
// block's first row, and a row's sum can differ in its last bits between a
// tile and a block's tail. Blocks that start at multiples of this start
// every tile at the same row whatever the thread count, so the result does
// not depend on it: a server with other threads than the client computes
// the same logits (and, in a mixture of experts, chooses the same experts).
inline constexpr int64_t kRowAlign = 96;

// n rounded up to a multiple of `align`.
inline int64_t round_up(int64_t n, int64_t align) { return (n + align - 1) / align * align; }

// The rows of one of M / blocks blocks (blocks_per_batch_for), aligned as
// the result's independence of the thread count needs for N activation rows.
inline int64_t rows_per_block_for(int64_t M, int64_t blocks, int64_t N) {
  const int64_t rows = (M + blocks - 1) / blocks;
  return N > 1 ? round_up(rows, kRowAlign) : rows;
}

// How many blocks of weight rows one batch (of `batches` that share the
// work, each of M weight rows against N activation rows) is cut into.
// Enough chunks that a slow thread's share can be taken over (several per
// thread), but not so many that per-call costs dominate: the prefill kernels
// pack b once per call, so they get fewer, larger blocks; blocks keep at
// least kMinRows rows for the kernels' register tiles. With many batches
// (attention heads, experts), the batches themselves are the chunks.
inline int64_t blocks_per_batch_for(int64_t M, int64_t N, int64_t batches, int nth) {
  if (batches >= 4 * nth) return 1;
  const int64_t wanted = (N < 8 ? 8 : 2) * nth;
  const int64_t most = std::max<int64_t>(1, M / kMinRows);
  return std::clamp<int64_t>(wanted / std::max<int64_t>(1, batches), 1, most);
}

// A part's counter holds the pieces taken from its front (low 32 bits, by
// its owner) and from its back (high 32 bits, by the others); zero is none
// taken, so counters need no reset between nodes. -1: none left.
inline int64_t take_piece(std::atomic<int64_t>& counter, int64_t pieces, bool front) {
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

// Weight rows at decode (b of a few rows): thread t owns part t, rows
// [t M / nth, (t + 1) M / nth), cut into pieces it takes in address order
// and hands to run_rows(m0, m1), so its weights stream from memory as one
// run. A thread done with its own part takes pieces from the far end of the
// others', so one that is descheduled delays no one. Dealing out small
// blocks in turn instead made every thread start a new stream at each
// block, and decode read about 25 % slower (docs/performance.md, "Decode
// reads one weight row at a time"). Uses the node's nth chunk counters.
// Parts and pieces start at multiples of `align` (kRowAlign against
// several activation rows, see there).
template <typename RunRows>
void run_by_parts(const ComputeParams& p, int64_t M, const RunRows& run_rows, int64_t align = 1) {
  constexpr int64_t kPiecesPerPart = 8;
  const int64_t part_rows = round_up((M + p.nth - 1) / p.nth, align);
  const int64_t pieces = std::clamp<int64_t>(part_rows / kMinRows, 1, kPiecesPerPart);
  const int64_t piece_rows = round_up((part_rows + pieces - 1) / pieces, align);
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

}  // namespace tensorpc::cpu
