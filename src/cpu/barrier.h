// Barrier: a reusable rendezvous for the threads of one graph run.
//
// Spins briefly (graph nodes are short, and a futex round trip would cost
// more than many of them) and then yields, so it stays fair when threads
// outnumber cores.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tensorpc::cpu {

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}

  void wait() {
    if (n_ == 1) return;
    const unsigned phase = phase_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      phase_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    for (int spins = 0; phase_.load(std::memory_order_acquire) == phase; ++spins) {
      if (spins < 4096) {
        pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }

  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> phase_{0};
};

}  // namespace tensorpc::cpu
