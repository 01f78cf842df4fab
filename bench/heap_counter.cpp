// The counting operator new and delete of heap_counter.h. Sizes are
// malloc_usable_size's, so that delete subtracts what new added.
#include "heap_counter.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

namespace tensorpc::bench {
namespace {

std::atomic<size_t> heap_now{0}, heap_most{0};

void* counted(void* p) {
  if (p == nullptr) return nullptr;
  const size_t size = malloc_usable_size(p);
  const size_t now = heap_now.fetch_add(size, std::memory_order_relaxed) + size;
  size_t most = heap_most.load(std::memory_order_relaxed);
  while (now > most && !heap_most.compare_exchange_weak(most, now, std::memory_order_relaxed)) {
  }
  return p;
}

void* counted_or_throw(size_t n, size_t align = 0) {
  n = std::max<size_t>(n, 1);
  void* p =
      align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (p == nullptr) throw std::bad_alloc();
  return counted(p);
}

void uncounted_free(void* p) noexcept {
  if (p == nullptr) return;
  heap_now.fetch_sub(malloc_usable_size(p), std::memory_order_relaxed);
  std::free(p);
}

}  // namespace

size_t reset_heap_peak() {
  const size_t now = heap_now.load(std::memory_order_relaxed);
  heap_most.store(now, std::memory_order_relaxed);
  return now;
}

size_t heap_peak() { return heap_most.load(std::memory_order_relaxed); }

}  // namespace tensorpc::bench

using tensorpc::bench::counted_or_throw;
using tensorpc::bench::uncounted_free;

void* operator new(size_t n) { return counted_or_throw(n); }
void* operator new[](size_t n) { return counted_or_throw(n); }
void* operator new(size_t n, std::align_val_t a) { return counted_or_throw(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return counted_or_throw(n, static_cast<size_t>(a)); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return tensorpc::bench::counted(std::malloc(std::max<size_t>(n, 1)));
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return tensorpc::bench::counted(std::malloc(std::max<size_t>(n, 1)));
}
void operator delete(void* p) noexcept { uncounted_free(p); }
void operator delete[](void* p) noexcept { uncounted_free(p); }
void operator delete(void* p, size_t) noexcept { uncounted_free(p); }
void operator delete[](void* p, size_t) noexcept { uncounted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { uncounted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { uncounted_free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { uncounted_free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { uncounted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { uncounted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { uncounted_free(p); }
