// Faults, and what the server makes of them: clients that die mid-frame or
// mid-compute, and peers that stall without closing. Each test holds the
// server to a bound: resources back where they were within a deadline, and
// every other client served meanwhile.
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "remote_test_util.h"
#include "rpc/log.h"
#include "rpc/rpc_test_util.h"
#include "rpc/wire_jobs.h"

namespace tensorpc::test {
namespace {

using rpc::Command;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A server in this process on `port` (0: the OS picks) with one CPU device
// of one thread, unless options name devices.
std::unique_ptr<Server> serve(ServerOptions options = {}, uint16_t port = 0) {
  log::set_level(log::Level::error);
  options.port = port;
  if (options.devices.empty()) {
    options.devices.push_back(std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1}));
  }
  auto s = Server::start(std::move(options));
  if (!s.ok()) throw std::runtime_error(s.status().to_string());
  return std::move(s).value();
}

// True once the server holds no more sessions, buffers and bytes than `before`.
bool back_to(const Server& server, const ServerStats& before, milliseconds deadline = seconds(10)) {
  return eventually(
      [&] {
        const ServerStats now = server.stats();
        return now.sessions == before.sessions && now.live_buffers == before.live_buffers &&
               now.buffer_bytes == before.buffer_bytes;
      },
      deadline);
}

std::unique_ptr<RawClient> raw_client(const Server& server) {
  auto c = std::make_unique<RawClient>(server.port());
  const Status s = c->hello();
  if (!s.ok()) throw std::runtime_error("HELLO: " + s.to_string());
  return c;
}

// ---- clients that die ---------------------------------------------------------------

TEST(ClientFaults, AClientResetMidUploadLeavesNothingBehind) {
  auto server = serve();
  const ServerStats before = server->stats();
  auto c = raw_client(*server);
  const uint64_t filled = c->alloc(1 << 20);
  ASSERT_TRUE(c->set_tensor(filled, 0, std::vector<uint8_t>(1 << 20, 7)).ok());
  const uint64_t target = c->alloc(8 << 20);
  ASSERT_NE(target, 0u);
  ASSERT_TRUE(c->start_set_tensor(target, 8 << 20, 1 << 20).ok());
  EXPECT_EQ(server->stats().buffer_bytes, before.buffer_bytes + (9 << 20));
  c->reset();
  EXPECT_TRUE(back_to(*server, before));
}

TEST(ClientFaults, AClientGoneMidComputeLeavesNothingBehindOnceTheComputeEnds) {
  auto server = serve();
  const ServerStats before = server->stats();
  const HeavyJob job{kSanitized ? 256 : 640};
  auto c = raw_client(*server);
  const uint64_t h = c->alloc(job.bytes());
  rpc::WireWriter clear;
  rpc::encode(clear, rpc::BufferClearRequest{h, 0});
  ASSERT_TRUE(c->call_status(Command::buffer_clear, clear).ok());
  // The graph, run again a few times, then a SYNCHRONIZE whose reply the
  // client never reads.
  ASSERT_TRUE(c->send_frame(Command::graph_compute, graph_frame(job.graph(h), 0, 1), rpc::kFlagNoReply).ok());
  rpc::WireWriter again;
  rpc::encode(again, rpc::GraphRecomputeRequest{0, 1});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c->send_frame(Command::graph_recompute, again, rpc::kFlagNoReply).ok());
  ASSERT_TRUE(c->send_frame(Command::synchronize, rpc::WireWriter()).ok());
  std::this_thread::sleep_for(milliseconds(20));  // the server has the frames and is computing
  c->reset();
  EXPECT_TRUE(back_to(*server, before, seconds(60)));
}

// ---- peers that stall without closing ----------------------------------------------

TEST(StalledPeers, AClientStalledMidFrameIsDisconnectedAfterTheIoTimeoutAndAnIdleOneIsNot) {
  ServerOptions options;
  options.io_timeout = milliseconds(300);
  auto server = serve(options);
  const ServerStats before = server->stats();

  auto idle = raw_client(*server);
  ASSERT_NE(idle->alloc(64), 0u);
  auto mid_payload = raw_client(*server);
  const uint64_t h = mid_payload->alloc(1 << 20);
  ASSERT_TRUE(mid_payload->start_set_tensor(h, 1 << 20, 1000).ok());
  auto mid_header = raw_client(*server);
  const uint8_t part[10] = {0x54, 0x52, 0x50, 0x43};
  ASSERT_TRUE(mid_header->send_bytes(part, sizeof part).ok());

  const auto start = Clock::now();
  EXPECT_TRUE(mid_payload->closed_by_server());
  EXPECT_TRUE(mid_header->closed_by_server());
  EXPECT_LT(Clock::now() - start, seconds(5));
  // Silence between frames is not a stall: the idle client, quiet for many
  // timeouts, is still served.
  std::this_thread::sleep_until(start + milliseconds(900));
  EXPECT_TRUE(idle->ping().ok());
  EXPECT_TRUE(eventually([&] {
    const ServerStats s = server->stats();
    return s.sessions == before.sessions + 1 && s.live_buffers == before.live_buffers + 1;
  }));
  idle.reset();
  EXPECT_TRUE(back_to(*server, before));
}

TEST(StalledPeers, AClientThatStopsReadingRepliesIsDisconnectedAfterTheIoTimeout) {
  ServerOptions options;
  options.io_timeout = milliseconds(300);
  auto server = serve(options);
  const ServerStats before = server->stats();
  auto deaf = raw_client(*server);
  const uint64_t size = 16 << 20;
  const uint64_t h = deaf->alloc(size);
  ASSERT_NE(h, 0u);
  // Far more reply bytes than the socket buffers hold, none of them read.
  rpc::WireWriter get;
  rpc::encode(get, rpc::GetTensorRequest{h, 0, size});
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(deaf->send_frame(Command::get_tensor, get).ok());
  EXPECT_TRUE(eventually([&] { return server->stats().sessions == before.sessions; }, seconds(10)));
  EXPECT_TRUE(back_to(*server, before));
}

TEST(StalledPeers, StalledClientsDoNotHoldUpAnotherClientOnTheSameDevice) {
  auto server = serve();  // the default I/O timeout: the stalls outlast the test
  const ServerStats before = server->stats();
  auto mid_payload = raw_client(*server);
  const uint64_t h = mid_payload->alloc(1 << 20);
  ASSERT_TRUE(mid_payload->start_set_tensor(h, 1 << 20, 1000).ok());
  auto mid_header = raw_client(*server);
  const uint8_t part[10] = {0x54, 0x52, 0x50, 0x43};
  ASSERT_TRUE(mid_header->send_bytes(part, sizeof part).ok());
  auto deaf = raw_client(*server);
  const uint64_t big = deaf->alloc(16 << 20);
  rpc::WireWriter get;
  rpc::encode(get, rpc::GetTensorRequest{big, 0, 16 << 20});
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(deaf->send_frame(Command::get_tensor, get).ok());

  // Every call of the working client has its reply within the RawClient's
  // 10 s receive timeout, or fails; the whole loop within a bound.
  auto c = raw_client(*server);
  const auto start = Clock::now();
  const int rounds = kSanitized ? 10 : 50;
  for (int i = 0; i < rounds; ++i) {
    const SmallJob job(static_cast<uint32_t>(i));
    const uint64_t b = c->alloc(SmallJob::kBytes);
    ASSERT_NE(b, 0u) << "round " << i;
    ASSERT_TRUE(c->set_tensor(b, SmallJob::kA, job.inputs()).ok()) << "round " << i;
    Status s = c->call_status(Command::graph_compute, graph_frame(job.graph(b), 0, 1));
    ASSERT_TRUE(s.ok()) << "round " << i << ": " << s.to_string();
    auto got = c->get_tensor(b, SmallJob::kS, SmallJob::kBytes - SmallJob::kS);
    ASSERT_TRUE(got.ok()) << "round " << i << ": " << got.status().to_string();
    EXPECT_TRUE(got.value() == job.expected()) << "round " << i;
    ASSERT_TRUE(c->free(b).ok());
  }
  EXPECT_LT(Clock::now() - start, seconds(kSanitized ? 20 : 5));
  EXPECT_EQ(server->stats().sessions, before.sessions + 4);  // the stalled ones are still there
  mid_payload->reset();
  mid_header->reset();
  deaf->reset();
  c.reset();
  EXPECT_TRUE(back_to(*server, before));
}

}  // namespace
}  // namespace tensorpc::test
