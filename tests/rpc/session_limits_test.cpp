// What one client may hold on a server: the session limits on buffer bytes
// (across devices) and on live handles, the device limits shared by all
// sessions, and the tensorpc-server flags that set them.
#include <algorithm>
#include <atomic>
#include <thread>

#include "core/log.h"
#include "rpc/remote_test_util.h"
#include "rpc/rpc_test_util.h"
#include "server_process.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/server.h"

namespace tensorpc::test {
namespace {

using rpc::Command;

std::unique_ptr<Server> serve(ServerOptions options) {
  log::set_level(log::Level::error);
  options.port = 0;
  if (options.devices.empty()) {
    options.devices.push_back(std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1}));
  }
  auto s = Server::start(std::move(options));
  if (!s.ok()) throw std::runtime_error(s.status().to_string());
  return std::move(s).value();
}

std::unique_ptr<RawClient> raw_client(uint16_t port) {
  auto c = std::make_unique<RawClient>(port);
  const Status s = c->hello();
  if (!s.ok()) throw std::runtime_error("HELLO: " + s.to_string());
  return c;
}

// BUFFER_ALLOC's status (the handle, when ok, through `handle`).
Status alloc_status(RawClient& c, uint64_t size, uint32_t device = 0, uint64_t* handle = nullptr) {
  auto reply = c.call_for<rpc::BufferAllocReply>(Command::buffer_alloc, rpc::BufferAllocRequest{device, size});
  if (!reply.ok()) return reply.status();
  if (handle != nullptr) *handle = reply.value().handle;
  return Status();
}

bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

TEST(SessionLimits, DefaultsAreNoMemoryLimitAGenerousHandleLimitAndAnIoTimeout) {
  const ServerOptions defaults;
  EXPECT_EQ(defaults.max_session_memory, 0u);
  EXPECT_EQ(defaults.max_session_buffers, 65536u);
  EXPECT_EQ(defaults.io_timeout, std::chrono::seconds(30));
}

TEST(SessionLimits, AnAllocationPastTheSessionMemoryLimitIsRefusedNamingItAndTheConnectionGoesOn) {
  ServerOptions options;
  options.max_session_memory = 1 << 20;
  auto server = serve(options);
  auto c = raw_client(server->port());
  uint64_t first = 0;
  ASSERT_TRUE(alloc_status(*c, 600 << 10, 0, &first).ok());
  const Status refused = alloc_status(*c, 600 << 10);
  EXPECT_EQ(refused.code(), StatusCode::out_of_memory) << refused.to_string();
  EXPECT_TRUE(contains(refused, "1048576")) << refused.to_string();
  EXPECT_TRUE(contains(refused, "--client-memory")) << refused.to_string();
  // Sizes that would overflow a careless sum are refused the same way.
  const Status huge = alloc_status(*c, ~uint64_t{0} - 100);
  EXPECT_EQ(huge.code(), StatusCode::out_of_memory) << huge.to_string();
  EXPECT_TRUE(contains(huge, "1048576")) << huge.to_string();
  // Nothing was reserved for the refused ones; the connection goes on.
  EXPECT_EQ(server->stats().buffer_bytes, 600u << 10);
  EXPECT_TRUE(c->ping().ok());
  EXPECT_TRUE(alloc_status(*c, 400 << 10).ok());  // up to the limit exactly: 1000 KiB
  ASSERT_TRUE(c->free(first).ok());
  EXPECT_TRUE(alloc_status(*c, 600 << 10).ok());  // freed bytes count no more
}

TEST(SessionLimits, TheMemoryLimitCountsEveryDeviceOfASessionAndNoOtherSession) {
  ServerOptions options;
  options.max_session_memory = 1 << 20;
  options.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1}),
                     std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu1", .threads = 1})};
  auto server = serve(options);
  auto a = raw_client(server->port());
  ASSERT_TRUE(alloc_status(*a, 600 << 10, 0).ok());
  EXPECT_EQ(alloc_status(*a, 600 << 10, 1).code(), StatusCode::out_of_memory);
  auto b = raw_client(server->port());
  EXPECT_TRUE(alloc_status(*b, 600 << 10, 0).ok());
  EXPECT_TRUE(alloc_status(*b, 400 << 10, 1).ok());
  // A session that ends gives its share back; a new one starts from nothing.
  a.reset();
  ASSERT_TRUE(eventually([&] { return server->stats().sessions == 1; }));
  auto c = raw_client(server->port());
  EXPECT_TRUE(alloc_status(*c, 1 << 20, 1).ok());
}

TEST(SessionLimits, ABufferPastTheHandleLimitIsRefusedNamingIt) {
  ServerOptions options;
  options.max_session_buffers = 100;
  auto server = serve(options);
  auto c = raw_client(server->port());
  std::vector<uint64_t> handles(100);
  for (uint64_t& h : handles) ASSERT_TRUE(alloc_status(*c, 1, 0, &h).ok());
  const Status refused = alloc_status(*c, 1);
  EXPECT_EQ(refused.code(), StatusCode::out_of_memory) << refused.to_string();
  EXPECT_TRUE(contains(refused, "--client-buffers 100")) << refused.to_string();
  EXPECT_EQ(server->stats().live_buffers, 100u);
  ASSERT_TRUE(c->free(handles[7]).ok());
  EXPECT_TRUE(alloc_status(*c, 1).ok());
  // Another session has handles of its own.
  auto d = raw_client(server->port());
  EXPECT_TRUE(alloc_status(*d, 1).ok());
}

TEST(SessionLimits, ADeviceMemoryLimitHoldsAcrossConcurrentSessions) {
  constexpr uint64_t kLimit = 1 << 20, kChunk = 64 << 10;
  auto device = std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1, .memory_limit = kLimit});
  ServerOptions options;
  options.devices = {device};
  auto server = serve(options);
  constexpr int kClients = 4;
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(raw_client(server->port()));
  std::atomic<int> granted{0};
  std::atomic<int> wrong_refusals{0};
  std::vector<int> held(kClients, 0);  // chunks each client got
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i, client = clients[static_cast<size_t>(i)].get()] {
      // Until the device says no: each grant is a chunk the others cannot have.
      for (;;) {
        const Status s = alloc_status(*client, kChunk);
        if (s.ok()) {
          granted += 1;
          held[static_cast<size_t>(i)] += 1;
          continue;
        }
        if (s.code() != StatusCode::out_of_memory || !contains(s, "cpu0")) wrong_refusals += 1;
        return;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong_refusals.load(), 0);
  EXPECT_EQ(static_cast<uint64_t>(granted.load()) * kChunk, kLimit);
  EXPECT_EQ(device->allocated(), kLimit);
  EXPECT_EQ(server->stats().buffer_bytes, kLimit);
  // One session's end frees room for another's (one that got chunks: a
  // client may have got none while the others took them all).
  const size_t holder = static_cast<size_t>(std::max_element(held.begin(), held.end()) - held.begin());
  const size_t other = (holder + 1) % kClients;
  clients[holder].reset();
  EXPECT_TRUE(eventually([&] { return device->allocated() < kLimit; }));
  EXPECT_TRUE(alloc_status(*clients[other], kChunk).ok());
  clients.clear();
  EXPECT_TRUE(eventually([&] { return device->allocated() == 0 && server->stats().sessions == 0; }));
}

// y = silu(w · x) computed for a client on `endpoint`, from fixed inputs.
std::vector<float> a_clients_run(const std::string& endpoint) {
  auto device = remote_device(endpoint, 0);
  Context ctx;
  Tensor* w = input(ctx, DType::f32, {64, 32});
  Tensor* x = input(ctx, DType::f32, {64, 4});
  Tensor* y = ctx.silu(ctx.mul_mat(w, x));
  Graph g = Graph::build({y});
  GraphAllocator alloc(*device);
  check(alloc.allocate(g), "allocate");
  check(write_from_f32(*w, random_floats(64 * 32, 1)), "w");
  check(write_from_f32(*x, random_floats(64 * 4, 2)), "x");
  auto stream = device->create_stream();
  check(stream.status(), "stream");
  check(stream.value()->compute(g), "compute");
  auto out = read_as_f32(*y);
  check(out.status(), "read");
  return std::move(out).value();
}

// One client runs into each quota again and again while another computes:
// the first gets errors naming the quota, the second the results it gets
// alone.
TEST(ClientQuotas, AClientOverItsQuotasLeavesAnotherClientsRunAsItIsAlone) {
  ServerOptions options;
  options.max_session_memory = 1 << 20;
  options.max_session_buffers = 32;
  auto server = serve(options);
  const std::string endpoint = "127.0.0.1:" + std::to_string(server->port());
  const std::vector<float> alone = a_clients_run(endpoint);

  std::atomic<bool> stop{false};
  std::atomic<int> memory_refusals{0}, buffer_refusals{0};
  std::thread greedy([&] {
    auto c = raw_client(server->port());
    while (!stop) {
      if (contains(alloc_status(*c, 2 << 20), "--client-memory")) ++memory_refusals;
      std::vector<uint64_t> handles;
      for (;;) {
        uint64_t h = 0;
        const Status s = alloc_status(*c, 16 << 10, 0, &h);
        if (!s.ok()) {
          if (contains(s, "--client-buffers 32")) ++buffer_refusals;
          break;
        }
        handles.push_back(h);
      }
      for (uint64_t h : handles) (void)c->free(h);
    }
  });
  for (int i = 0; i < 5 || (buffer_refusals == 0 && i < 500); ++i) {
    EXPECT_EQ(a_clients_run(endpoint), alone) << "run " << i;
  }
  stop = true;
  greedy.join();
  EXPECT_GT(buffer_refusals.load(), 0);
  EXPECT_GT(memory_refusals.load(), 0);
}

// ---- the flags of tensorpc-server ----------------------------------------------------------

TEST(ServerFlags, SessionLimitsAndTheIoTimeoutAreSetFromTheCommandLine) {
  auto server = tools::ServerProcess::start(
      TENSORPC_SERVER_BINARY,
      {"--device", "cpu:1", "--client-memory", "1MiB", "--max-session-buffers", "10", "--io-timeout", "0.3"},
      std::chrono::seconds(30));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  auto c = raw_client(server.value()->port());
  const Status big = alloc_status(*c, 2 << 20);
  EXPECT_EQ(big.code(), StatusCode::out_of_memory);
  EXPECT_TRUE(contains(big, "1048576")) << big.to_string();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(alloc_status(*c, 16).ok()) << i;
  const Status many = alloc_status(*c, 16);
  EXPECT_TRUE(contains(many, "--client-buffers 10")) << many.to_string();
  // A frame left unfinished ends the connection after 0.3 s.
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(c->start_set_tensor(1, 1024, 10).ok());
  EXPECT_TRUE(c->closed_by_server());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ServerFlags, ABadLimitIsRefusedAtStart) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--client-memory", "lots"}, {"--io-timeout", "-1"}, {"--client-buffers", "x"}, {"--client-graphs", "0"}}) {
    auto server = tools::ServerProcess::start(TENSORPC_SERVER_BINARY, args, std::chrono::seconds(30));
    ASSERT_FALSE(server.ok()) << args[0];
    EXPECT_TRUE(contains(server.status(), "exited with status 2")) << server.status().to_string();
  }
}

}  // namespace
}  // namespace tensorpc::test
