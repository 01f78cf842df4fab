// Faults, and what the server and the client make of them: clients that die
// mid-frame or mid-compute, peers that stall without closing, a server killed
// or stopped under a waiting client, and a server restarted under one. Each
// test holds the system to a bound: resources back where they were, or an
// error naming the endpoint within a deadline, and everything else going on.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/log.h"
#include "remote_test_util.h"
#include "rpc/rpc_test_util.h"
#include "rpc/wire_jobs.h"
#include "server_process.h"
#include "tensorpc/context.h"

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

std::string endpoint_of(const Server& server) { return "127.0.0.1:" + std::to_string(server.port()); }

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

// All `size` bytes of `buffer` as one f32 tensor, for Buffer::set and get.
Tensor whole(Buffer& buffer) {
  Tensor t;
  t.type = DType::f32;
  const auto size = buffer.size();
  t.ne = {static_cast<int64_t>(size / 4), 1, 1, 1};
  t.nb = {4, size, size, size};
  t.buffer = &buffer;
  return t;
}

std::unique_ptr<tools::ServerProcess> server_process(const std::vector<std::string>& args = {"--device", "cpu:1"}) {
  auto p = tools::ServerProcess::start(TENSORPC_SERVER_BINARY, args, seconds(30));
  if (!p.ok()) throw std::runtime_error(p.status().to_string());
  return std::move(p).value();
}

// A stopped process is resumed on every way out of a test, so that stopping
// it (SIGTERM) then works.
struct ResumeOnExit {
  pid_t pid;
  ~ResumeOnExit() { ::kill(pid, SIGCONT); }
};

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

TEST(StalledPeers, AConnectionThatNeverSaysHelloIsClosedAfterTheIoTimeout) {
  ServerOptions options;
  options.io_timeout = milliseconds(300);
  auto server = serve(options);
  const ServerStats before = server->stats();
  RawClient silent(server->port());  // connects, then says nothing
  const auto start = Clock::now();
  EXPECT_TRUE(silent.closed_by_server());
  EXPECT_GE(Clock::now() - start, milliseconds(200));
  EXPECT_LT(Clock::now() - start, seconds(5));
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

// ---- servers that die, stop or restart ------------------------------------------------

TEST(ServerFaults, AServerKilledMidComputeFailsTheWaitingCallPromptlyAndAnotherServerGoesOn) {
  auto doomed = server_process();
  auto survivor = serve();
  const ServerStats survivor_before = survivor->stats();
  auto on_doomed = remote_device(doomed->endpoint(), 0);
  auto on_survivor = remote_device(endpoint_of(*survivor), 0);

  // Far more work than the test waits for: the server is computing when killed.
  Context ctx;
  const int64_t n = 512;
  Tensor* w = ctx.new_tensor(DType::f32, {n, n}, "w");
  Tensor* x = input(ctx, DType::f32, {n, n}, "x");
  Tensor* y = ctx.mul_mat(w, x);
  Graph graph = Graph::build({y});
  GraphAllocator alloc(*on_doomed);
  ASSERT_TRUE(alloc.allocate(graph).ok());
  ASSERT_TRUE(alloc.buffer()->clear(0).ok());
  auto stream = on_doomed->create_stream();
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(stream.value()->compute_async(graph).ok());

  Status result;
  Clock::time_point failed_at;
  std::thread waiter([&] {
    result = stream.value()->synchronize();
    failed_at = Clock::now();
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto killed_at = Clock::now();
  ::kill(doomed->pid(), SIGKILL);
  waiter.join();
  ASSERT_FALSE(result.ok()) << "the computation ended before the server was killed";
  EXPECT_LT(failed_at - killed_at, seconds(10));
  EXPECT_NE(result.message().find(doomed->endpoint()), std::string::npos) << result.to_string();
  // Later calls on the dead server fail at once, naming it too.
  Status again = stream.value()->compute_async(graph);
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find(doomed->endpoint()), std::string::npos) << again.to_string();

  // The other server serves this process as before.
  {
    Context small;
    Tensor* a = input(small, DType::f32, {64, 4}, "a");
    Tensor* b = input(small, DType::f32, {64, 4}, "b");
    Tensor* sum = small.add(a, b);
    GraphRun run(*on_survivor, {sum});
    const auto av = run.write(a, random_floats(256, 1));
    const auto bv = run.write(b, random_floats(256, 2));
    run.compute();
    const auto got = run.read(sum);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], av[i] + bv[i]) << i;
    EXPECT_GT(survivor->stats().live_buffers, survivor_before.live_buffers);
  }
  // ... and frees what the client dropped.
  EXPECT_TRUE(back_to(*survivor, survivor_before));
}

TEST(ServerFaults, AStoppedServerFailsCallsWithinTheReplyTimeoutAndServesAgainOnceResumed) {
  auto server = server_process();
  const milliseconds timeout(kSanitized ? 1500 : 500);
  auto device = remote_device(server->endpoint(), 0, RemoteOptions{.reply_timeout = timeout});
  auto buffer = device->allocate(4096);
  ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
  const Tensor t = whole(*buffer.value());
  std::vector<uint8_t> bytes(4096, 3);
  ASSERT_TRUE(buffer.value()->set(t, bytes.data(), 0, bytes.size()).ok());

  // The process stops; its kernel still holds the connection open and even
  // accepts new ones, so only a timeout can tell.
  ::kill(server->pid(), SIGSTOP);
  ResumeOnExit resume{server->pid()};
  int status = 0;  // the signal is sent; wait until every thread of the server has stopped
  ASSERT_EQ(::waitpid(server->pid(), &status, WUNTRACED), server->pid());
  ASSERT_TRUE(WIFSTOPPED(status));
  auto start = Clock::now();
  Status s = buffer.value()->get(t, bytes.data(), 0, bytes.size());
  auto waited = Clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_GE(waited, timeout - milliseconds(50));
  EXPECT_LT(waited, timeout + seconds(5));
  EXPECT_NE(s.message().find(server->endpoint()), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s.to_string();

  // A new connection gets no HELLO reply: that times out too.
  start = Clock::now();
  auto refused = device->allocate(4096);
  waited = Clock::now() - start;
  ASSERT_FALSE(refused.ok());
  EXPECT_LT(waited, timeout + seconds(5));
  EXPECT_NE(refused.status().message().find(server->endpoint()), std::string::npos) << refused.status().to_string();

  ::kill(server->pid(), SIGCONT);
  auto fresh = device->allocate(4096);
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  const Tensor f = whole(*fresh.value());
  std::vector<uint8_t> back(4096);
  ASSERT_TRUE(fresh.value()->set(f, bytes.data(), 0, bytes.size()).ok());
  ASSERT_TRUE(fresh.value()->get(f, back.data(), 0, back.size()).ok());
  EXPECT_EQ(back, bytes);
}

// A server that copies to a stopped one (COPY_TO_PEER) gives up after its
// I/O timeout, on the connection it had and on a new one, and the session
// that asked goes on.
TEST(ServerFaults, ACopyToAStoppedServerFailsWithinTheSourcesIoTimeout) {
  auto destination = server_process();
  ServerOptions options;
  options.io_timeout = milliseconds(300);
  auto source = serve(options);
  const std::string from = endpoint_of(*source);
  const std::string to = destination->endpoint();

  auto src = raw_client(*source);
  const uint64_t a = src->alloc(4096);
  ASSERT_TRUE(src->set_tensor(a, 0, std::vector<uint8_t>(4096, 1)).ok());
  RawClient dst(destination->port());
  ASSERT_TRUE(dst.hello().ok());
  const uint64_t b = dst.alloc(4096);
  // Grants for every copy below, asked for while the destination answers.
  std::vector<rpc::GrantToken> tokens;
  for (int i = 0; i < 3; ++i) {
    auto reply = dst.call_for<rpc::GrantWriteReply>(Command::grant_write, rpc::GrantWriteRequest{b, 0, 4096});
    ASSERT_TRUE(reply.ok()) << reply.status().to_string();
    tokens.push_back(reply.value().token);
  }
  const auto copy = [&](const rpc::GrantToken& token) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::CopyToPeerRequest{a, 0, 4096, to, token});
    return src->call_status(Command::copy_to_peer, w);
  };
  ASSERT_TRUE(copy(tokens[0]).ok());  // the source now holds a connection to the destination

  ::kill(destination->pid(), SIGSTOP);
  ResumeOnExit resume{destination->pid()};
  int status = 0;
  ASSERT_EQ(::waitpid(destination->pid(), &status, WUNTRACED), destination->pid());
  for (int i = 1; i < 3; ++i) {  // on the open connection, then on a new one (its HELLO)
    const auto start = Clock::now();
    const Status s = copy(tokens[i]);
    EXPECT_FALSE(s.ok()) << i;
    EXPECT_LT(Clock::now() - start, seconds(5)) << i;
    EXPECT_NE(s.message().find(from), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(to), std::string::npos) << s.to_string();
  }
  EXPECT_TRUE(src->ping().ok());
}

TEST(ServerFaults, AClientReconnectsToARestartedServerOnItsNextUse) {
  auto first = serve();
  const uint16_t port = first->port();
  const std::string endpoint = endpoint_of(*first);
  auto device = remote_device(endpoint, 0);
  auto old = device->allocate(64);
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  std::vector<uint8_t> bytes(64, 9), back(64);
  ASSERT_TRUE(old.value()->set(whole(*old.value()), bytes.data(), 0, 64).ok());

  first->stop();
  first.reset();
  auto second = serve({}, port);
  // The first use after the restart reaches the new server: the connection
  // whose server hung up is noticed and replaced, even while a buffer of the
  // old server still holds it.
  auto fresh = device->allocate(64);
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  const Tensor f = whole(*fresh.value());
  ASSERT_TRUE(fresh.value()->set(f, bytes.data(), 0, 64).ok());
  ASSERT_TRUE(fresh.value()->get(f, back.data(), 0, 64).ok());
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(second->stats().live_buffers, 1u);
  // A buffer of the old server is gone with it: its calls fail, naming the endpoint.
  Status s = old.value()->get(whole(*old.value()), back.data(), 0, 64);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(endpoint), std::string::npos) << s.to_string();

  old.value().reset();
  fresh.value().reset();
  EXPECT_TRUE(eventually([&] { return second->stats().sessions == 0 && second->stats().live_buffers == 0; }));
}

}  // namespace
}  // namespace tensorpc::test
