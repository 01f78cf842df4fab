// ThreadPool: a fixed set of threads that run one function together.
//
// run(fn) calls fn(ith, nth) once on each of the nth threads — the caller is
// thread 0 — and returns when all calls have returned. Workers sleep between
// runs. One run at a time; the CPU device serialises callers. Pinned, thread
// i runs on core i mod the cores there are, and the caller on core 0 for the
// length of a run (its own mask back afterwards).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tensorpc::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads, bool pinned = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  void run(const std::function<void(int ith, int nth)>& fn);

 private:
  void worker_loop(int ith);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int, int)>* job_ = nullptr;
  unsigned generation_ = 0;
  int running_ = 0;
  bool stopping_ = false;
  const bool pinned_;
};

}  // namespace tensorpc::cpu
