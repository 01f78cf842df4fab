// Many clients at once on one server: 32 clients, each on its own connection
// (so its own session), loop allocate → upload → compute → download → check →
// free on a server with two devices, for a set time; one more client keeps
// reaching past the session memory limit meanwhile. Every result must be
// right, no call may fail but the greedy client's refused allocations, and
// the server must hold nothing afterwards.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "rpc/transport/connection.h"
#include "core/log.h"
#include "rpc/wire_jobs.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/server.h"

namespace tensorpc::test {
namespace {

using rpc::Command;
using Clock = std::chrono::steady_clock;

constexpr int kClients = 32;
constexpr uint64_t kSessionLimit = 1 << 20;

struct ClientReport {
  int rounds = 0;
  std::string error;  // the first failure, empty when none
};

StatusOr<std::shared_ptr<rpc::Connection>> open(const std::string& endpoint) {
  auto parsed = parse_endpoint(endpoint);
  if (!parsed.ok()) return parsed.status();
  return rpc::Connection::open(parsed.value());
}

// One client's loop, each round on the next device; stops at the first failure.
void run_client(const std::string& endpoint, int id, Clock::time_point until, ClientReport& report) {
  auto opened = open(endpoint);
  if (!opened.ok()) {
    report.error = "client " + std::to_string(id) + ": " + opened.status().to_string();
    return;
  }
  rpc::Connection& c = *opened.value();
  const auto failed = [&](const std::string& what, const Status& s) {
    report.error = "client " + std::to_string(id) + ", round " + std::to_string(report.rounds) + ": " + what + ": " +
                   s.to_string();
  };
  do {
    const auto device = static_cast<uint32_t>((id + report.rounds) % 2);
    const SmallJob job(static_cast<uint32_t>(id * 100000 + report.rounds));
    rpc::BufferAllocReply alloc;
    Status s = c.call(Command::buffer_alloc, rpc::BufferAllocRequest{device, SmallJob::kBytes}, alloc);
    if (!s.ok()) return failed("allocate", s);
    const uint64_t h = alloc.handle;

    const std::vector<uint8_t> inputs = job.inputs();
    rpc::WireWriter set;
    rpc::encode(set, rpc::SetTensorRequest{h, SmallJob::kA, inputs.size()});
    s = c.send_one_way({.command = Command::set_tensor, .fields = set.bytes(), .bulk = inputs});
    if (!s.ok()) return failed("upload", s);
    s = c.send_graph(device, graph_bytes(job.graph(h)), {h});
    if (!s.ok()) return failed("compute", s);

    std::vector<uint8_t> got(SmallJob::kBytes - SmallJob::kS);
    rpc::WireWriter get;
    rpc::encode(get, rpc::GetTensorRequest{h, SmallJob::kS, got.size()});
    auto fields = c.call({.command = Command::get_tensor, .fields = get.bytes()}, got);
    if (!fields.ok()) return failed("download", fields.status());
    // The upload and the compute were one-way: their errors come here.
    s = c.call_status_only(Command::synchronize, {});
    if (!s.ok()) return failed("synchronize", s);
    if (got != job.expected()) return failed("check", internal_error("the result is wrong"));

    s = c.free_buffer(h);
    if (!s.ok()) return failed("free", s);
    report.rounds += 1;
  } while (Clock::now() < until);
  const Status s = c.call_status_only(Command::synchronize, {});
  if (!s.ok()) failed("the last synchronize", s);
}

// Allocates past the session limit over and over: each refusal must name the
// limit and leave the connection usable.
void run_greedy_client(const std::string& endpoint, Clock::time_point until, int& refusals, std::string& error) {
  auto opened = open(endpoint);
  if (!opened.ok()) {
    error = opened.status().to_string();
    return;
  }
  rpc::Connection& c = *opened.value();
  do {
    rpc::BufferAllocReply held;
    Status s = c.call(Command::buffer_alloc, rpc::BufferAllocRequest{0, kSessionLimit * 3 / 4}, held);
    if (!s.ok()) {
      error = "the first allocation, within the limit: " + s.to_string();
      return;
    }
    rpc::BufferAllocReply more;
    s = c.call(Command::buffer_alloc, rpc::BufferAllocRequest{1, kSessionLimit / 2}, more);
    if (s.ok() || s.code() != StatusCode::out_of_memory ||
        s.message().find(std::to_string(kSessionLimit)) == std::string::npos) {
      error = "the allocation past the limit: " + s.to_string();
      return;
    }
    refusals += 1;
    s = c.free_buffer(held.handle);
    if (s.ok()) s = c.call_status_only(Command::ping, {});
    if (!s.ok()) {
      error = "after a refusal: " + s.to_string();
      return;
    }
  } while (Clock::now() < until);
}

TEST(Load, ThirtyTwoClientsComputeRightOnTwoDevicesWhileOnePastItsLimitIsRefused) {
  log::set_level(log::Level::error);
  ServerOptions options;
  options.port = 0;
  options.max_session_memory = kSessionLimit;
  options.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1}),
                     std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu1", .threads = 1})};
  auto server = Server::start(options);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string endpoint = "127.0.0.1:" + std::to_string(server.value()->port());
  const ServerStats before = server.value()->stats();

  const auto duration = test_duration(2.0, 0.5);
  const auto start = Clock::now();
  const auto until = start + duration;
  std::vector<ClientReport> reports(kClients);
  int refusals = 0;
  std::string greedy_error;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] { run_client(endpoint, i, until, reports[i]); });
  }
  threads.emplace_back([&] { run_greedy_client(endpoint, until, refusals, greedy_error); });
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  int rounds = 0;
  for (const ClientReport& r : reports) {
    EXPECT_EQ(r.error, "");
    EXPECT_GE(r.rounds, 1);
    rounds += r.rounds;
  }
  EXPECT_EQ(greedy_error, "");
  EXPECT_GE(refusals, 1);
  std::printf("%d clients: %d rounds in %.2f s; the greedy client was refused %d times\n", kClients, rounds, seconds,
              refusals);

  EXPECT_TRUE(eventually(
      [&] {
        const ServerStats s = server.value()->stats();
        return s.sessions == before.sessions && s.live_buffers == before.live_buffers &&
               s.buffer_bytes == before.buffer_bytes;
      },
      std::chrono::seconds(10)));
  server.value()->stop();
}

}  // namespace
}  // namespace tensorpc::test
