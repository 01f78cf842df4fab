// The CPU device: buffers, placement, memory accounting and limits, streams.
#include "tensorpc/cpu_device.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "cpu/op_kernels.h"
#include "tensorpc/context.h"
#include "tensorpc/graph_allocator.h"

namespace tensorpc {
namespace {

TEST(CpuDevice, ReportsItsPropertiesAndThreadCount) {
  CpuDevice dev({.name = "cpu7", .threads = 2});
  EXPECT_EQ(dev.name(), "cpu7");
  EXPECT_EQ(dev.kind(), DeviceKind::cpu);
  EXPECT_EQ(dev.threads(), 2);
  EXPECT_NE(dev.description().find("2 threads"), std::string::npos);
  EXPECT_GT(dev.memory().value().total, 0u);
  EXPECT_GT(dev.alignment(), 0u);
  dev.set_threads(1);
  EXPECT_EQ(dev.threads(), 1);
}

// Two devices on one set of threads (as a server's pinned devices are):
// each reports those threads, and graphs computed on both from two threads
// at once are each right (the devices take turns on the threads).
TEST(CpuDevice, DevicesSharingThreadsComputeRightFromSeveralThreadsAtOnce) {
  auto shared = CpuDevice::shared_threads(2, /*pin_threads=*/false);
  CpuDevice a({.name = "a", .threads = 7, .shared_threads = shared});
  CpuDevice b({.name = "b", .shared_threads = shared});
  EXPECT_EQ(a.threads(), 2);
  EXPECT_EQ(b.threads(), 2);
  const auto work = [](CpuDevice& dev, float scale) {
    Context ctx;
    Tensor* x = ctx.new_tensor(DType::f32, {16384, 4});  // enough work per node for both threads
    Tensor* y = ctx.scale(ctx.add(x, x), scale);
    Graph g = Graph::build({y});
    GraphAllocator alloc(dev);
    if (!alloc.allocate(g).ok()) return false;
    std::vector<float> in(16384 * 4), out(in.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97);
    bool right = true;
    for (int run = 0; run < 200 && right; ++run) {
      if (!x->buffer->set(*x, in.data(), 0, x->nbytes()).ok() || !dev.compute(g).ok() ||
          !y->buffer->get(*y, out.data(), 0, y->nbytes()).ok()) {
        return false;
      }
      for (size_t i = 0; i < in.size(); i += 61) right = right && out[i] == in[i] * 2 * scale;
    }
    return right;
  };
  bool right_a = false, right_b = false;
  std::thread ta([&] { right_a = work(a, 3.0f); });
  std::thread tb([&] { right_b = work(b, -0.5f); });
  ta.join();
  tb.join();
  EXPECT_TRUE(right_a);
  EXPECT_TRUE(right_b);
}

TEST(CpuDevice, SetAndGetMoveBytesThroughABuffer) {
  CpuDevice dev({.threads = 1});
  Context ctx;
  Tensor* t = ctx.new_tensor(DType::f32, {16});
  auto buf = dev.allocate(t->nbytes()).value();
  ASSERT_TRUE(buf->place(*t, 0).ok());
  std::vector<float> in(16), out(16, 0.0f);
  for (int i = 0; i < 16; ++i) in[i] = static_cast<float>(i) * 1.5f;
  ASSERT_TRUE(buf->set(*t, in.data(), 0, 64).ok());
  ASSERT_TRUE(buf->get(*t, out.data(), 0, 64).ok());
  EXPECT_EQ(in, out);
  // A partial read at an offset.
  float two[2];
  ASSERT_TRUE(buf->get(*t, two, 8, 8).ok());
  EXPECT_EQ(two[0], 3.0f);
  EXPECT_EQ(two[1], 4.5f);
}

TEST(CpuDevice, OutOfRangeAccessIsAnErrorNotACrash) {
  CpuDevice dev({.threads = 1});
  Context ctx;
  Tensor* t = ctx.new_tensor(DType::f32, {4});
  auto buf = dev.allocate(t->nbytes()).value();
  ASSERT_TRUE(buf->place(*t, 0).ok());
  char bytes[32] = {};
  Status s = buf->set(*t, bytes, 8, 16);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("outside"), std::string::npos) << s.message();
  EXPECT_FALSE(buf->get(*t, bytes, ~0ull, 2).ok());

  Tensor* big = ctx.new_tensor(DType::f32, {8});
  EXPECT_FALSE(buf->place(*big, 0).ok());
  EXPECT_FALSE(buf->place(*t, 3).ok()) << "misaligned placement must fail";
}

TEST(CpuDevice, ClearAndCopyWithinTheDevice) {
  CpuDevice dev({.threads = 1});
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::i32, {8});
  Tensor* b = ctx.new_tensor(DType::i32, {8});
  auto buf_a = dev.allocate(a->nbytes()).value();
  auto buf_b = dev.allocate(b->nbytes()).value();
  ASSERT_TRUE(buf_a->place(*a, 0).ok());
  ASSERT_TRUE(buf_b->place(*b, 0).ok());
  ASSERT_TRUE(buf_a->clear(0x01).ok());
  ASSERT_TRUE(buf_b->copy(*a, *b).ok());
  int32_t out[8];
  ASSERT_TRUE(buf_b->get(*b, out, 0, sizeof out).ok());
  for (int32_t v : out) EXPECT_EQ(v, 0x01010101);
}

TEST(CpuDevice, MemoryLimitRefusesAndNamesTheDeviceAndTheRequest) {
  CpuDevice dev({.name = "small", .threads = 1, .memory_limit = 1 << 20});
  EXPECT_EQ(dev.memory().value().total, 1u << 20);
  const uint64_t free_before = dev.memory().value().free;
  {
    auto a = dev.allocate(700 << 10);
    ASSERT_TRUE(a.ok());
    EXPECT_LT(dev.memory().value().free, free_before);
    auto b = dev.allocate(700 << 10);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::out_of_memory);
    EXPECT_NE(b.status().message().find("small"), std::string::npos) << b.status().message();
    EXPECT_NE(b.status().message().find("free"), std::string::npos) << b.status().message();
  }
  EXPECT_EQ(dev.memory().value().free, free_before) << "freeing the buffer returns its memory";
  EXPECT_EQ(dev.allocated(), 0u);
}

TEST(CpuDevice, ComputeRefusesTensorsThatAreNotPlaced) {
  CpuDevice dev({.threads = 1});
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {4});
  Graph g = Graph::build({ctx.silu(a)});
  auto stream = dev.create_stream().value();
  Status s = stream->compute(g);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("silu"), std::string::npos) << s.message();
}

TEST(CpuDevice, SeveralThreadsMayComputeOnOneDeviceAtOnce) {
  CpuDevice dev({.threads = 2, .min_work_per_node_for_threads = 0});
  auto worker = [&dev](float scale, std::vector<float>* result) {
    Context ctx;
    Tensor* x = ctx.new_tensor(DType::f32, {64, 4});
    x->flags |= kFlagInput;
    Tensor* y = ctx.scale(ctx.silu(x), scale);
    Graph g = Graph::build({y});
    GraphAllocator alloc(dev);
    ASSERT_TRUE(alloc.allocate(g).ok());
    auto stream = dev.create_stream().value();
    for (int rep = 0; rep < 50; ++rep) {
      ASSERT_TRUE(write_from_f32(*x, std::vector<float>(256, 1.0f)).ok());
      ASSERT_TRUE(stream->compute(g).ok());
    }
    *result = read_as_f32(*y).value();
  };
  std::vector<float> r1, r2;
  std::thread t1(worker, 2.0f, &r1), t2(worker, 3.0f, &r2);
  t1.join();
  t2.join();
  const float silu1 = 1.0f / (1.0f + std::exp(-1.0f));
  ASSERT_EQ(r1.size(), 256u);
  ASSERT_EQ(r2.size(), 256u);
  for (float v : r1) EXPECT_NEAR(v, 2.0f * silu1, 1e-5f);
  for (float v : r2) EXPECT_NEAR(v, 3.0f * silu1, 1e-5f);
}

TEST(CpuDevice, ReusedAllocatorPlacesANewGraphAfresh) {
  CpuDevice dev({.threads = 1});
  GraphAllocator alloc(dev);
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {8});
  x->flags |= kFlagInput;
  Tensor* y = ctx.scale(x, 2.0f);
  Graph g = Graph::build({y});
  ASSERT_TRUE(alloc.allocate(g).ok());
  ASSERT_TRUE(alloc.allocate(g).ok()) << "allocating the same graph twice is fine";
  ASSERT_NE(x->data, y->data);
  ASSERT_TRUE(write_from_f32(*x, std::vector<float>(8, 1.25f)).ok());
  auto stream = dev.create_stream().value();
  ASSERT_TRUE(stream->compute(g).ok());
  for (float v : read_as_f32(*y).value()) EXPECT_EQ(v, 2.5f);
}

}  // namespace
}  // namespace tensorpc

namespace tensorpc {
namespace {

// silu(w·x) on dev, w [K, M] of `wtype`, x f32 [K, N], both filled with
// fixed values.
struct SiluOfProduct {
  SiluOfProduct(CpuDevice& dev, DType wtype, int64_t K, int64_t M, int64_t N) : alloc(dev) {
    w = ctx.new_tensor(wtype, {K, M});
    x = ctx.new_tensor(DType::f32, {K, N});
    w->flags |= kFlagInput;
    x->flags |= kFlagInput;
    y = ctx.silu(ctx.mul_mat(w, x));
    g = Graph::build({y});
    EXPECT_TRUE(alloc.allocate(g).ok());
    std::vector<float> wv(static_cast<size_t>(K * M));
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>(i % 7) * 0.125f - 0.3f;
    EXPECT_TRUE(write_from_f32(*w, wv).ok());
    write_x();
  }
  void write_x() {
    std::vector<float> xv(static_cast<size_t>(x->nelements()));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
    EXPECT_TRUE(write_from_f32(*x, xv).ok());
  }

  Context ctx;
  Tensor* w = nullptr;
  Tensor* x = nullptr;
  Tensor* y = nullptr;
  Graph g;
  GraphAllocator alloc;
};

// A small graph runs on the calling thread alone, a large one on every
// thread; both give the same bits.
TEST(CpuDevice, SmallGraphsRunOnOneThreadWithTheSameResult) {
  auto run = [](double threshold) {
    CpuDevice dev({.threads = 2, .min_work_per_node_for_threads = threshold});
    SiluOfProduct graph(dev, DType::f32, 64, 48, 3);
    EXPECT_TRUE(dev.create_stream().value()->compute(graph.g).ok());
    return read_as_f32(*graph.y).value();
  };
  EXPECT_EQ(run(1e12), run(0));
}

// A kernel that runs out of memory for its scratch (injected here) fails
// that compute with a Status naming the node — on the calling thread alone
// and on a pool worker, with the other thread waiting inside the node
// (quantized mul_mat meets its threads at a barrier) — and the device
// computes the same graph right afterwards.
TEST(CpuDevice, AKernelOutOfMemoryFailsTheComputeAndTheDeviceGoesOn) {
  for (const double threshold : {1e12, 0.0}) {  // alone, then both threads
    for (int failures = 1; failures <= 2; ++failures) {
      SCOPED_TRACE("threshold " + std::to_string(threshold) + ", failures " + std::to_string(failures));
      CpuDevice dev({.threads = 2, .min_work_per_node_for_threads = threshold});
      SiluOfProduct graph(dev, DType::q8_0, 256, 96, 3);
      auto stream = dev.create_stream().value();
      ASSERT_TRUE(stream->compute(graph.g).ok());
      const std::vector<float> want = read_as_f32(*graph.y).value();

      cpu::inject_kernel_failures(Op::mul_mat, failures);
      const Status failed = stream->compute(graph.g);
      cpu::inject_kernel_failures(Op::mul_mat, 0);
      EXPECT_EQ(failed.code(), StatusCode::out_of_memory) << failed.to_string();
      EXPECT_NE(failed.message().find("mul_mat"), std::string::npos) << failed.message();
      EXPECT_NE(failed.message().find("scratch"), std::string::npos) << failed.message();

      graph.write_x();
      const Status again = stream->compute(graph.g);
      ASSERT_TRUE(again.ok()) << again.to_string();
      EXPECT_EQ(read_as_f32(*graph.y).value(), want);
    }
  }
}

}  // namespace
}  // namespace tensorpc
