// The Vulkan device as a Device: what it says of itself, and its buffers'
// set/get/clear/copy, mapped and through the staging buffer.
#include <numeric>

#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

TEST(VulkanDevice, DescribesItselfAsAGpuNamedVulkanN) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  EXPECT_EQ(dev->name(), "vulkan:0");
  EXPECT_EQ(dev->kind(), DeviceKind::gpu);
  EXPECT_TRUE(contains(dev->description(), "driver"));
  auto memory = dev->memory();
  ASSERT_TRUE(memory.ok());
  EXPECT_GT(memory.value().total, 0u);
  EXPECT_LE(memory.value().free, memory.value().total);
  EXPECT_GE(dev->alignment(), 4u);
  EXPECT_GT(dev->max_allocation(), 0u);
  auto list = vulkan_devices();
  ASSERT_TRUE(list.ok());
  ASSERT_FALSE(list.value().empty());
  EXPECT_EQ(list.value()[0].index, 0);
}

TEST(VulkanDevice, MemoryFreeFallsByWhatItAllocatesWithoutABudget) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  auto list = vulkan_devices();
  ASSERT_TRUE(list.ok());
  if (list.value()[0].memory_budget) GTEST_SKIP() << "the driver has VK_EXT_memory_budget";
  const uint64_t before = dev->memory().value().free;
  auto buffer = dev->allocate(1 << 20);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(dev->memory().value().free, before - (1 << 20));
}

// Sets odd ranges of a tensor at an odd place, reads them back, copies the
// tensor within the buffer and clears the buffer.
void check_round_trips(Device& dev) {
  auto made = dev.allocate(4099);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  Buffer& buffer = *made.value();
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f16, {1001});
  Tensor* b = ctx.new_tensor(DType::f16, {1001});
  ASSERT_TRUE(buffer.place(*a, dev.alignment()).ok());
  ASSERT_TRUE(buffer.place(*b, dev.alignment() * 64).ok());
  std::vector<uint8_t> bytes(a->nbytes());
  std::iota(bytes.begin(), bytes.end(), uint8_t{7});
  ASSERT_TRUE(buffer.set(*a, bytes.data(), 0, 3).ok());
  ASSERT_TRUE(buffer.set(*a, bytes.data() + 3, 3, bytes.size() - 3).ok());
  std::vector<uint8_t> got(bytes.size());
  ASSERT_TRUE(buffer.get(*a, got.data() + 5, 5, got.size() - 5).ok());
  ASSERT_TRUE(buffer.get(*a, got.data(), 0, 5).ok());
  EXPECT_EQ(got, bytes);

  ASSERT_TRUE(buffer.copy(*a, *b).ok());
  std::vector<uint8_t> copied(bytes.size());
  ASSERT_TRUE(buffer.get(*b, copied.data(), 0, copied.size()).ok());
  EXPECT_EQ(copied, bytes);

  ASSERT_TRUE(buffer.clear(0xab).ok());
  ASSERT_TRUE(buffer.get(*b, copied.data(), 0, copied.size()).ok());
  EXPECT_EQ(copied, std::vector<uint8_t>(bytes.size(), 0xab));
  EXPECT_FALSE(buffer.get(*b, copied.data(), 1, copied.size()).ok());  // past the tensor
}

TEST(VulkanDevice, BufferRoundTripsThroughItsMapping) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  check_round_trips(*dev);
}

TEST(VulkanDevice, BufferRoundTripsThroughTheStagingBuffer) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev, /*force_staging=*/true);
  check_round_trips(*dev);
}

TEST(VulkanDevice, OpsRunThroughTheStagingBufferToo) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev, /*force_staging=*/true);
  EXPECT_TRUE(same_as_cpu(*dev,
                          [](Context& ctx) -> std::vector<Tensor*> {
                            return {ctx.mul_mat(input(ctx, DType::f32, {33, 9}), input(ctx, DType::f32, {33, 2}))};
                          },
                          {1e-4, 1e-4}));
}

}  // namespace
}  // namespace tensorpc::test
