// Vulkan devices behind tensorpc-server: one GPU opened twice beside a CPU
// device, as `--device vulkan:0 --device vulkan:0 --device cpu` makes them.
// Graphs computed there match the CPU (VulkanServer), copies between the
// server's devices run on it through every pair of kinds (VulkanServerCopy),
// and a client that goes away, cleanly or in the middle of an upload, leaves
// the GPU's memory as it found it (VulkanServerMemory).
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <set>

#include "device_spec.h"
#include "rpc/remote_test_util.h"
#include "rpc/rpc_test_util.h"
#include "server_process.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/scheduler.h"
#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The devices of `--device vulkan:0 --device vulkan:0 --device cpu:2`.
std::vector<std::shared_ptr<Device>> gpu_twice_and_cpu() {
  std::vector<tools::DeviceSpec> specs;
  for (const char* text : {"vulkan:0", "vulkan:0", "cpu:2"}) specs.push_back(tools::parse_device_spec(text).value());
  auto devices = tools::make_devices(specs);
  check(devices.status(), "make_devices");
  return std::move(devices).value();
}

std::vector<std::unique_ptr<Device>> connect(const std::string& endpoint) {
  auto devices = connect_devices(endpoint);
  check(devices.status(), "connect_devices");
  return std::move(devices).value();
}

TEST(VulkanServer, ServesOneGpuTwiceBesideACpuUnderNamesApart) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  InProcessServer server(gpu_twice_and_cpu());
  auto devices = connect(server.endpoint());
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0]->name(), server.endpoint() + "/vulkan:0");
  EXPECT_EQ(devices[1]->name(), server.endpoint() + "/vulkan:0#2");
  EXPECT_EQ(devices[2]->name(), server.endpoint() + "/cpu2");
  EXPECT_TRUE(contains(devices[0]->description(), "driver")) << devices[0]->description();
  EXPECT_GT(devices[0]->memory().value().total, 0u);
}

// SUPPORTS: a client's remote GPU device computes what the server's GPU
// does, node by node, so that a scheduler runs the rest elsewhere.
TEST(VulkanServer, ARemoteGpuSaysWhatItComputesAsTheLocalOneDoes) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(local);
  InProcessServer server(gpu_twice_and_cpu());
  auto remote = connect(server.endpoint());
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {64, 5});
  Tensor* w = input(ctx, DType::f32, {64, 48});
  Tensor* q = input(ctx, DType::q8_0, {64, 48});
  Tensor* cache = input(ctx, DType::f32, {64, 32});
  Tensor* cells = input(ctx, DType::i32, {5});
  Tensor* logits = input(ctx, DType::f32, {2048, 1});
  // Not computed on the GPU: top_k past the 1,024 candidates it sorts in
  // shared memory.
  Tensor* candidates = ctx.top_k(logits, 1025);
  // Nor the mixture-of-experts ops, nor soft_max with sinks (1.12).
  Tensor* heads = input(ctx, DType::f32, {16, 4, 2});
  Tensor* ids = input(ctx, DType::i32, {2, 5});
  const std::vector<Tensor*> nodes = {
      ctx.mul_mat(w, x),
      ctx.mul_mat(q, x),
      ctx.rms_norm(x, 1e-6f),
      ctx.set_rows(cache, x, cells),
      ctx.soft_max(ctx.transpose(x), nullptr, 1.0f),
      candidates,
      ctx.soft_max(heads, nullptr, 1.0f, input(ctx, DType::f32, {2})),
      ctx.mul_mat_id(input(ctx, DType::q8_0, {64, 48, 3}), ctx.reshape(x, {64, 1, 5}), ids),
      ctx.top_k_ids(logits, 4),
      ctx.swiglu_clamp(x, x, 1.702f, 7.0f)};
  int computed = 0;
  for (const Tensor* node : nodes) {
    EXPECT_EQ(remote[0]->supports(*node), local->supports(*node)) << describe(*node);
    EXPECT_EQ(remote[1]->supports(*node), local->supports(*node)) << describe(*node);
    EXPECT_TRUE(remote[2]->supports(*node)) << describe(*node);  // the CPU device computes them all
    computed += local->supports(*node) ? 1 : 0;
  }
  EXPECT_GT(computed, 0);
  EXPECT_LT(computed, static_cast<int>(nodes.size()));  // else this shows nothing
}

TEST(VulkanServer, EachGpuOpeningComputesAGraphAsTheCpuDoes) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  InProcessServer server(gpu_twice_and_cpu());
  auto devices = connect(server.endpoint());
  const GraphBuilder build = [](Context& ctx) -> std::vector<Tensor*> {
    Tensor* x = input(ctx, DType::f32, {64, 7});
    Tensor* w = input(ctx, DType::f32, {64, 48});
    Tensor* h = ctx.mul_mat(w, ctx.rms_norm(x, 1e-6f));
    return {ctx.soft_max(ctx.add(h, ctx.silu(h)), nullptr, 0.3f)};
  };
  for (size_t d = 0; d < 2; ++d) EXPECT_TRUE(same_as_cpu(*devices[d], build, {1e-4, 1e-5})) << devices[d]->name();
}

// Three matrix products, the first two on the GPU's two openings and the
// last on the CPU device (where their weights live): one execution plan
// across the server's devices, its copies made there.
TEST(VulkanServer, AnExecutionPlanAcrossBothGpuOpeningsAndTheCpuMatchesTheCpu) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  InProcessServer server(gpu_twice_and_cpu());
  auto remote = connect(server.endpoint());
  CpuDevice cpu(CpuDeviceOptions{.threads = 2});
  const std::vector<float> x_values = random_floats(64 * 5, 1);
  std::vector<std::vector<float>> weights;
  for (uint32_t i = 0; i < 3; ++i) weights.push_back(random_floats(64 * 64, 10 + i));

  // The graph with weight i on devices[i], computed by a scheduler over
  // `devices`; `check_plan` looks at its plan and counters.
  const auto run = [&](const std::vector<Device*>& devices, const std::function<void(const Scheduler&)>& check_plan) {
    Context ctx;
    std::vector<std::unique_ptr<Buffer>> buffers;
    Tensor* h = input(ctx, DType::f32, {64, 5});
    Tensor* x = h;
    for (size_t i = 0; i < 3; ++i) {
      Tensor* w = ctx.new_tensor(DType::f32, {64, 64});
      auto buffer = devices[i]->allocate(w->nbytes());
      check(buffer.status(), "allocate");
      check(buffer.value()->place(*w, 0), "place");
      check(buffer.value()->set(*w, weights[i].data(), 0, w->nbytes()), "set");
      buffers.push_back(std::move(buffer).value());
      h = ctx.rms_norm(ctx.mul_mat(w, h), 1e-6f);
    }
    h->flags |= kFlagOutput;
    Graph g = Graph::build({h});
    Scheduler sched(devices);
    check(sched.allocate(g), "allocate");
    check(x->buffer->set(*x, x_values.data(), 0, x->nbytes()), "set x");
    std::vector<float> out(static_cast<size_t>(h->nelements()));
    check(sched.compute_and_read(g, *h, out.data()), "compute_and_read");
    check_plan(sched);
    return out;
  };
  const std::vector<float> want = run({&cpu, &cpu, &cpu}, [](const Scheduler&) {});
  const std::vector<float> got = run({remote[0].get(), remote[1].get(), remote[2].get()}, [](const Scheduler& s) {
    std::set<size_t> used;
    for (const SchedulePlanInfo::Split& split : s.last_plan()->splits) used.insert(split.device);
    EXPECT_EQ(used, (std::set<size_t>{0, 1, 2})) << s.describe();
    EXPECT_EQ(s.last_run().plans_run, 1u) << s.describe();
    EXPECT_EQ(s.last_run().copies_through_host, 0u) << s.describe();
  });
  EXPECT_TRUE(all_near(got, to_double(want), {1e-4, 1e-5}));
}

TEST(VulkanServerCopy, CopiesBetweenTheGpuOpeningsAndTheCpuRunOnTheServer) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  InProcessServer server(gpu_twice_and_cpu());
  RawClient c(server.server().port());
  ASSERT_TRUE(c.hello().ok());
  const uint64_t gpu = c.alloc(8192, 0), gpu2 = c.alloc(8192, 1), cpu = c.alloc(8192, 2);
  std::vector<uint8_t> bytes(3001);
  std::iota(bytes.begin(), bytes.end(), uint8_t{3});
  ASSERT_TRUE(c.set_tensor(gpu, 100, bytes).ok());
  // GPU to its other opening, to the CPU, back to the first opening.
  const auto copy = [&](uint64_t from, uint64_t from_offset, uint64_t to, uint64_t to_offset) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::CopyTensorRequest{from, from_offset, to, to_offset, bytes.size()});
    return c.call_status(rpc::Command::copy_tensor, w);
  };
  ASSERT_TRUE(copy(gpu, 100, gpu2, 4000).ok());
  ASSERT_TRUE(copy(gpu2, 4000, cpu, 17).ok());
  ASSERT_TRUE(copy(cpu, 17, gpu, 5000).ok());
  for (const auto& [handle, offset] : {std::pair{gpu2, 4000}, std::pair{cpu, 17}, std::pair{gpu, 5000}}) {
    auto got = c.get_tensor(handle, static_cast<uint64_t>(offset), bytes.size());
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got.value(), bytes) << "at " << offset;
  }
  server.stop();
}

// A client on a server of gpu_twice_and_cpu() allocates `bytes` on device
// `d` and does `work` with the handle (RawClient, which sends what it is
// told); then its socket closes without a word. The device's free memory
// must come back to what it was before.
void expect_freed_when_gone(size_t d, uint64_t bytes, const std::function<void(RawClient&, uint64_t)>& work) {
  const auto devices = gpu_twice_and_cpu();
  InProcessServer server(devices);
  const uint64_t before = devices[d]->memory().value().free;
  {
    RawClient c(server.server().port());
    ASSERT_TRUE(c.hello().ok());
    const uint64_t handle = c.alloc(bytes, static_cast<uint32_t>(d));
    ASSERT_NE(handle, 0u);
    work(c, handle);
    EXPECT_LE(devices[d]->memory().value().free, before - bytes);
  }
  EXPECT_TRUE(eventually([&] { return devices[d]->memory().value().free == before; }))
      << devices[d]->memory().value().free << " free, " << before << " before";
}

TEST(VulkanServerMemory, AClientThatGoesAwayLeavesTheGpuMemoryAsItFoundIt) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  expect_freed_when_gone(0, 64 * kMiB, [](RawClient& c, uint64_t handle) {
    ASSERT_TRUE(c.set_tensor(handle, 0, std::vector<uint8_t>(kMiB, 7)).ok());
  });
}

TEST(VulkanServerMemory, AClientKilledMidUploadLeavesTheGpuMemoryAsItFoundIt) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  expect_freed_when_gone(1, 16 * kMiB, [](RawClient& c, uint64_t handle) {
    // SET_TENSOR of 16 MiB, of which 1 MiB comes before the client is gone.
    rpc::WireWriter w;
    rpc::encode(w, rpc::SetTensorRequest{handle, 0, 16 * kMiB});
    std::vector<uint8_t> partial = w.bytes();
    partial.resize(partial.size() + kMiB, 7);
    ASSERT_TRUE(c.send_header(rpc::Command::set_tensor, w.size() + 16 * kMiB, 0, partial.data(), partial.size()).ok());
  });
}

TEST(VulkanServerMemory, ALimitIsTheDevicesMemoryAndAllocationsPastItFail) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  auto devices = tools::make_devices({tools::parse_device_spec("vulkan:0:8MiB").value()});
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  InProcessServer server(std::move(devices).value());
  auto remote = connect(server.endpoint());
  EXPECT_EQ(remote[0]->memory().value().total, 8 * kMiB);
  auto held = remote[0]->allocate(6 * kMiB);
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  auto more = remote[0]->allocate(4 * kMiB);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), StatusCode::out_of_memory) << more.status().to_string();
  EXPECT_TRUE(contains(more.status().message(), "memory limit")) << more.status().to_string();
}

// tensorpc-server itself: the devices it lists, and the error of
// `--device vulkan` where the loader finds no driver.
TEST(VulkanServerCommandLine, ServesTheSpecsDevicesInOrder) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(probe);
  auto server = tools::ServerProcess::start(TENSORPC_SERVER_BINARY,
                                            {"--device", "vulkan:0", "--device", "vulkan:0:64MiB", "--device", "cpu:1"},
                                            std::chrono::seconds(20));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  auto devices = connect(server.value()->endpoint());
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[1]->name(), server.value()->endpoint() + "/vulkan:0#2");
  EXPECT_EQ(devices[1]->memory().value().total, 64 * kMiB);
  EXPECT_EQ(devices[2]->name(), server.value()->endpoint() + "/cpu2");
  EXPECT_TRUE(contains(server.value()->output(), "device 0: vulkan:0")) << server.value()->output();
}

TEST(VulkanServerCommandLine, DeviceVulkanWithoutADriverFailsNamingWhatIsMissing) {
  // The loader reads its drivers from these (old and new names): none there.
  ::setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json", 1);
  ::setenv("VK_DRIVER_FILES", "/nonexistent/icd.json", 1);
  auto server = tools::ServerProcess::start(TENSORPC_SERVER_BINARY, {"--device", "vulkan"}, std::chrono::seconds(20));
  ::unsetenv("VK_ICD_FILENAMES");
  ::unsetenv("VK_DRIVER_FILES");
  ASSERT_FALSE(server.ok()) << "started without a Vulkan driver";
  const std::string message = server.status().message();
  EXPECT_TRUE(contains(message, "exited with status 1")) << message;
  EXPECT_TRUE(contains(message, "--device vulkan")) << message;
  EXPECT_TRUE(contains(message, "no Vulkan driver found")) << message;
}

}  // namespace
}  // namespace tensorpc::test
