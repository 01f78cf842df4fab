// Barrier: a reusable rendezvous for the threads of one graph run.
//
// Spins briefly (graph nodes are short, and a futex round trip would cost
// more than many of them) and then sleeps on the phase (a futex), so that a
// thread whose partner was descheduled — the machine busy with other work —
// gives its core to that partner instead of spinning or yielding through its
// time slice. The last thread to arrive wakes sleepers only when there are
// any, so an uncontended barrier makes no system call.
//
// A thread that cannot go on (its kernel failed) aborts the barrier: every
// wait, current and later, returns at once, so the others finish their
// share of the node instead of waiting for it forever.
#pragma once

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tensorpc::cpu {

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}

  void wait() {
    if (n_ == 1 || aborted_.load(std::memory_order_acquire)) return;
    const unsigned phase = phase_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      phase_.fetch_add(1, std::memory_order_seq_cst);
      if (sleepers_.load(std::memory_order_seq_cst) > 0) phase_.notify_all();
      return;
    }
    for (int spins = 0; spins < kSpins; ++spins) {
      if (phase_.load(std::memory_order_acquire) != phase) return;
      pause();
    }
    // Announced before the last look at the phase, and the last arriver
    // looks at sleepers_ after moving the phase: one of the two sees the
    // other, so a sleeper is never left behind.
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while (phase_.load(std::memory_order_seq_cst) == phase) phase_.wait(phase, std::memory_order_seq_cst);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

  // Releases every thread waiting now and makes every later wait return at
  // once. The barrier is not usable for a rendezvous after this.
  void abort() {
    aborted_.store(true, std::memory_order_release);
    phase_.fetch_add(1, std::memory_order_seq_cst);
    phase_.notify_all();
  }

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }

  static constexpr int kSpins = 4096;  // ~0.1 ms of pause instructions

  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> phase_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> aborted_{false};
};

}  // namespace tensorpc::cpu
