// Several devices behind one server: each is its own device to clients
// (MultiDeviceServer), copies between them run on the server and move no
// tensor bytes through the client (MultiDeviceCopy), memory limits are per
// device and reach the client intact (MultiDeviceMemory), and clients on
// separate connections use different devices at once (MultiDeviceClients).
#include <atomic>
#include <thread>

#include "pipeline_util.h"
#include "remote_test_util.h"
#include "rpc/transport/connection.h"
#include "core/log.h"
#include "rpc/client/remote_buffer.h"
#include "rpc/client/remote_device.h"
#include "rpc/client/remote_stream.h"
#include "rpc_test_util.h"

namespace tensorpc::test {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::vector<std::unique_ptr<Device>> connect(const std::string& endpoint) {
  auto devices = connect_devices(endpoint);
  check(devices.status(), "connect_devices");
  return std::move(devices).value();
}

// ---- devices ----------------------------------------------------------------

TEST(MultiDeviceServer, EachDeviceIsListedAndReportsItsOwnMemory) {
  InProcessServer server(two_cpus(8 * kMiB, 32 * kMiB));
  auto devices = connect(server.endpoint());
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0]->name(), server.endpoint() + "/cpu0");
  EXPECT_EQ(devices[1]->name(), server.endpoint() + "/cpu1");
  EXPECT_EQ(devices[0]->memory().value().total, 8 * kMiB);
  EXPECT_EQ(devices[1]->memory().value().total, 32 * kMiB);

  // An allocation on one device is accounted on that device only.
  auto b = devices[1]->allocate(4 * kMiB);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(devices[0]->memory().value().free, 8 * kMiB);
  EXPECT_EQ(devices[1]->memory().value().free, 28 * kMiB);
}

TEST(MultiDeviceServer, EveryDeviceScopedCommandChecksTheIndex) {
  log::set_level(log::Level::error);
  InProcessServer server(two_cpus());
  RawClient c(server.server().port());
  ASSERT_TRUE(c.hello().ok());
  auto expect_out_of_range = [&](rpc::Command command, const rpc::WireWriter& w) {
    Status s = c.call_status(command, w);
    EXPECT_EQ(s.code(), StatusCode::invalid_argument) << rpc::name_of(command);
    EXPECT_TRUE(contains(s.message(), "device index 2 out of range")) << s.to_string();
  };
  rpc::WireWriter memory, alloc, compute, recompute, supports;
  rpc::encode(memory, rpc::DeviceMemoryRequest{2});
  rpc::encode(alloc, rpc::BufferAllocRequest{2, 64});
  rpc::encode(compute, rpc::GraphComputeRequest{2, 1});
  compute.u32(0);  // an empty graph
  rpc::encode(recompute, rpc::GraphRecomputeRequest{2, 1});
  rpc::encode(supports, rpc::SupportsRequest{2});
  supports.u32(0);  // an empty graph
  expect_out_of_range(rpc::Command::device_memory, memory);
  expect_out_of_range(rpc::Command::buffer_alloc, alloc);
  expect_out_of_range(rpc::Command::graph_compute, compute);
  expect_out_of_range(rpc::Command::graph_recompute, recompute);
  expect_out_of_range(rpc::Command::supports, supports);
  EXPECT_NE(c.alloc(64, 1), 0u);  // the last valid index works
  server.stop();
}

// ---- copies between devices of one server ---------------------------------------

TEST(MultiDeviceCopy, RawCopyBetweenDevicesRunsOnTheServer) {
  InProcessServer server(two_cpus());
  RawClient c(server.server().port());
  ASSERT_TRUE(c.hello().ok());
  const uint64_t on0 = c.alloc(4096, 0), on1 = c.alloc(4096, 1);
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE(c.set_tensor(on0, 100, bytes).ok());
  rpc::WireWriter w;
  rpc::encode(w, rpc::CopyTensorRequest{on0, 100, on1, 2000, bytes.size()});
  ASSERT_TRUE(c.call_status(rpc::Command::copy_tensor, w).ok());
  auto got = c.get_tensor(on1, 2000, bytes.size());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value(), bytes);
  server.stop();
}

TEST(MultiDeviceCopy, PipelineHandOverBetweenDevicesMovesNoTensorBytesThroughTheClient) {
  InProcessServer server(two_cpus());
  auto devices = connect(server.endpoint());
  uint64_t sent = 0, received = 0, tensor_bytes = 0;
  const std::vector<float> y = run_pipeline(*devices[0], *devices[1], [&](Stage& s1, Stage& s2) {
    tensor_bytes = s1.out->nbytes();
    const ConnectionStats before = connection_stats(server.endpoint());
    ASSERT_TRUE(before.live);
    check(s2.in->buffer->copy(*s1.out, *s2.in), "copy");
    check(s2.stream->synchronize(), "synchronize");  // the copy is done on the server
    const ConnectionStats after = connection_stats(server.endpoint());
    sent = after.bytes_sent - before.bytes_sent;
    received = after.bytes_received - before.bytes_received;
  });
  EXPECT_EQ(tensor_bytes, 4 * kMiB);
  // COPY_TENSOR (one frame) and a SYNCHRONIZE round trip: under 256 bytes.
  EXPECT_LT(sent, 256u);
  EXPECT_LT(received, 256u);
  EXPECT_EQ(y, local_pipeline());
}

// ---- memory limits --------------------------------------------------------------

TEST(MultiDeviceMemory, AllocationBeyondTheLimitNamesTheDeviceAndWhatIsFree) {
  InProcessServer server(two_cpus(4 * kMiB, 16 * kMiB));
  auto devices = connect(server.endpoint());
  Device& small = *devices[0];
  const MemoryInfo fresh = small.memory().value();
  EXPECT_EQ(fresh.free, 4 * kMiB);
  {
    auto a = small.allocate(3 * kMiB);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    auto b = small.allocate(2 * kMiB);  // 1 MiB left
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::out_of_memory);
    const std::string m = b.status().message();
    EXPECT_TRUE(contains(m, "BUFFER_ALLOC to " + server.endpoint())) << m;
    EXPECT_TRUE(contains(m, "cpu0")) << m;
    EXPECT_TRUE(contains(m, "2.0 MiB")) << m;                  // the request
    EXPECT_TRUE(contains(m, "1.0 MiB of 4.0 MiB free")) << m;  // what is free
    // Nothing was half-allocated, and the other device is untouched.
    EXPECT_EQ(small.memory().value().free, 1 * kMiB);
    EXPECT_EQ(devices[1]->memory().value().free, 16 * kMiB);
    // The other device still has room for it.
    auto c = devices[1]->allocate(2 * kMiB);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
  }
  // Freed (BUFFER_FREE is one-way): back where it was.
  EXPECT_TRUE(eventually([&] { return small.memory().value().free == fresh.free; }));
  EXPECT_TRUE(eventually([&] { return devices[1]->memory().value().free == 16 * kMiB; }));
}

// ---- several clients ------------------------------------------------------------

// out = silu(w · x) for seeded w [64, 32] and x [64, 8], in one buffer of `buffer`.
std::vector<float> small_stage(Buffer& buffer, Stream& stream, uint32_t seed) {
  Context ctx;
  Tensor* w = input(ctx, DType::f32, {64, 32});
  Tensor* x = input(ctx, DType::f32, {64, 8});
  Tensor* out = ctx.silu(ctx.mul_mat(w, x));
  Graph g = Graph::build({out});
  Tensor* product = out->src[0];
  check(buffer.place(*w, 0), "place w");
  check(buffer.place(*x, 8192), "place x");
  check(buffer.place(*product, 12288), "place w·x");
  check(buffer.place(*out, 13312), "place out");
  check(write_from_f32(*w, random_floats(64 * 32, seed)), "write w");
  check(write_from_f32(*x, random_floats(64 * 8, seed + 1)), "write x");
  check(stream.compute(g), "compute");
  auto y = read_as_f32(*out);
  check(y.status(), "read");
  return std::move(y).value();
}

TEST(MultiDeviceClients, ClientsOnSeparateConnectionsUseDifferentDevicesAtOnce) {
  InProcessServer server(two_cpus());
  constexpr int kClients = 4, kRounds = 5;
  CpuDevice local(CpuDeviceOptions{.threads = 2});
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < kClients; ++i) {
    auto buf = local.allocate(16384);
    auto stream = local.create_stream();
    expected.push_back(small_stage(*buf.value(), *stream.value(), 100 + 10 * i));
  }
  auto endpoint = parse_endpoint(server.endpoint());
  ASSERT_TRUE(endpoint.ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        // A connection of its own (not the shared one of get_connection), so
        // the server gives this client a session of its own.
        auto connection = rpc::Connection::open(endpoint.value());
        check(connection.status(), "open");
        const uint32_t index = static_cast<uint32_t>(i % 2);
        rpc::RemoteDevice device(server.endpoint(), index, {});
        rpc::BufferAllocReply reply;
        check(connection.value()->call(rpc::Command::buffer_alloc, rpc::BufferAllocRequest{index, 16384}, reply),
              "alloc");
        rpc::RemoteBuffer buffer(device.link(), connection.value(), reply.handle, 16384);
        rpc::RemoteStream stream(device.link(), connection.value());
        for (int r = 0; r < kRounds; ++r) {
          if (small_stage(buffer, stream, 100 + 10 * i) != expected[i]) failures += 1;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << i << ": " << e.what();
        failures += 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(eventually([&] { return server.stats().live_buffers == 0; }));
}

}  // namespace
}  // namespace tensorpc::test
