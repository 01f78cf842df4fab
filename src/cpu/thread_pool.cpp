#include "cpu/thread_pool.h"

namespace tensorpc::cpu {

ThreadPool::ThreadPool(int threads) {
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
