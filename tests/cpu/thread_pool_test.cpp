// ThreadPool: every thread runs the function once per run, also runs that
// follow each other closely (workers lingering awake) and runs asked for by
// several threads at once (a pool shared by devices: one run at a time);
// pinned, thread i runs on core i (mod the cores), the caller on core 0, and
// the caller gets its own cores back.
#include "cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "test_util.h"

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
  int caller_core = -1;
  pool.run([&](int ith, int) {
    const cpu_set_t mine = affinity_of_this_thread();
    std::lock_guard<std::mutex> lock(mutex);
    seen[static_cast<size_t>(ith)] = mine;
    if (ith == 0) caller_core = sched_getcpu();
  });
  EXPECT_EQ(caller_core, 0) << "the caller computes on core 0";
  for (int i = 1; i <= cores; ++i) {
    EXPECT_EQ(CPU_COUNT(&seen[static_cast<size_t>(i)]), 1) << "thread " << i;
    EXPECT_TRUE(CPU_ISSET(i % cores, &seen[static_cast<size_t>(i)])) << "thread " << i;
  }
  const cpu_set_t after = affinity_of_this_thread();
  EXPECT_TRUE(CPU_EQUAL(&before, &after)) << "the caller's own cores after the run";
}

TEST(ThreadPool, RunsBackToBackAndAfterAPauseEachCallEveryThreadOnce) {
  ThreadPool pool(3, /*pinned=*/false, std::chrono::microseconds(200));
  for (int run = 0; run < 2000; ++run) {
    // Most runs come while the workers linger from the last one; every 500th
    // after they went to sleep.
    if (run % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::vector<std::atomic<int>> calls(3);
    pool.run([&](int ith, int) { calls[ith].fetch_add(1); });
    for (int i = 0; i < 3; ++i) ASSERT_EQ(calls[i].load(), 1) << "run " << run << ", thread " << i;
  }
}

TEST(ThreadPool, CallersOnSeveralThreadsTakeTurnsWholeRunsAtATime) {
  ThreadPool pool(2);
  std::atomic<int> inside{0}, overlaps{0}, calls{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int run = 0; run < 300; ++run) {
        std::atomic<int> in_this_run{0};
        pool.run([&](int, int) {
          // The first thread of a run to arrive must find no other run inside.
          if (in_this_run.fetch_add(1) == 0 && inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          calls.fetch_add(1);
          if (in_this_run.fetch_add(1) == 3) inside.fetch_sub(1);  // the last of both threads leaves
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(calls.load(), 3 * 300 * 2);
}

TEST(ThreadPool, UnpinnedThreadsKeepTheProcessCores) {
  const cpu_set_t before = affinity_of_this_thread();
  ThreadPool pool(2);
  std::vector<cpu_set_t> seen(2);
  pool.run([&](int ith, int) { seen[static_cast<size_t>(ith)] = affinity_of_this_thread(); });
  for (const cpu_set_t& s : seen) EXPECT_TRUE(CPU_EQUAL(&s, &before));
}

// A worker lingers (spinning) after a run for the linger time — here far
// longer than the test — unless the pool is told no run follows soon; then
// it sleeps at once, and the next run still finds every thread.
TEST(ThreadPool, ReleasedWorkersStopLingeringAtOnce) {
  ThreadPool pool(2, /*pinned=*/false, std::chrono::seconds(20));
  std::atomic<int> calls{0};
  const auto count = [&](int, int) { calls.fetch_add(1); };
  pool.run(count);
  EXPECT_GT(test::others_cpu_while_sleeping(std::chrono::milliseconds(400)), 0.1) << "the worker lingers";
  pool.release_lingering();
  (void)test::others_cpu_while_sleeping(std::chrono::milliseconds(20));  // time to see it
  EXPECT_LT(test::others_cpu_while_sleeping(std::chrono::milliseconds(400)), 0.05) << "released, it sleeps";
  pool.run(count);
  EXPECT_EQ(calls.load(), 4);
}

}  // namespace
}  // namespace tensorpc::cpu
