// HostMemory: the bytes of one CPU buffer, owned and freed with it.
//
// Buffers of kHugePage and more are mapped anonymously, kHugePage-aligned, and
// advised to be backed by transparent huge pages (MADV_HUGEPAGE). Filling a
// fresh buffer — a model's weights arriving from the file, the network or a
// server's weights cache — then faults once per 2 MiB instead of once per
// 4 KiB, and kernels that stream weights miss the TLB far less. On a virtual
// machine where a page fault costs microseconds, filling 126 MiB of fresh
// memory took 345–384 ms with 4 KiB pages and 108–163 ms with huge pages
// (docs/performance.md, "Over the link, and warm loads"). Where
// the kernel has no huge pages the advice is ignored and nothing else changes.
// Smaller buffers come from aligned_alloc. Either way a new buffer's bytes
// are zero: no session of a server sees what another left in memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <mutex>
#include <thread>

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
  // Bytes usable from data() on: at least the size asked for (a mapping's
  // run to its end).
  uint64_t capacity() const;
  // Bytes of it in physical memory now (a mapping's touched pages; all of
  // heap memory).
  uint64_t resident_bytes() const;

 private:
  friend class HostMemoryPool;
  void release();

  char* data_ = nullptr;
  void* mapping_ = nullptr;  // the whole mapping when mapped, else null (data_ is aligned_alloc's)
  uint64_t mapping_size_ = 0;
  uint64_t heap_size_ = 0;  // heap bytes, when not mapped
};

// HostMemoryPool: mappings of freed CPU buffers, kept a few seconds for the
// next allocation of about their size.
//
// On a virtual machine the first touch of fresh pages costs the host's work
// too: the same 126 MiB that fill in about 11 ms when the process had them
// before take 108–384 ms when they are new (docs/performance.md). A model
// reloaded right after it was freed (a client reconnecting, the next run of
// a job) then waits on page faults. take() hands back a kept mapping of
// about the asked size, zeroed; give() keeps a mapping for `keep_for`, while
// the pool holds at most `max_bytes`; a thread of the pool unmaps what
// expires. Heap memory (under kHugePage) is never pooled. Thread-safe.
class HostMemoryPool {
 public:
  HostMemoryPool(std::chrono::milliseconds keep_for, uint64_t max_bytes);
  ~HostMemoryPool();  // unmaps everything it holds
  HostMemoryPool(const HostMemoryPool&) = delete;
  HostMemoryPool& operator=(const HostMemoryPool&) = delete;

  // As HostMemory::allocate, from a kept mapping when one has room for
  // `size` without wasting more than a quarter (and a huge page) of it.
  HostMemory take(uint64_t size, uint64_t alignment);
  // Keeps `m` when it is a mapping and fits under max_bytes; frees it
  // otherwise.
  void give(HostMemory m);
  // Bytes of the mappings kept now.
  uint64_t kept_bytes() const;
  // The part of them in physical memory: what the host's available memory
  // does not count, and a new allocation can still get from the pool.
  // (Untouched pages are available to the host already: counting them here
  // too would count them twice.)
  uint64_t kept_resident_bytes() const;

 private:
  struct Kept {
    HostMemory memory;
    std::chrono::steady_clock::time_point expires;
  };
  void expire_loop();

  const std::chrono::milliseconds keep_for_;
  const uint64_t max_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::list<Kept> kept_;  // oldest first
  uint64_t kept_bytes_ = 0;
  bool stopping_ = false;
  std::thread expirer_;
};

}  // namespace tensorpc::cpu
