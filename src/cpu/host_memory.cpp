#include "cpu/host_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace tensorpc::cpu {

HostMemory HostMemory::allocate(uint64_t size, uint64_t alignment) {
  HostMemory m;
  if (size < kHugePage) {
    const uint64_t rounded = (size + alignment - 1) / alignment * alignment;
    m.data_ = static_cast<char*>(std::aligned_alloc(alignment, rounded));
    // The heap hands back memory this process freed, perhaps another
    // session's buffer: it starts as zeros, as fresh pages do.
    if (m.data_ != nullptr) std::memset(m.data_, 0, rounded);
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
      mapping_size_(std::exchange(other.mapping_size_, 0)) {}

HostMemory& HostMemory::operator=(HostMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
  }
  return *this;
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
}

}  // namespace tensorpc::cpu
