// The client's connection layer without a real server: endpoint parsing, a
// server that is not there, and a scripted fake server that breaks the
// protocol in the ways a real peer might (another major version, a reply to
// the wrong request, an error status, a hang-up mid-call). None of them may
// crash the process; each must be an error naming the command and endpoint.
#include <sys/socket.h>

#include <atomic>
#include <thread>

#include "remote_test_util.h"
#include "rpc/transport/connection.h"
#include "rpc/wire/messages.h"

namespace tensorpc::test {
namespace {

using rpc::Command;
using rpc::FrameHeader;
using rpc::Socket;

// ---- endpoints ------------------------------------------------------------

TEST(ClientEndpoint, ParsesHostAndPort) {
  auto e = parse_endpoint("127.0.0.1:50052");
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e.value().host, "127.0.0.1");
  EXPECT_EQ(e.value().port, 50052);
  EXPECT_EQ(e.value().to_string(), "127.0.0.1:50052");

  auto named = parse_endpoint("gpu-box.local:1");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named.value().host, "gpu-box.local");
  EXPECT_EQ(named.value().port, 1);
}

TEST(ClientEndpoint, ParsesBracketedIpv6) {
  auto e = parse_endpoint("[::1]:8080");
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e.value().host, "::1");
  EXPECT_EQ(e.value().port, 8080);
  EXPECT_EQ(e.value().to_string(), "[::1]:8080");
}

TEST(ClientEndpoint, RejectsMalformedTextNamingIt) {
  for (const char* text : {"", "localhost", "localhost:", ":50052", "host:0", "host:65536", "host:12ab", "host:-1",
                           "::1:50052", "[::1]", "[::1]50052", "[::1:50052", "[]:1"}) {
    auto e = parse_endpoint(text);
    ASSERT_FALSE(e.ok()) << "'" << text << "' parsed";
    EXPECT_EQ(e.status().code(), StatusCode::invalid_argument);
    const std::string quoted = std::string(1, '\'').append(text).append(1, '\'');
    EXPECT_NE(e.status().message().find(quoted), std::string::npos) << e.status().message();
  }
}

// ---- a server that is not there --------------------------------------------

TEST(ClientConnection, MissingServerIsAnErrorNamingTheEndpoint) {
  const RefusingPort nobody;
  const std::string endpoint = nobody.endpoint();
  auto devices = connect_devices(endpoint);
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), StatusCode::io_error);
  EXPECT_NE(devices.status().message().find(endpoint), std::string::npos) << devices.status().message();
  EXPECT_FALSE(ping(endpoint).ok());
  EXPECT_FALSE(connection_stats(endpoint).live);
}

TEST(ClientConnection, BadEndpointIsAnInvalidArgument) {
  auto devices = connect_devices("no-port-here");
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), StatusCode::invalid_argument);
}

TEST(ClientConnection, RemoteDeviceOfMissingServerReturnsTheDocumentedValues) {
  const RefusingPort nobody;
  const std::string endpoint = nobody.endpoint();
  auto device = remote_device(endpoint, 3);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->name(), endpoint + "/device3");
  EXPECT_EQ(device->kind(), DeviceKind::remote);
  EXPECT_EQ(device->description().rfind("unreachable: ", 0), 0u) << device->description();
  const auto memory = device->memory();
  ASSERT_FALSE(memory.ok()) << "a server that does not answer has no free memory to report";
  EXPECT_NE(memory.status().message().find(endpoint), std::string::npos) << memory.status().message();
  EXPECT_GT(device->alignment(), 0u);
  EXPECT_EQ(device->max_allocation(), 0u);

  auto buffer = device->allocate(1024);
  ASSERT_FALSE(buffer.ok());
  EXPECT_NE(buffer.status().message().find(endpoint), std::string::npos) << buffer.status().message();
  auto stream = device->create_stream();
  ASSERT_FALSE(stream.ok());
  EXPECT_NE(stream.status().message().find(endpoint), std::string::npos) << stream.status().message();
}

// ---- a scripted fake server --------------------------------------------------

// Accepts one connection and hands every request frame to `handle`, which
// answers through reply() or not at all; returning false hangs up.
class FakeServer {
 public:
  using Handler = std::function<bool(FakeServer&, const FrameHeader&, const std::vector<uint8_t>& payload)>;

  explicit FakeServer(Handler handle) : handle_(std::move(handle)) {
    auto listener = Socket::listen("127.0.0.1", 0);
    if (!listener.ok()) throw std::runtime_error(listener.status().to_string());
    listener_ = std::move(listener).value();
    endpoint_ = "127.0.0.1:" + std::to_string(listener_.local_port());
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    listener_.shutdown();
    if (const int fd = peer_fd_.load(); fd >= 0) ::shutdown(fd, SHUT_RDWR);
    thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }

  // A reply frame: status, then `fields`.
  void reply(const FrameHeader& request, const Status& status, const std::vector<uint8_t>& fields = {},
             uint64_t request_id_override = 0) {
    rpc::WireWriter w;
    rpc::encode_status(w, status);
    w.raw(fields.data(), fields.size());
    FrameHeader h;
    h.command = request.command;
    h.flags = rpc::kFlagReply;
    h.request_id = request_id_override ? request_id_override : request.request_id;
    h.payload_length = w.size();
    uint8_t header[rpc::kFrameHeaderSize];
    rpc::encode_header(h, header);
    (void)peer_.send_all(header, sizeof header);
    (void)peer_.send_all(w.bytes().data(), w.size());
  }
  void reply_hello(const FrameHeader& request, uint32_t major, uint32_t minor = rpc::kVersionMinor) {
    rpc::WireWriter w;
    rpc::HelloReply hello;
    hello.major = major;
    hello.minor = minor;
    hello.server = "fake";
    rpc::encode(w, hello);
    reply(request, Status(), w.bytes());
  }

 private:
  // One connection at a time, until the listener is shut down.
  void serve() {
    for (;;) {
      auto peer = listener_.accept();
      if (!peer.ok()) return;
      peer_ = std::move(peer).value();
      peer_fd_ = peer_.fd();
      serve_peer();
      peer_fd_ = -1;
      peer_.close();
    }
  }
  void serve_peer() {
    for (;;) {
      uint8_t header[rpc::kFrameHeaderSize];
      if (!peer_.recv_all(header, sizeof header).ok()) break;
      auto h = rpc::decode_header(std::span<const uint8_t, rpc::kFrameHeaderSize>(header, sizeof header));
      if (!h.ok()) break;
      std::vector<uint8_t> payload(h.value().payload_length);
      if (!peer_.recv_all(payload.data(), payload.size()).ok()) break;
      if (!handle_(*this, h.value(), payload)) break;
    }
  }

  Handler handle_;
  Socket listener_;
  Socket peer_;  // used by the serving thread only
  std::atomic<int> peer_fd_{-1};
  std::string endpoint_;
  std::thread thread_;
};

// Answers HELLO as version 1, then `rest` for every other request.
FakeServer::Handler hello_then(std::function<bool(FakeServer&, const FrameHeader&)> rest) {
  return [rest](FakeServer& s, const FrameHeader& h, const std::vector<uint8_t>&) {
    if (h.command == Command::hello) {
      s.reply_hello(h, rpc::kVersionMajor);
      return true;
    }
    return rest(s, h);
  };
}

TEST(ClientConnection, RefusesAServerOfAnotherMajorVersionNamingBoth) {
  FakeServer fake([](FakeServer& s, const FrameHeader& h, const std::vector<uint8_t>&) {
    s.reply_hello(h, 2);
    return true;
  });
  auto connection = rpc::get_connection(fake.endpoint());
  ASSERT_FALSE(connection.ok());
  EXPECT_EQ(connection.status().code(), StatusCode::protocol_error);
  const std::string m = connection.status().message();
  EXPECT_NE(m.find("HELLO to " + fake.endpoint()), std::string::npos) << m;
  EXPECT_NE(m.find("server speaks 2." + std::to_string(rpc::kVersionMinor) + ".0, this client 1." +
                   std::to_string(rpc::kVersionMinor) + ".0"),
            std::string::npos)
      << m;
}

TEST(ClientConnection, ServerErrorNamesCommandAndEndpointAndKeepsTheConnection) {
  FakeServer fake(hello_then([](FakeServer& s, const FrameHeader& h) {
    if (h.command == Command::buffer_alloc) s.reply(h, out_of_memory("device 0 has 12 bytes free"));
    if (h.command == Command::ping) s.reply(h, Status());
    return true;
  }));
  auto device = remote_device(fake.endpoint(), 0);
  auto buffer = device->allocate(1 << 20);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), StatusCode::out_of_memory);
  EXPECT_EQ(buffer.status().message(), "BUFFER_ALLOC to " + fake.endpoint() + ": device 0 has 12 bytes free");

  // An error reply is a well-formed exchange: the connection stays usable.
  auto connection = rpc::get_connection(fake.endpoint());
  ASSERT_TRUE(connection.ok());
  EXPECT_TRUE(connection.value()->call_status_only(Command::ping, {}).ok());
  EXPECT_FALSE(connection.value()->broken());
}

TEST(ClientConnection, ReplyToAnotherRequestBreaksTheConnectionNotTheProcess) {
  FakeServer fake(hello_then([](FakeServer& s, const FrameHeader& h) {
    s.reply(h, Status(), {}, h.request_id + 7);
    return true;
  }));
  auto connection = rpc::get_connection(fake.endpoint());
  ASSERT_TRUE(connection.ok()) << connection.status().to_string();
  const Status s = connection.value()->call_status_only(Command::ping, {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::protocol_error);
  EXPECT_EQ(s.message().rfind("PING to " + fake.endpoint() + ": ", 0), 0u) << s.message();
  // Broken: later requests fail at once, and the cache no longer hands it out.
  EXPECT_TRUE(connection.value()->broken());
  EXPECT_FALSE(connection.value()->call_status_only(Command::ping, {}).ok());
  EXPECT_EQ(rpc::find_live_connection(fake.endpoint()), nullptr);
}

TEST(ClientConnection, HangUpMidCallIsAnErrorNamingCommandAndEndpoint) {
  FakeServer fake(hello_then([](FakeServer&, const FrameHeader&) { return false; }));
  auto connection = rpc::get_connection(fake.endpoint());
  ASSERT_TRUE(connection.ok()) << connection.status().to_string();
  const Status s = connection.value()->call_status_only(Command::ping, {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "PING to " + fake.endpoint() + ": connection closed by peer");
}

TEST(ClientConnection, OneWayRequestToAPeerThatHungUpFails) {
  FakeServer fake(hello_then([](FakeServer&, const FrameHeader&) { return false; }));
  auto connection = rpc::get_connection(fake.endpoint());
  ASSERT_TRUE(connection.ok()) << connection.status().to_string();
  // The first one-way request makes the fake hang up; a later one must notice.
  rpc::WireWriter none;
  (void)connection.value()->send_one_way({.command = Command::synchronize, .fields = none.bytes()});
  EXPECT_TRUE(eventually([&] {
    return !connection.value()->send_one_way({.command = Command::synchronize, .fields = none.bytes()}).ok();
  }));
  EXPECT_TRUE(connection.value()->broken());
}

TEST(ClientConnection, CountsBytesRequestsAndRoundTrips) {
  FakeServer fake(hello_then([](FakeServer& s, const FrameHeader& h) {
    if (!(h.flags & rpc::kFlagNoReply)) s.reply(h, Status());
    return true;
  }));
  auto connection = rpc::get_connection(fake.endpoint());
  ASSERT_TRUE(connection.ok()) << connection.status().to_string();
  const ConnectionStats before = connection.value()->stats();
  EXPECT_EQ(before.requests, 1u);  // HELLO
  EXPECT_EQ(before.round_trips, 1u);

  ASSERT_TRUE(ping(fake.endpoint()).ok());
  rpc::WireWriter none;
  const uint8_t bulk[100] = {};
  ASSERT_TRUE(
      connection.value()->send_one_way({.command = Command::set_tensor, .fields = none.bytes(), .bulk = bulk}).ok());

  const ConnectionStats after = connection_stats(fake.endpoint());
  EXPECT_TRUE(after.live);
  EXPECT_EQ(after.requests - before.requests, 2u);
  EXPECT_EQ(after.round_trips - before.round_trips, 1u);
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, 2 * rpc::kFrameHeaderSize + 100);
  // PING's reply: a header and an ok status (code + empty message).
  EXPECT_EQ(after.bytes_received - before.bytes_received, rpc::kFrameHeaderSize + 8);
}

TEST(ClientConnection, OneEndpointSharesOneConnectionUntilTheLastUserGoes) {
  FakeServer fake(hello_then([](FakeServer& s, const FrameHeader& h) {
    s.reply(h, Status());
    return true;
  }));
  auto a = rpc::get_connection(fake.endpoint());
  auto b = rpc::get_connection(fake.endpoint());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value().get(), b.value().get());
  EXPECT_EQ(rpc::find_live_connection(fake.endpoint()).get(), a.value().get());
  a.value().reset();
  b.value().reset();
  EXPECT_EQ(rpc::find_live_connection(fake.endpoint()), nullptr);
}

// top_k is new in 1.6: the client places it only on servers that said so, and
// the scheduler and the generator then keep it (and the logits) elsewhere.
TEST(RemoteDeviceOps, TopKGoesOnlyToServersThatSpeakItsVersion) {
  Context ctx;
  const Tensor* top = ctx.top_k(ctx.new_tensor(DType::f32, {10}), 3);
  const Tensor* older = ctx.argmax(ctx.new_tensor(DType::f32, {10}));
  for (uint32_t minor : {rpc::kTopKMinor - 1, rpc::kTopKMinor}) {
    FakeServer fake([minor](FakeServer& s, const FrameHeader& h, const std::vector<uint8_t>&) {
      if (h.command != Command::hello) return false;
      s.reply_hello(h, rpc::kVersionMajor, minor);
      return true;
    });
    auto device = remote_device(fake.endpoint(), 0);
    EXPECT_EQ(device->supports(*top), minor >= rpc::kTopKMinor) << "a server of 1." << minor;
    EXPECT_TRUE(device->supports(*older)) << "a server of 1." << minor;
  }
}

// Writing a transposed cache (set_rows into a strided destination) is new in
// 1.7; set_rows into dense rows goes to any server.
TEST(RemoteDeviceOps, StridedSetRowsGoesOnlyToServersThatSpeakItsVersion) {
  Context ctx;
  Tensor* cache = ctx.new_tensor(DType::f32, {6, 8});
  Tensor* src = ctx.new_tensor(DType::f32, {8, 2});
  Tensor* rows = ctx.new_tensor(DType::i32, {2});
  const Tensor* strided = ctx.set_rows(ctx.transpose(cache), src, rows);
  const Tensor* dense = ctx.set_rows(ctx.new_tensor(DType::f32, {8, 6}), src, rows);
  for (uint32_t minor : {rpc::kStridedSetRowsMinor - 1, rpc::kStridedSetRowsMinor}) {
    FakeServer fake([minor](FakeServer& s, const FrameHeader& h, const std::vector<uint8_t>&) {
      if (h.command != Command::hello) return false;
      s.reply_hello(h, rpc::kVersionMajor, minor);
      return true;
    });
    auto device = remote_device(fake.endpoint(), 0);
    EXPECT_EQ(device->supports(*strided), minor >= rpc::kStridedSetRowsMinor) << "a server of 1." << minor;
    EXPECT_TRUE(device->supports(*dense)) << "a server of 1." << minor;
  }
}

// The mixture-of-experts ops, and soft_max with attention sinks, are new in
// 1.12: a 1.11 server would refuse them (unknown ops, a source soft_max does
// not read), so the client places them only on servers that said 1.12;
// soft_max without sinks goes to any server.
TEST(RemoteDeviceOps, MoeOpsAndSinksGoOnlyToServersThatSpeakTheirVersion) {
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {16, 4, 2});
  Tensor* sinks = ctx.new_tensor(DType::f32, {2});
  Tensor* ids = ctx.new_tensor(DType::i32, {2, 3});
  const std::vector<const Tensor*> moe = {
      ctx.mul_mat_id(ctx.new_tensor(DType::q8_0, {64, 8, 4}), ctx.new_tensor(DType::f32, {64, 1, 3}), ids),
      ctx.top_k_ids(x, 2),
      ctx.swiglu_clamp(x, x, 1.702f, 7.0f),
      ctx.soft_max(x, nullptr, 1.0f, sinks),
      ctx.soft_max(x, ctx.new_tensor(DType::f32, {16, 4}), 1.0f, sinks),
  };
  const Tensor* older = ctx.soft_max(x, ctx.new_tensor(DType::f32, {16, 4}), 1.0f);
  for (uint32_t minor : {rpc::kMoeMinor - 1, rpc::kMoeMinor}) {
    FakeServer fake([minor](FakeServer& s, const FrameHeader& h, const std::vector<uint8_t>&) {
      if (h.command != Command::hello) return false;
      s.reply_hello(h, rpc::kVersionMajor, minor);
      return true;
    });
    auto device = remote_device(fake.endpoint(), 0);
    for (const Tensor* n : moe) {
      EXPECT_EQ(device->supports(*n), minor >= rpc::kMoeMinor) << name_of(n->op) << ", a server of 1." << minor;
    }
    EXPECT_TRUE(device->supports(*older)) << "a server of 1." << minor;
  }
}

}  // namespace
}  // namespace tensorpc::test
