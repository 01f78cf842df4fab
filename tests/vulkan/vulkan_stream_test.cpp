// The Vulkan stream keeps the command buffers it records: a graph computed
// again with the same dispatches (a decode step's graph) is submitted from its
// recording, and anything those dispatches hold changing records anew.
#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

constexpr int64_t kK = 40, kM = 6, kN = 3;

// y = scale(w x, s), every tensor placed by the test in one buffer, so that
// it can move them; and the same on the host.
struct ScaledProduct {
  Context ctx;
  Tensor* w = input(ctx, DType::f32, {kK, kM});
  Tensor* x = input(ctx, DType::f32, {kK, kN});
  Tensor* product = ctx.mul_mat(w, x);
  Tensor* y = ctx.scale(product, 0.25f);
  Graph graph = Graph::build({y});
  std::vector<float> w_values = random_floats(kK * kM, 1);
  std::vector<float> x_values = random_floats(kK * kN, 2);

  // Places w, x, the product and y at `offsets` (in that order) of buffer and
  // writes w and x.
  void place(Buffer& buffer, const std::array<uint64_t, 4>& offsets) {
    const std::array<Tensor*, 4> tensors{w, x, product, y};
    for (size_t i = 0; i < tensors.size(); ++i) ASSERT_TRUE(buffer.place(*tensors[i], offsets[i]).ok());
    ASSERT_TRUE(write_from_f32(*w, w_values).ok());
    ASSERT_TRUE(write_from_f32(*x, x_values).ok());
  }

  std::vector<double> expected() const {
    std::vector<double> want(kM * kN);
    for (int64_t n = 0; n < kN; ++n) {
      for (int64_t m = 0; m < kM; ++m) {
        double s = 0;
        for (int64_t k = 0; k < kK; ++k) s += double{w_values[m * kK + k]} * x_values[n * kK + k];
        want[n * kM + m] = s * y->param<float>(0);
      }
    }
    return want;
  }

  ::testing::AssertionResult computes_right(Stream& stream) {
    const Status s = stream.compute(graph);
    if (!s.ok()) return ::testing::AssertionFailure() << s.to_string();
    auto got = read_as_f32(*y);
    if (!got.ok()) return ::testing::AssertionFailure() << got.status().to_string();
    return all_near(got.value(), expected(), {1e-5, 1e-5});
  }
};

// A Vulkan stream, a buffer and the product, placed at `places` (offsets of
// w, x, the product and y in units of the device's alignment).
class VulkanStream : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = open_vulkan_or_skip();
    if (dev_ == nullptr) GTEST_SKIP() << "no Vulkan device (see the log)";
    buffer_ = allocate();
    auto stream = dev_->create_stream();
    ASSERT_TRUE(stream.ok());
    stream_ = std::move(stream).value();
  }

  std::unique_ptr<Buffer> allocate() {
    auto buffer = dev_->allocate(1 << 16);
    EXPECT_TRUE(buffer.ok());
    return buffer.ok() ? std::move(buffer).value() : nullptr;
  }

  void place(Buffer& buffer, const std::array<uint64_t, 4>& places) {
    const uint64_t a = dev_->alignment();
    g_.place(buffer, {places[0] * a, places[1] * a, places[2] * a, places[3] * a});
  }

  VulkanStreamCounters counters() const {
    auto c = vulkan_stream_counters(*stream_);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? c.value() : VulkanStreamCounters{};
  }

  std::unique_ptr<Device> dev_;
  std::unique_ptr<Buffer> buffer_;
  std::unique_ptr<Stream> stream_;
  ScaledProduct g_;
};

constexpr std::array<uint64_t, 4> kPlaces{0, 64, 128, 192};

TEST_F(VulkanStream, AGraphComputedAgainReplaysItsRecording) {
  place(*buffer_, kPlaces);
  ASSERT_TRUE(g_.computes_right(*stream_));
  const std::vector<float> first = read_as_f32(*g_.y).value();
  ASSERT_TRUE(buffer_->clear(0).ok());
  place(*buffer_, kPlaces);  // the same places, written again
  ASSERT_TRUE(g_.computes_right(*stream_));
  EXPECT_EQ(read_as_f32(*g_.y).value(), first);
  EXPECT_EQ(counters().recorded, 1u);
  EXPECT_EQ(counters().replayed, 1u);

  // New input values in the same place: what a decode step does.
  g_.x_values = random_floats(kK * kN, 3);
  ASSERT_TRUE(write_from_f32(*g_.x, g_.x_values).ok());
  ASSERT_TRUE(g_.computes_right(*stream_));
  EXPECT_EQ(counters().recorded, 1u);
  EXPECT_EQ(counters().replayed, 2u);
}

TEST_F(VulkanStream, MovedTensorsNewParametersOrAnotherBufferRecordAgain) {
  place(*buffer_, kPlaces);
  ASSERT_TRUE(g_.computes_right(*stream_));

  place(*buffer_, {0, 80, 128, 192});  // the input elsewhere
  ASSERT_TRUE(g_.computes_right(*stream_));
  EXPECT_EQ(counters().recorded, 2u);

  g_.y->set_param(0, -3.0f);  // another scale
  ASSERT_TRUE(g_.computes_right(*stream_));
  EXPECT_EQ(counters().recorded, 3u);

  std::unique_ptr<Buffer> other = allocate();  // the same offsets in another buffer
  ASSERT_NE(other, nullptr);
  place(*other, {0, 80, 128, 192});
  ASSERT_TRUE(g_.computes_right(*stream_));
  EXPECT_EQ(counters().recorded, 4u);

  place(*buffer_, kPlaces);  // back where it began: recorded then
  g_.y->set_param(0, 0.25f);
  ASSERT_TRUE(g_.computes_right(*stream_));
  EXPECT_EQ(counters().recorded, 4u);
  EXPECT_EQ(counters().replayed, 1u);
}

TEST_F(VulkanStream, KeepsAFewRecordingsDroppingTheLeastRecentlyUsed) {
  // One graph at more places than the stream keeps recordings, then at the first again.
  constexpr uint64_t kMoves = 12;
  for (uint64_t i = 0; i <= kMoves; ++i) {
    place(*buffer_, {0, 64 + i % kMoves, 128, 192});
    ASSERT_TRUE(g_.computes_right(*stream_));
  }
  EXPECT_EQ(counters().recorded, kMoves + 1);  // the first recording was dropped
  EXPECT_EQ(counters().replayed, 0u);
}

TEST(VulkanStreamCounters, AreOnlyAVulkanStreams) {
  CpuDevice cpu(CpuDeviceOptions{.threads = 1});
  auto stream = cpu.create_stream();
  ASSERT_TRUE(stream.ok());
  EXPECT_FALSE(vulkan_stream_counters(*stream.value()).ok());
}

}  // namespace
}  // namespace tensorpc::test
