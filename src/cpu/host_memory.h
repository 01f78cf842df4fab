// HostMemory: the bytes of one CPU buffer, owned and freed with it.
//
// Buffers of kHugePage and more are mapped anonymously, kHugePage-aligned, and
// advised to be backed by transparent huge pages (MADV_HUGEPAGE). Filling a
// fresh buffer — a model's weights arriving from the file, the network or a
// server's weights cache — then faults once per 2 MiB instead of once per
// 4 KiB, and kernels that stream weights miss the TLB far less. On a virtual
// machine where a page fault costs microseconds, copying 126 MiB into a fresh
// buffer drops from about 350 ms to about 20 ms (docs/performance.md). Where
// the kernel has no huge pages the advice is ignored and nothing else changes.
// Smaller buffers come from aligned_alloc. Either way a new buffer's bytes
// are zero: no session of a server sees what another left in memory.
#pragma once

#include <cstdint>

namespace tensorpc::cpu {

inline constexpr uint64_t kHugePage = uint64_t{2} << 20;

class HostMemory {
 public:
  HostMemory() = default;
  // `size` bytes (≥ 1) aligned to `alignment` (a power of two ≤ kHugePage);
  // an empty HostMemory when the host has no room.
  static HostMemory allocate(uint64_t size, uint64_t alignment);
  ~HostMemory();
  HostMemory(HostMemory&& other) noexcept;
  HostMemory& operator=(HostMemory&& other) noexcept;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  char* data() const { return data_; }
  explicit operator bool() const { return data_ != nullptr; }
  // Whether the bytes are a mapping advised to use huge pages (tests).
  bool mapped() const { return mapping_ != nullptr; }

 private:
  void release();

  char* data_ = nullptr;
  void* mapping_ = nullptr;  // the whole mapping when mapped, else null (data_ is aligned_alloc's)
  uint64_t mapping_size_ = 0;
};

}  // namespace tensorpc::cpu
