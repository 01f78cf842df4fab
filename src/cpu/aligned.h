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

// Row r of an array of rows `stride` bytes apart.
template <typename T>
const T* row_at(const void* base, int64_t r, size_t stride) {
  return reinterpret_cast<const T*>(static_cast<const char*>(base) + r * stride);
}

}  // namespace
}  // namespace tensorpc::cpu
