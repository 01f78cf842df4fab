#include "cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

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
class CoreZeroForARun {
 public:
  explicit CoreZeroForARun(bool pin)
      : pinned_(pin && pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) == 0) {
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

}  // namespace

ThreadPool::ThreadPool(int threads, bool pinned) : pinned_(pinned) {
  const int n = threads < 1 ? 1 : threads;
  workers_.reserve(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  const int nth = size();
  const CoreZeroForARun on_core_zero(pinned_ && nth > 1);
  if (nth > 1) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &fn;
      running_ = nth - 1;
      ++generation_;
    }
    start_cv_.notify_all();
  }
  fn(0, nth);
  if (nth > 1) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return running_ == 0; });
    job_ = nullptr;
  }
}

void ThreadPool::worker_loop(int ith) {
  if (pinned_) run_on_core(ith);
  unsigned seen = 0;
  for (;;) {
    const std::function<void(int, int)>* job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(ith, size());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--running_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace tensorpc::cpu
