// ThreadPool: every thread runs the function once per run; pinned, thread i
// runs on core i (mod the cores) and the caller gets its own cores back.
#include "cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace tensorpc::cpu {
namespace {

cpu_set_t affinity_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof set, &set), 0);
  return set;
}

TEST(ThreadPool, EveryThreadRunsTheFunctionOncePerRun) {
  ThreadPool pool(3);
  ASSERT_EQ(pool.size(), 3);
  for (int run = 0; run < 50; ++run) {
    std::vector<std::atomic<int>> calls(3);
    pool.run([&](int ith, int nth) {
      EXPECT_EQ(nth, 3);
      calls[ith].fetch_add(1);
    });
    for (int i = 0; i < 3; ++i) ASSERT_EQ(calls[i].load(), 1) << "run " << run << ", thread " << i;
  }
}

TEST(ThreadPool, PinnedThreadsRunOnTheirCoreAndTheCallerGetsItsCoresBack) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const cpu_set_t before = affinity_of_this_thread();
  if (CPU_COUNT(&before) < cores) GTEST_SKIP() << "this process may not use every core";
  ThreadPool pool(cores + 1, /*pinned=*/true);  // one more thread than cores: the last wraps around
  std::mutex mutex;
  std::vector<cpu_set_t> seen(static_cast<size_t>(cores + 1));
  pool.run([&](int ith, int) {
    const cpu_set_t mine = affinity_of_this_thread();
    std::lock_guard<std::mutex> lock(mutex);
    seen[static_cast<size_t>(ith)] = mine;
  });
  for (int i = 0; i <= cores; ++i) {
    EXPECT_EQ(CPU_COUNT(&seen[static_cast<size_t>(i)]), 1) << "thread " << i;
    EXPECT_TRUE(CPU_ISSET(i % cores, &seen[static_cast<size_t>(i)])) << "thread " << i;
  }
  const cpu_set_t after = affinity_of_this_thread();
  EXPECT_TRUE(CPU_EQUAL(&before, &after)) << "the caller's own cores after the run";
}

TEST(ThreadPool, UnpinnedThreadsKeepTheProcessCores) {
  const cpu_set_t before = affinity_of_this_thread();
  ThreadPool pool(2);
  std::vector<cpu_set_t> seen(2);
  pool.run([&](int ith, int) { seen[static_cast<size_t>(ith)] = affinity_of_this_thread(); });
  for (const cpu_set_t& s : seen) EXPECT_TRUE(CPU_EQUAL(&s, &before));
}

}  // namespace
}  // namespace tensorpc::cpu
