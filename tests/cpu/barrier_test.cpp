// Barrier: no thread leaves a phase before every thread has arrived, and
// threads that went to sleep (more threads than cores) are woken.
#include "cpu/barrier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tensorpc::cpu {
namespace {

// Each of `threads` threads passes `phases` barriers; before each it counts
// itself in, after each it checks everyone had.
void run_phases(int threads, int phases, int slow_thread_sleep_us) {
  Barrier barrier(threads);
  std::atomic<int> arrived{0};
  std::atomic<int> early_leaves{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int p = 0; p < phases; ++p) {
        // One thread dawdles now and then, so the others spin out and sleep.
        if (t == 0 && slow_thread_sleep_us > 0 && p % 16 == 0) {
          std::this_thread::sleep_for(std::chrono::microseconds(slow_thread_sleep_us));
        }
        arrived.fetch_add(1);
        barrier.wait();
        if (arrived.load() < threads * (p + 1)) early_leaves.fetch_add(1);
        barrier.wait();  // nobody counts into the next phase before all have checked this one
      }
    });
  }
  for (std::thread& th : pool) th.join();
  EXPECT_EQ(arrived.load(), threads * phases);
  EXPECT_EQ(early_leaves.load(), 0);
}

TEST(Barrier, NoThreadLeavesAPhaseBeforeAllHaveArrived) { run_phases(2, 2000, 0); }

TEST(Barrier, ThreadsThatSleptWhileOneWasLateAreWoken) { run_phases(3, 400, 2000); }

TEST(Barrier, MoreThreadsThanCoresStillMeetEveryPhase) {
  run_phases(static_cast<int>(std::max(2u, std::thread::hardware_concurrency())) * 4, 300, 0);
}

// A thread that gives up aborts: the one asleep in the barrier wakes, and the
// waits that follow return without anyone else arriving.
TEST(Barrier, AbortReleasesWaitersAndLaterWaits) {
  Barrier barrier(3);
  std::atomic<int> passed{0};
  std::thread waiter([&] {
    barrier.wait();  // no one else arrives
    passed.fetch_add(1);
    barrier.wait();
    barrier.wait();
    passed.fetch_add(1);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // long enough to fall asleep
  EXPECT_EQ(passed.load(), 0);
  EXPECT_FALSE(barrier.aborted());
  barrier.abort();
  waiter.join();
  EXPECT_EQ(passed.load(), 2);
  EXPECT_TRUE(barrier.aborted());
  barrier.wait();  // and on this thread too
}

}  // namespace
}  // namespace tensorpc::cpu
