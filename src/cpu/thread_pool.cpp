#include "cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <system_error>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tensorpc::cpu {
namespace {

// Puts the calling thread on `core` (mod the cores there are); failure (a
// core outside the process's allowed set, say) leaves it where it was.
void run_on_core(int core) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % cores, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// The calling thread on core 0 for one run, and back on its own cores after.
// One already on core 0 is left alone: moving a thread's mask costs a system
// call or two per run, and a migration when it is elsewhere.
class CoreZeroForARun {
 public:
  explicit CoreZeroForARun(bool pin)
      : pinned_(pin && sched_getcpu() != 0 && pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) == 0) {
    if (pinned_) run_on_core(0);
  }
  ~CoreZeroForARun() {
    if (pinned_) (void)pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
  }
  CoreZeroForARun(const CoreZeroForARun&) = delete;
  CoreZeroForARun& operator=(const CoreZeroForARun&) = delete;

 private:
  cpu_set_t saved_{};
  const bool pinned_;
};

void pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// The caller's wait for workers that finish about when it does, before it
// sleeps: ~50 µs of pause instructions.
constexpr int kJoinSpins = 2048;

}  // namespace

ThreadPool::ThreadPool(int threads, bool pinned, std::chrono::microseconds linger) : pinned_(pinned), linger_(linger) {
  const int n = threads < 1 ? 1 : threads;
  workers_.reserve(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    try {
      workers_.emplace_back([this, i] { worker_loop(i); });
    } catch (const std::system_error&) {
      break;  // the system gives no more threads: the pool runs with those it made (size())
    }
  }
}

ThreadPool::~ThreadPool() {
  release_lingering();  // a lingering worker would not look at stopping_ before its linger ends
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  std::lock_guard<std::mutex> turn(run_mutex_);
  const int nth = size();
  const CoreZeroForARun on_core_zero(pinned_ && nth > 1);
  if (nth > 1) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &fn;
      running_.store(nth - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    start_cv_.notify_all();
  }
  fn(0, nth);
  if (nth > 1) {
    for (int spins = 0; spins < kJoinSpins && running_.load(std::memory_order_acquire) != 0; ++spins) pause();
    if (running_.load(std::memory_order_acquire) != 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_cv_.wait(lock, [this] { return running_.load(std::memory_order_acquire) == 0; });
    }
  }
}

void ThreadPool::release_lingering() {
  released_.store(generation_.load(std::memory_order_acquire), std::memory_order_release);
}

bool ThreadPool::linger_for_run(unsigned seen) const {
  const auto until = std::chrono::steady_clock::now() + linger_;
  while (generation_.load(std::memory_order_acquire) == seen) {
    if (released_.load(std::memory_order_acquire) == seen || std::chrono::steady_clock::now() >= until) return false;
    for (int i = 0; i < 16; ++i) pause();
  }
  return true;
}

void ThreadPool::worker_loop(int ith) {
  if (pinned_) run_on_core(ith);
  unsigned seen = 0;
  for (;;) {
    const std::function<void(int, int)>* job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stopping_) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
    }
    (*job)(ith, size());
    if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_cv_.notify_one();
    }
    (void)linger_for_run(seen);  // either way, the wait above sees a new run at once
  }
}

}  // namespace tensorpc::cpu
