// ThreadPool: a fixed set of threads that run one function together.
//
// run(fn) calls fn(ith, nth) once on each of the nth threads — the caller is
// thread 0 — and returns when all calls have returned. One run at a time:
// callers on several threads (several devices sharing the pool) take turns.
// After a run the workers stay awake for a short while (`linger`) watching
// for the next one, so a run that follows closely — the next stage of a
// pipeline on a device sharing the pool, the next decode step — finds them
// awake instead of waking each from sleep; then they sleep. Pinned, thread i
// runs on core i mod the cores there are, and the caller on core 0 for the
// length of a run (its own mask back afterwards; a caller already on core 0
// is left as it is). A thread the system refuses to start (a process or
// memory limit) is left out: the pool runs with those it made, size() of them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tensorpc::cpu {

class ThreadPool {
 public:
  static constexpr std::chrono::microseconds kDefaultLinger{100};

  explicit ThreadPool(int threads, bool pinned = false, std::chrono::microseconds linger = kDefaultLinger);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  bool pinned() const { return pinned_; }
  void run(const std::function<void(int ith, int nth)>& fn);
  // Workers lingering after the last run go to sleep now instead of at the
  // end of the linger time: the caller knows no run follows soon (the pool
  // is being destroyed).
  void release_lingering();

 private:
  void worker_loop(int ith);
  // True when a run after `seen` started within the linger time.
  bool linger_for_run(unsigned seen) const;

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one run at a time
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int, int)>* job_ = nullptr;  // guarded by mutex_
  std::atomic<unsigned> generation_{0};                 // written under mutex_
  std::atomic<int> running_{0};                         // workers still in the current run
  std::atomic<unsigned> released_{~0u};                 // the run after which lingering ended early
  bool stopping_ = false;                               // guarded by mutex_
  const bool pinned_;
  const std::chrono::microseconds linger_;
};

}  // namespace tensorpc::cpu
