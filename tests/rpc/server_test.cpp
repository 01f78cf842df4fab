// The server against docs/protocol.md, spoken to by a raw test client: the
// handshake, every command's happy path, hostile input of every kind (each
// answered by an error or a closed connection, after which the same server
// still serves a well-behaved client), session cleanup, and the weights cache.
#include "tensorpc/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "rpc/wire/graph_codec.h"
#include "core/log.h"
#include "rpc/rpc_test_util.h"
#include "rpc/server/weights_cache.h"
#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/graph_allocator.h"
#include "test_util.h"

namespace tensorpc::test {
namespace {

using rpc::Command;

std::unique_ptr<Server> start_server(ServerOptions options = {}) {
  options.port = 0;
  if (options.devices.empty() && options.threads == 0) options.threads = 1;
  auto s = Server::start(std::move(options));
  if (!s.ok()) throw std::runtime_error(s.status().to_string());
  return std::move(s).value();
}

ServerOptions with_cache_dir(const std::string& dir) {
  ServerOptions options;
  options.cache_dir = dir;
  return options;
}

// A temporary directory, removed with what it holds.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/tensorpc-server-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log::set_level(log::Level::error);
    server_ = start_server();
  }
  void TearDown() override { server_->stop(); }

  uint16_t port() const { return server_->port(); }
  ServerStats stats() const { return server_->stats(); }

  // A client past HELLO.
  std::unique_ptr<RawClient> client() {
    auto c = std::make_unique<RawClient>(port());
    Status s = c->hello();
    if (!s.ok()) throw std::runtime_error("HELLO failed: " + s.to_string());
    return c;
  }

  // What every hostile test ends with: a new, well-behaved client is served.
  void expect_serves_a_good_client() {
    auto c = client();
    const uint64_t h = c->alloc(256);
    ASSERT_NE(h, 0u);
    const auto bytes = random_bytes(100, 7);
    ASSERT_TRUE(c->set_tensor(h, 10, bytes).ok());
    auto got = c->get_tensor(h, 10, bytes.size());
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got.value(), bytes);
    EXPECT_TRUE(c->free(h).ok());
  }

  std::unique_ptr<Server> server_;
};

// ---- handshake ---------------------------------------------------------------------

TEST_F(ServerTest, HelloThenListDevicesDescribesTheDefaultCpuDevice) {
  RawClient c(port());
  rpc::WireWriter w;
  rpc::encode(w, rpc::HelloRequest{.client = "test"});
  auto hello = c.call(Command::hello, w);
  ASSERT_TRUE(hello.ok() && hello.value().status.ok());
  EXPECT_NE(hello.value().header.flags & rpc::kFlagReply, 0);
  rpc::HelloReply hr;
  rpc::WireReader hin = hello.value().fields();
  ASSERT_TRUE(rpc::decode(hin, hr).ok());
  EXPECT_EQ(hr.major, rpc::kVersionMajor);

  auto list = c.call(Command::list_devices);
  ASSERT_TRUE(list.ok() && list.value().status.ok());
  rpc::ListDevicesReply devices;
  rpc::WireReader in = list.value().fields();
  ASSERT_TRUE(rpc::decode(in, devices).ok());
  ASSERT_EQ(devices.devices.size(), 1u);
  EXPECT_EQ(devices.devices[0].name, "cpu0");
  EXPECT_EQ(devices.devices[0].kind, 0u);
  EXPECT_EQ(devices.devices[0].alignment, 64u);
  EXPECT_GT(devices.devices[0].total, 0u);
}

TEST_F(ServerTest, MajorVersionMismatchIsRefusedNamingBothVersionsThenClosed) {
  RawClient c(port());
  Status s = c.hello(rpc::kVersionMajor + 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("1." + std::to_string(rpc::kVersionMinor) + ".0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("2." + std::to_string(rpc::kVersionMinor) + ".0"), std::string::npos) << s.message();
  EXPECT_TRUE(c.closed_by_server());
  expect_serves_a_good_client();
}

TEST_F(ServerTest, CommandsBeforeHelloGetAProtocolErrorAndAClosedConnection) {
  RawClient c(port());
  Status s = c.ping();
  EXPECT_EQ(s.code(), StatusCode::protocol_error) << s.to_string();
  EXPECT_TRUE(c.closed_by_server());

  RawClient d(port());
  rpc::WireWriter w;
  rpc::encode(w, rpc::BufferAllocRequest{0, 64});
  EXPECT_EQ(d.call_status(Command::buffer_alloc, w).code(), StatusCode::protocol_error);
  EXPECT_TRUE(d.closed_by_server());
  expect_serves_a_good_client();
}

// ---- frames that break the stream ----------------------------------------------------

TEST_F(ServerTest, HeaderCutShortThenEofEndsOnlyThatConnection) {
  {
    RawClient c(port());
    const uint8_t part[10] = {0x54, 0x52, 0x50, 0x43};
    ASSERT_TRUE(c.send_bytes(part, sizeof part).ok());
    ::shutdown(c.socket().fd(), SHUT_WR);
    EXPECT_TRUE(c.closed_by_server());
  }
  expect_serves_a_good_client();
}

TEST_F(ServerTest, PayloadCutShortThenEofEndsOnlyThatConnection) {
  {
    auto c = client();
    const auto part = random_bytes(20, 1);
    ASSERT_TRUE(c->send_header(Command::ping, 100, 0, part.data(), part.size()).ok());
    ::shutdown(c->socket().fd(), SHUT_WR);
    EXPECT_TRUE(c->closed_by_server());
  }
  {
    RawClient c(port());  // the same before HELLO
    ASSERT_TRUE(c.send_header(Command::hello, 100, 0, "abc", 3).ok());
    ::shutdown(c.socket().fd(), SHUT_WR);
    EXPECT_TRUE(c.closed_by_server());
  }
  expect_serves_a_good_client();
}

TEST_F(ServerTest, SetTensorPayloadCutShortThenEofFreesTheSession) {
  {
    auto c = client();
    const uint64_t h = c->alloc(1 << 20);
    rpc::WireWriter w;
    rpc::encode(w, rpc::SetTensorRequest{h, 0, 1 << 20});
    w.raw(random_bytes(1000, 2).data(), 1000);
    ASSERT_TRUE(c->send_header(Command::set_tensor, 24 + (1 << 20), 0, w.bytes().data(), w.size()).ok());
    ::shutdown(c->socket().fd(), SHUT_WR);
    EXPECT_TRUE(c->closed_by_server());
  }
  EXPECT_TRUE(eventually([&] { return stats().live_buffers == 0; }));
  expect_serves_a_good_client();
}

TEST_F(ServerTest, AbsurdPayloadLengthClosesTheConnectionWithoutAllocating) {
  for (const Command cmd : {Command::ping, Command::graph_compute, Command::set_tensor, Command::hello}) {
    auto c = std::make_unique<RawClient>(port());
    if (cmd != Command::hello) {
      ASSERT_TRUE(c->hello().ok());
    }
    ASSERT_TRUE(c->send_header(cmd, uint64_t{1} << 62).ok());
    EXPECT_TRUE(c->closed_by_server()) << rpc::name_of(cmd);
  }
  // Just over the default limit of 1 GiB + 64 bytes.
  auto c = client();
  ASSERT_TRUE(c->send_header(Command::ping, (uint64_t{1} << 30) + 65).ok());
  EXPECT_TRUE(c->closed_by_server());
  expect_serves_a_good_client();
}

TEST_F(ServerTest, BadMagicOrAnUnknownCommandClosesTheConnection) {
  struct Header {
    uint32_t magic;
    uint16_t command;
  };
  for (const Header h : {Header{0xdeadbeef, 13}, Header{rpc::kFrameMagic, 999}}) {
    auto c = client();
    rpc::WireWriter w;
    w.u32(h.magic);
    w.u16(h.command);
    w.u16(0);
    w.u64(1);
    w.u64(0);
    ASSERT_TRUE(c->send_bytes(w.bytes().data(), w.size()).ok());
    EXPECT_TRUE(c->closed_by_server()) << h.magic << " " << h.command;
    expect_serves_a_good_client();
  }
}

TEST_F(ServerTest, MalformedFixedFieldsGetAnErrorAndTheConnectionGoesOn) {
  auto c = client();
  rpc::WireWriter w;
  w.u32(0);  // BUFFER_ALLOC wants u32 + u64
  EXPECT_EQ(c->call_status(Command::buffer_alloc, w).code(), StatusCode::protocol_error);
  rpc::WireWriter extra;
  extra.u8(1);
  EXPECT_FALSE(c->call_status(Command::ping, extra).ok());
  EXPECT_TRUE(c->ping().ok());
}

// ---- handles and ranges ---------------------------------------------------------------

TEST_F(ServerTest, ForgedHandleIsNotFound) {
  auto c = client();
  const uint64_t h = c->alloc(64);
  for (const uint64_t forged : {uint64_t{0}, h + 1, uint64_t{12345}, ~uint64_t{0}}) {
    auto got = c->get_tensor(forged, 0, 4);
    EXPECT_EQ(got.status().code(), StatusCode::not_found) << forged;
  }
  rpc::WireWriter w;
  rpc::encode(w, rpc::BufferClearRequest{h + 7, 0});
  EXPECT_EQ(c->call_status(Command::buffer_clear, w).code(), StatusCode::not_found);
  EXPECT_TRUE(c->ping().ok());
}

TEST_F(ServerTest, HandleOfAnotherConnectionIsNotFound) {
  auto a = client();
  auto b = client();
  const uint64_t h = a->alloc(64);
  ASSERT_NE(h, 0u);
  EXPECT_EQ(b->get_tensor(h, 0, 4).status().code(), StatusCode::not_found);
  EXPECT_EQ(b->free(h).code(), StatusCode::not_found);
  EXPECT_TRUE(a->get_tensor(h, 0, 4).ok());
}

TEST_F(ServerTest, FreedHandleIsNotFoundAndNeverReissued) {
  auto c = client();
  const uint64_t h = c->alloc(64);
  ASSERT_TRUE(c->free(h).ok());
  EXPECT_EQ(c->get_tensor(h, 0, 4).status().code(), StatusCode::not_found);
  EXPECT_EQ(c->set_tensor(h, 0, {1, 2, 3}).code(), StatusCode::not_found);
  EXPECT_EQ(c->free(h).code(), StatusCode::not_found);
  const uint64_t h2 = c->alloc(64);
  EXPECT_NE(h2, h);
  EXPECT_NE(h2, 0u);
}

TEST_F(ServerTest, RangesOutsideTheBufferAreRefusedIncludingU64Overflow) {
  auto c = client();
  const uint64_t h = c->alloc(64);
  const uint64_t huge = ~uint64_t{0} - 7;  // 2^64 - 8
  struct Range {
    uint64_t offset, size;
  };
  for (const Range r : {Range{0, 65}, Range{64, 1}, Range{65, 0}, Range{huge, 16}, Range{8, huge}}) {
    EXPECT_EQ(c->get_tensor(h, r.offset, r.size).status().code(), StatusCode::invalid_argument)
        << r.offset << " +" << r.size;
    rpc::WireWriter copy;
    rpc::encode(copy, rpc::CopyTensorRequest{h, r.offset, h, 0, r.size});
    EXPECT_EQ(c->call_status(Command::copy_tensor, copy).code(), StatusCode::invalid_argument);
    EXPECT_EQ(c->set_tensor_hash(h, r.offset, r.size, {}), -1);
  }
  EXPECT_TRUE(c->get_tensor(h, 64, 0).ok());  // an empty range at the end is inside
  // A SET_TENSOR whose range overflows: refused, its 16 bytes drained, the stream in sync.
  rpc::WireWriter w;
  rpc::encode(w, rpc::SetTensorRequest{h, huge, 16});
  w.raw(random_bytes(16, 3).data(), 16);
  ASSERT_TRUE(c->send_frame(Command::set_tensor, w).ok());
  auto reply = c->read_reply();
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply.value().status.code(), StatusCode::invalid_argument);
  EXPECT_TRUE(c->ping().ok());
}

TEST_F(ServerTest, SetTensorWhoseSizeDisagreesWithItsPayloadIsRefusedAndDrained) {
  auto c = client();
  const uint64_t h = c->alloc(64);
  rpc::WireWriter w;
  rpc::encode(w, rpc::SetTensorRequest{h, 0, 8});
  w.raw(random_bytes(32, 4).data(), 32);
  ASSERT_TRUE(c->send_frame(Command::set_tensor, w).ok());
  auto reply = c->read_reply();
  ASSERT_TRUE(reply.ok());
  EXPECT_FALSE(reply.value().status.ok());
  EXPECT_TRUE(c->ping().ok());
}

TEST_F(ServerTest, AllocationsBeyondTheDeviceAndBadDeviceIndicesAreRefused) {
  auto c = client();
  EXPECT_EQ(c->alloc(~uint64_t{0}), 0u);
  EXPECT_EQ(c->alloc(64, 1), 0u);
  rpc::WireWriter w;
  rpc::encode(w, rpc::DeviceMemoryRequest{5});
  EXPECT_EQ(c->call_status(Command::device_memory, w).code(), StatusCode::invalid_argument);
  EXPECT_TRUE(c->ping().ok());
}

// ---- bytes in and out -------------------------------------------------------------------

TEST_F(ServerTest, SetTensorThenGetTensorRoundTripsBytes) {
  auto c = client();
  const uint64_t size = 20u << 20;  // several receive chunks
  const uint64_t h = c->alloc(size + 4096);
  const auto bytes = random_bytes(size, 5);
  ASSERT_TRUE(c->set_tensor(h, 4096, bytes).ok());
  auto got = c->get_tensor(h, 4096, size);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got.value() == bytes);
  EXPECT_EQ(stats().live_buffers, 1u);
  EXPECT_EQ(stats().buffer_bytes, size + 4096);
}

TEST_F(ServerTest, ClearAndCopyWorkOnTheServer) {
  auto c = client();
  const uint64_t a = c->alloc(64);
  const uint64_t b = c->alloc(64);
  rpc::WireWriter clear;
  rpc::encode(clear, rpc::BufferClearRequest{b, 0xab});
  ASSERT_TRUE(c->call_status(Command::buffer_clear, clear).ok());
  const auto bytes = random_bytes(16, 6);
  ASSERT_TRUE(c->set_tensor(a, 0, bytes).ok());
  rpc::WireWriter copy;
  rpc::encode(copy, rpc::CopyTensorRequest{a, 0, b, 8, 16});
  ASSERT_TRUE(c->call_status(Command::copy_tensor, copy).ok());
  auto got = c->get_tensor(b, 0, 32);
  ASSERT_TRUE(got.ok());
  std::vector<uint8_t> want(32, 0xab);
  for (size_t i = 0; i < bytes.size(); ++i) want[8 + i] = bytes[i];
  EXPECT_EQ(got.value(), want);
}

TEST_F(ServerTest, NoReplyErrorSurfacesAtTheNextSynchronizeOnce) {
  auto c = client();
  ASSERT_TRUE(c->set_tensor(777, 0, {1, 2, 3, 4}, rpc::kFlagNoReply).ok());
  const uint64_t h = c->alloc(64);  // served in order after the failed one
  ASSERT_NE(h, 0u);
  ASSERT_TRUE(c->set_tensor(h, 0, {1, 2, 3, 4}, rpc::kFlagNoReply).ok());
  Status s = c->synchronize();
  EXPECT_EQ(s.code(), StatusCode::not_found) << s.to_string();
  EXPECT_NE(s.message().find("SET_TENSOR"), std::string::npos) << s.message();
  EXPECT_TRUE(c->synchronize().ok());
  auto got = c->get_tensor(h, 0, 4);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value(), (std::vector<uint8_t>{1, 2, 3, 4}));
}

// ---- graphs -----------------------------------------------------------------------------

// x (leaf, 16 f32 at 0) and y = x + x (at 64), in a buffer of 128 bytes.
std::vector<WireTensor> add_graph(uint64_t h) {
  WireTensor x = WireTensor::f32(16, h, 0);
  WireTensor y = WireTensor::f32(16, h, 64);
  y.op = static_cast<uint32_t>(Op::add);
  y.src = {0, 0, -1};
  y.flags = kFlagOutput;
  return {x, y};
}

TEST_F(ServerTest, AHandBuiltGraphComputes) {
  auto c = client();
  const uint64_t h = c->alloc(128);
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i);
  std::vector<uint8_t> bytes(64);
  std::memcpy(bytes.data(), x.data(), 64);
  ASSERT_TRUE(c->set_tensor(h, 0, bytes).ok());
  Status s = c->call_status(Command::graph_compute, graph_frame(add_graph(h)));
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto got = c->get_tensor(h, 64, 64);
  ASSERT_TRUE(got.ok());
  std::vector<float> y(16);
  std::memcpy(y.data(), got.value().data(), 64);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], 2.0f * static_cast<float>(i));
}

TEST_F(ServerTest, AfterAFailedOneWayCommandOneWayComputationsWaitAndASyncFlaggedReadReportsIt) {
  auto c = client();
  const uint64_t h = c->alloc(128);
  std::vector<uint8_t> bytes(128, 0);
  for (int i = 0; i < 16; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  }
  ASSERT_TRUE(c->set_tensor(h, 0, bytes).ok());  // x = 0..15, y = 0
  ASSERT_TRUE(c->set_tensor(777, 0, {1, 2, 3, 4}, rpc::kFlagNoReply).ok());  // fails: no such handle
  // A one-way computation after it does not run: its inputs may be what failed.
  ASSERT_TRUE(c->send_frame(Command::graph_compute, graph_frame(add_graph(h)), rpc::kFlagNoReply).ok());
  // SYNC: the pending error instead of the bytes.
  auto flagged = c->get_tensor(h, 64, 64, rpc::kFlagSync);
  ASSERT_FALSE(flagged.ok());
  EXPECT_EQ(flagged.status().code(), StatusCode::not_found) << flagged.status().to_string();
  EXPECT_NE(flagged.status().message().find("SET_TENSOR"), std::string::npos);
  auto y = c->get_tensor(h, 64, 64, rpc::kFlagSync);  // the error was reported once
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  EXPECT_EQ(y.value(), std::vector<uint8_t>(64, 0)) << "the skipped computation wrote nothing";
  // With the error reported, computations run again.
  ASSERT_TRUE(c->send_frame(Command::graph_compute, graph_frame(add_graph(h)), rpc::kFlagNoReply).ok());
  y = c->get_tensor(h, 64, 64, rpc::kFlagSync);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  float y5;
  std::memcpy(&y5, y.value().data() + 20, 4);
  EXPECT_EQ(y5, 10.0f);
}

TEST_F(ServerTest, HostileGraphsAreRefusedAndTheConnectionGoesOn) {
  auto c = client();
  const uint64_t h = c->alloc(128);
  struct Case {
    const char* what;
    std::function<void(std::vector<WireTensor>&)> mutate;
  };
  const std::vector<Case> cases = {
      {"shape that overflows",
       [](auto& g) {
         g[1].ne = {16, int64_t{1} << 62, 4, 1};
       }},
      {"negative dim", [](auto& g) { g[0].ne[1] = -1; }},
      {"stride that overflows", [](auto& g) { g[1].ne[1] = 2, g[1].nb[1] = uint64_t{1} << 63; }},
      {"stride past the buffer", [](auto& g) { g[1].ne[1] = 2, g[1].nb[1] = 4096; }},
      {"offset that overflows", [](auto& g) { g[1].offset = ~uint64_t{0} - 3; }},
      {"unknown op", [](auto& g) { g[1].op = 999; }},
      {"unknown type", [](auto& g) { g[0].type = 77; }},
      {"source that is itself (a cycle)", [](auto& g) { g[1].src[0] = 1; }},
      {"source that comes later (a cycle)", [](auto& g) { g[0].op = 13, g[0].src[0] = 1; }},
      {"source pointing nowhere", [](auto& g) { g[1].src[1] = 7; }},
      {"negative source", [](auto& g) { g[1].src[0] = -5; }},
      {"forged handle", [](auto& g) { g[1].handle = 4242; }},
      {"shapes the op refuses",
       [&](auto& g) {
         g.push_back(g[1]), g[2].src = {0, 1, -1}, g[2].ne[0] = 8;
       }},
  };
  for (const Case& k : cases) {
    auto g = add_graph(h);
    k.mutate(g);
    Status s = c->call_status(Command::graph_compute, graph_frame(g));
    EXPECT_FALSE(s.ok()) << k.what;
    if (std::getenv("TENSORPC_TEST_VERBOSE")) std::printf("%s: %s\n", k.what, s.to_string().c_str());
    EXPECT_TRUE(c->ping().ok()) << k.what;
  }
  // Counts that lie: more tensors than the limit, and more than are sent.
  EXPECT_FALSE(c->call_status(Command::graph_compute, graph_frame({}, 0, 1, 65537)).ok());
  EXPECT_FALSE(c->call_status(Command::graph_compute, graph_frame(add_graph(h), 0, 1, 3)).ok());
  // A graph of too many tensors, each valid.
  std::vector<WireTensor> many(rpc::kMaxGraphTensors + 1, WireTensor::f32(16, h, 0));
  EXPECT_FALSE(c->call_status(Command::graph_compute, graph_frame(many)).ok());
  // Device index out of range.
  EXPECT_FALSE(c->call_status(Command::graph_compute, graph_frame(add_graph(h), 3)).ok());
  EXPECT_TRUE(c->ping().ok());
  expect_serves_a_good_client();
}

TEST(ServerDevices, AGraphOnOneDeviceCannotUseABufferOfAnother) {
  log::set_level(log::Level::error);
  ServerOptions options;
  options.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "a", .threads = 1}),
                     std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "b", .threads = 1})};
  auto server = start_server(options);
  RawClient c(server->port());
  ASSERT_TRUE(c.hello().ok());
  const uint64_t h = c.alloc(128, 0);
  EXPECT_TRUE(c.call_status(Command::graph_compute, graph_frame(add_graph(h), 0)).ok());
  Status s = c.call_status(Command::graph_compute, graph_frame(add_graph(h), 1));
  EXPECT_FALSE(s.ok());
  server->stop();
}

TEST_F(ServerTest, RecomputeRerunsAStoredGraphUntilItsBufferIsFreed) {
  auto c = client();
  const uint64_t h = c->alloc(128);
  std::vector<uint8_t> ones(64);
  const float one = 1.0f;
  for (int i = 0; i < 16; ++i) std::memcpy(ones.data() + 4 * i, &one, 4);
  ASSERT_TRUE(c->set_tensor(h, 0, ones).ok());
  ASSERT_TRUE(c->call_status(Command::graph_compute, graph_frame(add_graph(h), 0, 42)).ok());

  const float three = 3.0f;
  std::vector<uint8_t> threes(64);
  for (int i = 0; i < 16; ++i) std::memcpy(threes.data() + 4 * i, &three, 4);
  ASSERT_TRUE(c->set_tensor(h, 0, threes).ok());
  rpc::WireWriter re;
  rpc::encode(re, rpc::GraphRecomputeRequest{0, 42});
  ASSERT_TRUE(c->call_status(Command::graph_recompute, re).ok());
  auto got = c->get_tensor(h, 64, 4);
  ASSERT_TRUE(got.ok());
  float y;
  std::memcpy(&y, got.value().data(), 4);
  EXPECT_EQ(y, 6.0f);

  rpc::WireWriter unknown;
  rpc::encode(unknown, rpc::GraphRecomputeRequest{0, 43});
  EXPECT_EQ(c->call_status(Command::graph_recompute, unknown).code(), StatusCode::not_found);
  ASSERT_TRUE(c->free(h).ok());
  EXPECT_EQ(c->call_status(Command::graph_recompute, re).code(), StatusCode::not_found);
}

TEST_F(ServerTest, AGraphComputedRemotelyEqualsTheSameGraphOnALocalCpuDeviceBitForBit) {
  CpuDevice local(CpuDeviceOptions{.threads = 1});
  Context ctx;
  Tensor* w = ctx.new_tensor(DType::f32, {64, 32}, "w");
  w->flags |= kFlagWeight;
  Tensor* x = input(ctx, DType::f32, {64, 8}, "x");
  Tensor* y = ctx.mul_mat(w, x);  // [32, 8]
  Tensor* n = ctx.rms_norm(y, 1e-5f);
  Tensor* s = ctx.silu(ctx.add(n, y));
  Tensor* out = ctx.cont(ctx.transpose(s));  // [8, 32]
  Graph g = Graph::build({out});
  GraphAllocator alloc(local);
  ASSERT_TRUE(alloc.allocate(g).ok());
  ASSERT_TRUE(write_from_f32(*w, random_floats(64 * 32, 11)).ok());
  ASSERT_TRUE(write_from_f32(*x, random_floats(64 * 8, 12)).ok());
  Buffer* buf = alloc.buffer();
  const auto* base = static_cast<const uint8_t*>(buf->host_base());
  const std::vector<uint8_t> before(base, base + buf->size());

  auto c = client();
  const uint64_t h = c->alloc(buf->size());
  ASSERT_TRUE(c->set_tensor(h, 0, before).ok());
  rpc::WireWriter frame;
  rpc::encode(frame, rpc::GraphComputeRequest{0, 1});
  ASSERT_TRUE(rpc::encode_graph(frame, g, [&](const Buffer* b) { return b == buf ? h : 0; }).ok());
  Status st = c->call_status(Command::graph_compute, frame);
  ASSERT_TRUE(st.ok()) << st.to_string();

  auto stream = local.create_stream();
  ASSERT_TRUE(stream.value()->compute(g).ok());
  const std::vector<uint8_t> want(base + out->offset, base + out->offset + out->nbytes());
  auto got = c->get_tensor(h, out->offset, out->nbytes());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got.value() == want) << "remote result differs from the local one";
}

// ---- session cleanup ----------------------------------------------------------------------

TEST_F(ServerTest, LiveBuffersReturnToZeroAfterTheClientDisconnects) {
  {
    auto c = client();
    for (int i = 0; i < 3; ++i) ASSERT_NE(c->alloc(1000), 0u);
    EXPECT_EQ(stats().live_buffers, 3u);
    EXPECT_EQ(stats().buffer_bytes, 3000u);
    EXPECT_EQ(stats().sessions, 1u);
  }
  EXPECT_TRUE(eventually([&] { return stats().live_buffers == 0 && stats().sessions == 0; }));
  EXPECT_EQ(stats().buffer_bytes, 0u);
}

// The child process speaks the protocol with bare system calls on frames
// prepared before fork(): after fork in a threaded process only those are safe.
TEST_F(ServerTest, LiveBuffersReturnToZeroAfterAClientIsKilledMidUpload) {
  constexpr uint64_t kSize = 64u << 20;
  rpc::WireWriter hello;
  rpc::encode(hello, rpc::HelloRequest{.client = "doomed"});
  rpc::WireWriter alloc;
  rpc::encode(alloc, rpc::BufferAllocRequest{0, kSize});
  auto frame = [](Command c, const rpc::WireWriter& p, uint64_t length) {
    std::vector<uint8_t> f(rpc::kFrameHeaderSize);
    rpc::encode_header({rpc::kFrameMagic, c, 0, 1, length}, f.data());
    f.insert(f.end(), p.bytes().begin(), p.bytes().end());
    return f;
  };
  const auto hello_frame = frame(Command::hello, hello, hello.size());
  const auto alloc_frame = frame(Command::buffer_alloc, alloc, alloc.size());
  rpc::WireWriter set;
  rpc::encode(set, rpc::SetTensorRequest{0, 0, kSize});  // handle patched in by the child
  auto set_frame = frame(Command::set_tensor, set, 24 + kSize);
  const auto part = random_bytes(1 << 20, 9);
  const uint16_t port = this->port();

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto rpc_call = [](int fd, const std::vector<uint8_t>& f, uint8_t* reply, size_t n) {
      if (::send(fd, f.data(), f.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(f.size())) ::_exit(1);
      for (size_t got = 0; got < n;) {
        const ssize_t r = ::recv(fd, reply + got, n - got, 0);
        if (r <= 0) ::_exit(1);
        got += static_cast<size_t>(r);
      }
    };
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(1);
    uint8_t reply[256];
    // HELLO reply: a header, then a payload whose length the header gives.
    rpc_call(fd, hello_frame, reply, 24);
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(reply[16 + i]) << (8 * i);
    if (len > sizeof reply) ::_exit(1);
    for (size_t got = 0; got < len;) {
      const ssize_t r = ::recv(fd, reply + got, len - got, 0);
      if (r <= 0) ::_exit(1);
      got += static_cast<size_t>(r);
    }
    // BUFFER_ALLOC reply: header, status (u32 0, u32 0), u64 handle.
    rpc_call(fd, alloc_frame, reply, 24 + 8 + 8);
    for (int i = 0; i < 8; ++i) set_frame[24 + i] = reply[32 + i];
    ::send(fd, set_frame.data(), set_frame.size(), MSG_NOSIGNAL);
    ::send(fd, part.data(), part.size(), MSG_NOSIGNAL);
    const char go = 1;
    if (::write(ready[1], &go, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char go = 0;
  ASSERT_EQ(::read(ready[0], &go, 1), 1) << "the child failed before its upload";
  ::close(ready[0]);
  EXPECT_TRUE(eventually([&] { return stats().live_buffers == 1; }));
  EXPECT_EQ(stats().buffer_bytes, kSize);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(eventually([&] { return stats().live_buffers == 0 && stats().sessions == 0; }));
  expect_serves_a_good_client();
}

// ---- weights cache --------------------------------------------------------------------------

TEST_F(ServerTest, WeightsCacheMissThenUploadThenAnotherSessionHits) {
  const auto bytes = random_bytes(10000, 21);
  const rpc::Sha256 digest = rpc::sha256(bytes.data(), bytes.size());
  {
    auto a = client();
    const uint64_t h = a->alloc(bytes.size());
    EXPECT_EQ(a->set_tensor_hash(h, 0, bytes.size(), digest), 0);
    ASSERT_TRUE(a->set_tensor(h, 0, bytes, rpc::kFlagCache).ok());
    EXPECT_EQ(stats().cache_entries, 1u);
  }
  auto b = client();
  const uint64_t h = b->alloc(bytes.size() + 64);
  EXPECT_EQ(b->set_tensor_hash(h, 64, bytes.size(), digest), 1);
  auto got = b->get_tensor(h, 64, bytes.size());
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got.value() == bytes);
  EXPECT_EQ(stats().cache_hits, 1u);
  // Bytes sent without the CACHE flag are not cached.
  const auto other = random_bytes(100, 22);
  ASSERT_TRUE(b->set_tensor(h, 0, other).ok());
  EXPECT_EQ(b->set_tensor_hash(h, 0, other.size(), rpc::sha256(other.data(), other.size())), 0);
}

TEST(ServerCache, ARestartedServerHitsFromDisk) {
  log::set_level(log::Level::error);
  TempDir dir;
  const auto bytes = random_bytes(5000, 31);
  const rpc::Sha256 digest = rpc::sha256(bytes.data(), bytes.size());
  {
    auto server = start_server(with_cache_dir(dir.path));
    RawClient c(server->port());
    ASSERT_TRUE(c.hello().ok());
    const uint64_t h = c.alloc(bytes.size());
    ASSERT_TRUE(c.set_tensor(h, 0, bytes, rpc::kFlagCache).ok());
    server->stop();
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path + "/" + rpc::to_hex(digest)));
  auto server = start_server(with_cache_dir(dir.path));
  EXPECT_EQ(server->stats().cache_entries, 1u);
  RawClient c(server->port());
  ASSERT_TRUE(c.hello().ok());
  const uint64_t h = c.alloc(bytes.size());
  EXPECT_EQ(c.set_tensor_hash(h, 0, bytes.size(), digest), 1);
  auto got = c.get_tensor(h, 0, bytes.size());
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got.value() == bytes);
  server->stop();
}

TEST(ServerCache, ACorruptedCacheFileIsDetectedRemovedAndNotUsed) {
  log::set_level(log::Level::error);
  TempDir dir;
  const auto bytes = random_bytes(5000, 41);
  const rpc::Sha256 digest = rpc::sha256(bytes.data(), bytes.size());
  const std::string file = dir.path + "/" + rpc::to_hex(digest);
  {
    auto server = start_server(with_cache_dir(dir.path));
    RawClient c(server->port());
    ASSERT_TRUE(c.hello().ok());
    const uint64_t h = c.alloc(bytes.size());
    ASSERT_TRUE(c.set_tensor(h, 0, bytes, rpc::kFlagCache).ok());
    server->stop();
  }
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(100);
    f.put(static_cast<char>(bytes[100] ^ 0xff));
  }
  auto server = start_server(with_cache_dir(dir.path));
  RawClient c(server->port());
  ASSERT_TRUE(c.hello().ok());
  const uint64_t h = c.alloc(bytes.size());
  rpc::WireWriter clear;
  rpc::encode(clear, rpc::BufferClearRequest{h, 0});
  ASSERT_TRUE(c.call_status(Command::buffer_clear, clear).ok());
  EXPECT_EQ(c.set_tensor_hash(h, 0, bytes.size(), digest), 0);
  EXPECT_FALSE(std::filesystem::exists(file));
  auto got = c.get_tensor(h, 0, bytes.size());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value(), std::vector<uint8_t>(bytes.size(), 0));  // nothing was written
  EXPECT_EQ(server->stats().cache_hits, 0u);
  server->stop();
}

TEST(ServerLifecycle, StopIsIdempotentAndEndsLiveSessions) {
  log::set_level(log::Level::error);
  auto server = start_server();
  RawClient c(server->port());
  ASSERT_TRUE(c.hello().ok());
  ASSERT_NE(c.alloc(64), 0u);
  std::thread waiter([&] { server->wait(); });
  server->stop();
  waiter.join();
  server->stop();
  EXPECT_EQ(server->stats().live_buffers, 0u);
  EXPECT_EQ(server->stats().sessions, 0u);
  EXPECT_TRUE(c.closed_by_server());
}

}  // namespace
}  // namespace tensorpc::test
