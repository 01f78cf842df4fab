#include "cpu/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace tensorpc::cpu {

HostMemory HostMemory::allocate(uint64_t size, uint64_t alignment) {
  HostMemory m;
  if (size < kHugePage) {
    const uint64_t rounded = (size + alignment - 1) / alignment * alignment;
    m.data_ = static_cast<char*>(std::aligned_alloc(alignment, rounded));
    // The heap hands back memory this process freed, perhaps another
    // session's buffer: it starts as zeros, as fresh pages do.
    if (m.data_ != nullptr) std::memset(m.data_, 0, rounded);
    m.heap_size_ = rounded;
    return m;
  }
  // One huge page more than asked, so an aligned start fits; the slack is
  // never touched, so it costs address space, not memory.
  if (size > UINT64_MAX - 2 * kHugePage) return m;
  const uint64_t length = (size + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return m;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  m.mapping_ = p;
  m.mapping_size_ = length;
  m.data_ = reinterpret_cast<char*>(start);
#ifdef MADV_HUGEPAGE
  madvise(m.data_, length - (start - reinterpret_cast<uintptr_t>(p)), MADV_HUGEPAGE);  // advice: failure is harmless
#endif
  return m;
}

HostMemory::~HostMemory() { release(); }

HostMemory::HostMemory(HostMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      heap_size_(std::exchange(other.heap_size_, 0)) {}

HostMemory& HostMemory::operator=(HostMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    heap_size_ = std::exchange(other.heap_size_, 0);
  }
  return *this;
}

uint64_t HostMemory::capacity() const {
  if (mapping_ == nullptr) return heap_size_;
  return mapping_size_ - static_cast<uint64_t>(data_ - static_cast<char*>(mapping_));
}

void HostMemory::release() {
  if (mapping_ != nullptr) {
    munmap(mapping_, mapping_size_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  mapping_ = nullptr;
  mapping_size_ = 0;
  heap_size_ = 0;
}

HostMemoryPool::HostMemoryPool(std::chrono::milliseconds keep_for, uint64_t max_bytes)
    : keep_for_(keep_for), max_bytes_(max_bytes), expirer_([this] { expire_loop(); }) {}

HostMemoryPool::~HostMemoryPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  expirer_.join();
}  // kept_ unmaps its mappings

HostMemory HostMemoryPool::take(uint64_t size, uint64_t alignment) {
  if (size >= kHugePage) {
    HostMemory found;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto best = kept_.end();
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        const uint64_t c = it->memory.capacity();
        if (c < size || c - size > size / 4 + kHugePage) continue;
        if (best == kept_.end() || c < best->memory.capacity()) best = it;
      }
      if (best != kept_.end()) {
        kept_bytes_ -= best->memory.capacity();
        found = std::move(best->memory);
        kept_.erase(best);
      }
    }
    if (found) {
      // Another session's bytes: zero, as fresh pages are. The mapping is
      // 2 MiB-aligned, so any alignment asked for holds.
      std::memset(found.data(), 0, size);
      return found;
    }
  }
  return HostMemory::allocate(size, alignment);
}

void HostMemoryPool::give(HostMemory m) {
  if (!m.mapped()) return;  // heap memory goes back to the heap
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t c = m.capacity();
  if (stopping_ || keep_for_.count() <= 0 || c > max_bytes_) return;
  // Room first: the oldest go.
  while (!kept_.empty() && kept_bytes_ + c > max_bytes_) {
    kept_bytes_ -= kept_.front().memory.capacity();
    kept_.pop_front();
  }
  kept_.push_back({std::move(m), std::chrono::steady_clock::now() + keep_for_});
  kept_bytes_ += c;
  changed_.notify_all();
}

uint64_t HostMemoryPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_bytes_;
}

uint64_t HostMemoryPool::kept_resident_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t n = 0;
  for (const Kept& k : kept_) n += k.memory.resident_bytes();
  return n;
}

uint64_t HostMemory::resident_bytes() const {
  if (mapping_ == nullptr) return heap_size_;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((mapping_size_ + page - 1) / page);
  if (::mincore(mapping_, mapping_size_, in_core.data()) != 0) return mapping_size_;  // unknown: assume all
  uint64_t pages = 0;
  for (unsigned char c : in_core) pages += c & 1;
  return pages * page;
}

void HostMemoryPool::expire_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (kept_.empty()) {
      changed_.wait(lock);
      continue;
    }
    // A copy: take() may erase the entry while this thread waits.
    const std::chrono::steady_clock::time_point due = kept_.front().expires;
    if (std::chrono::steady_clock::now() < due) {
      changed_.wait_until(lock, due);
      continue;
    }
    // Unmapped outside the lock: munmap of gigabytes takes a while.
    HostMemory expired = std::move(kept_.front().memory);
    kept_bytes_ -= expired.capacity();
    kept_.pop_front();
    lock.unlock();
    expired = HostMemory();
    lock.lock();
  }
}

}  // namespace tensorpc::cpu
