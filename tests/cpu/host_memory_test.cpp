// HostMemory: the bytes behind CPU buffers; large ones are huge-page mappings.
#include "cpu/host_memory.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace tensorpc::cpu {
namespace {

TEST(HostMemory, SmallAllocationsComeFromTheHeapAligned) {
  HostMemory m = HostMemory::allocate(1000, 64);
  ASSERT_TRUE(m);
  EXPECT_FALSE(m.mapped());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % 64, 0u);
  std::memset(m.data(), 0x5a, 1000);
  EXPECT_EQ(m.data()[999], 0x5a);
}

TEST(HostMemory, LargeAllocationsAreMappedOnHugePageBoundariesAndHoldTheirBytes) {
  const uint64_t size = 3 * kHugePage + 12345;  // not a multiple of the page
  HostMemory m = HostMemory::allocate(size, 64);
  ASSERT_TRUE(m);
  EXPECT_TRUE(m.mapped());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % kHugePage, 0u);
  for (uint64_t i = 0; i < size; i += 4093) m.data()[i] = static_cast<char>(i % 251);
  m.data()[size - 1] = 7;
  for (uint64_t i = 0; i < size; i += 4093) ASSERT_EQ(m.data()[i], static_cast<char>(i % 251)) << i;
  EXPECT_EQ(m.data()[size - 1], 7);
}

// Whatever was freed before, a new allocation reads as zeros: a server's
// session never sees the bytes of a buffer another session freed.
TEST(HostMemory, NewMemoryIsZeroEvenWhereFreedMemoryIsReused) {
  for (uint64_t size : {uint64_t{64}, uint64_t{4096}, uint64_t{100000}, 3 * kHugePage}) {
    for (int round = 0; round < 3; ++round) {
      std::vector<HostMemory> batch;
      for (int k = 0; k < 16; ++k) {
        batch.push_back(HostMemory::allocate(size, 64));
        HostMemory& m = batch.back();
        ASSERT_TRUE(m);
        for (uint64_t i = 0; i < size; ++i) {
          ASSERT_EQ(m.data()[i], 0) << size << " bytes, byte " << i << ", round " << round << ", buffer " << k;
        }
      }
      for (HostMemory& m : batch) std::memset(m.data(), 0xab, size);  // what the next round must not see
    }
  }
}

TEST(HostMemory, MovingHandsOverOwnership) {
  HostMemory a = HostMemory::allocate(kHugePage, 64);
  ASSERT_TRUE(a);
  char* bytes = a.data();
  bytes[0] = 1;
  HostMemory b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(b.data(), bytes);
  HostMemory c = HostMemory::allocate(100, 64);
  c = std::move(b);  // frees c's heap bytes, takes b's mapping
  EXPECT_EQ(c.data(), bytes);
  EXPECT_EQ(c.data()[0], 1);
}

TEST(HostMemory, AnImpossibleSizeIsAnEmptyResultNotACrash) {
  EXPECT_FALSE(HostMemory::allocate(UINT64_MAX - 10, 64));
  EXPECT_FALSE(HostMemory::allocate(uint64_t{1} << 62, 64));
}

TEST(HostMemoryPool, AFreedMappingIsHandedOutAgainZeroed) {
  HostMemoryPool pool(std::chrono::seconds(30), uint64_t{1} << 30);
  HostMemory m = pool.take(3 * kHugePage, 64);
  ASSERT_TRUE(m.mapped());
  char* bytes = m.data();
  std::memset(bytes, 0x5a, 3 * kHugePage);
  pool.give(std::move(m));
  EXPECT_EQ(pool.kept_bytes(), 4 * kHugePage);  // three pages asked for, and the alignment slack
  HostMemory again = pool.take(3 * kHugePage - 100, 64);
  EXPECT_EQ(again.data(), bytes) << "the kept mapping";
  EXPECT_EQ(pool.kept_bytes(), 0u);
  for (uint64_t i = 0; i < 3 * kHugePage - 100; i += 511) ASSERT_EQ(again.data()[i], 0) << i;
}

// Free memory counts a kept mapping's pages once: the touched ones, which
// the host's available memory leaves out; the untouched ones it counts.
TEST(HostMemoryPool, OnlyTheTouchedPagesOfAKeptMappingCountAsResident) {
  HostMemoryPool pool(std::chrono::seconds(30), uint64_t{1} << 30);
  HostMemory m = pool.take(16 * kHugePage, 64);
  ASSERT_TRUE(m.mapped());
  std::memset(m.data(), 0x5a, 4 * kHugePage);  // a quarter touched
  pool.give(std::move(m));
  EXPECT_EQ(pool.kept_bytes(), 17 * kHugePage);
  EXPECT_GE(pool.kept_resident_bytes(), 4 * kHugePage);
  EXPECT_LE(pool.kept_resident_bytes(), 6 * kHugePage) << "untouched pages counted as resident";
}

TEST(HostMemoryPool, AMappingMuchLargerThanAskedIsNotUsedAndHeapMemoryIsNotKept) {
  HostMemoryPool pool(std::chrono::seconds(30), uint64_t{1} << 30);
  HostMemory big = pool.take(16 * kHugePage, 64);
  char* big_bytes = big.data();
  pool.give(std::move(big));
  HostMemory small = pool.take(2 * kHugePage, 64);
  EXPECT_NE(small.data(), big_bytes);
  EXPECT_GT(pool.kept_bytes(), 0u);
  pool.give(pool.take(4096, 64));  // heap: back to the heap
  EXPECT_EQ(pool.kept_bytes(), 17 * kHugePage);
}

TEST(HostMemoryPool, KeptMappingsExpireAndTheCapHolds) {
  HostMemoryPool pool(std::chrono::milliseconds(50), 10 * kHugePage);
  HostMemory a = pool.take(4 * kHugePage, 64), b = pool.take(4 * kHugePage, 64);  // 5 pages each, alignment included
  pool.give(std::move(a));
  pool.give(std::move(b));
  EXPECT_EQ(pool.kept_bytes(), 10 * kHugePage);  // exactly the cap
  pool.give(pool.take(7 * kHugePage, 64));       // 8 pages: the oldest go to make room
  EXPECT_EQ(pool.kept_bytes(), 8 * kHugePage);
  pool.give(pool.take(20 * kHugePage, 64));  // larger than the cap: never kept
  EXPECT_EQ(pool.kept_bytes(), 8 * kHugePage);
  for (int i = 0; i < 200 && pool.kept_bytes() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(pool.kept_bytes(), 0u) << "unmapped after 50 ms";
}

TEST(HostMemoryPool, KeepingForZeroKeepsNothing) {
  HostMemoryPool pool(std::chrono::milliseconds(0), uint64_t{1} << 30);
  pool.give(pool.take(3 * kHugePage, 64));
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

}  // namespace
}  // namespace tensorpc::cpu
