// Scratch memory and strided-row access for the kernel tables (kernels_*.cpp) and the CPU
// device's buffers: owned, 64-byte aligned arrays freed with std::free.
//
// The kernel files are compiled for different instruction sets, so this header must stay free
// of intrinsics, and everything in it has internal linkage (an unnamed namespace): each file
// keeps its own copy, and the linker can never hand an AVX-512 build of a helper to code
// running on a CPU without it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace tensorpc::cpu {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
using AlignedArray = std::unique_ptr<T[], FreeDeleter>;

// count elements of T (at least 64 bytes, rounded up to 64); null when the allocation fails.
template <typename T>
AlignedArray<T> make_aligned(size_t count) {
  const size_t bytes = std::max<size_t>(64, (count * sizeof(T) + 63) & ~size_t{63});
  return AlignedArray<T>(static_cast<T*>(std::aligned_alloc(64, bytes)));
}

// Scratch of count elements of T for one kernel call, kept by the calling thread
// for its next call: allocating and freeing it for every weight block, hundreds
// of times a step, cost more than a decode block's quantized dot products, and a
// prefill's scratch (its activations copied, a few hundred KiB) would otherwise be
// allocated and freed by every gemm call. Scratch over 8 MiB is the caller's own
// (`owned`) and freed when it goes. Null when the allocation fails. One live use
// per thread and Tag.
template <typename T, typename Tag>
T* call_scratch(size_t count, AlignedArray<T>& owned) {
  constexpr size_t kKeptBytes = size_t{8} << 20;
  if (count * sizeof(T) > kKeptBytes) {
    owned = make_aligned<T>(count);
    return owned.get();
  }
  thread_local AlignedArray<T> kept;
  thread_local size_t kept_count = 0;
  if (kept_count < count) {
    const size_t grown = std::max<size_t>(count, (size_t{16} << 10) / sizeof(T));  // at least 16 KiB
    kept = make_aligned<T>(grown);
    kept_count = kept ? grown : 0;
  }
  return kept.get();
}

// Rows [0, mr) of nr columns of an RA-row register tile, out[c * RA + r], stored at
// C[c * ldc + r]. A full tile's copies have a constant length and compile to moves; as one
// variable-length loop, GCC made each column a call to memcpy (with a vzeroupper before it),
// which took 12-17 % of a prefill mul_mat in the 3 x 6 VNNI tiles.
template <int RA>
void store_tile(const float* out, int64_t mr, int64_t nr, float* C, size_t ldc) {
  for (int64_t c = 0; c < nr; ++c) {
    float* dst = C + c * static_cast<int64_t>(ldc);
    if (mr == RA) {
      for (int r = 0; r < RA; ++r) dst[r] = out[c * RA + r];
    } else {
      for (int64_t r = 0; r < mr; ++r) dst[r] = out[c * RA + r];
    }
  }
}

// Row r of an array of rows `stride` bytes apart.
template <typename T>
const T* row_at(const void* base, int64_t r, size_t stride) {
  return reinterpret_cast<const T*>(static_cast<const char*>(base) + r * stride);
}

// The row a kernel prefetches while it reads rows [i, i + step) of M rows `stride` bytes long:
// the first whole row at least kPrefetchAhead bytes on. A weight stream from DRAM needs that
// much in flight to run at the memory's speed; the next row alone (a few hundred bytes for
// K = 1024) left a thread's decode at about 0.6x of the read loop (docs/performance.md,
// "Decode reads one weight row at a time").
inline constexpr size_t kPrefetchAhead = 2048;
inline int64_t prefetch_row(int64_t i, int64_t step, int64_t M, size_t stride) {
  if (stride == 0) return std::min(i + step, M - 1);  // rows that overlap (a view that repeats one)
  const auto rows = static_cast<int64_t>((kPrefetchAhead + stride - 1) / stride);
  return std::min(i + step * std::max<int64_t>(1, (rows + step - 1) / step), M - 1);
}

// Prefetches the whole of `rows` rows from prefetch_row(i, rows, M, stride) on, for decode kernels
// that read rows [i, i + rows) now and have no prefetch of their own in the loop.
inline void prefetch_rows_ahead(const void* A, int64_t i, int64_t rows, int64_t M, size_t stride) {
  const int64_t first = prefetch_row(i, rows, M, stride);
  const size_t bytes = static_cast<size_t>(std::min(rows, M - first)) * stride;
  const char* p = row_at<char>(A, first, stride);
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
}

}  // namespace
}  // namespace tensorpc::cpu
