// Strangers cost a server little (docs/server.md, "Connections"): a peer
// that trickles its HELLO, AUTH or TLS handshake is closed at the handshake
// deadline; past --max-pending connections still in their handshake the
// oldest is dropped, never an admitted client; past --max-clients a client
// is refused with an error saying the server is full; and hundreds of silent
// connections neither hold hundreds of threads nor hold up a client's work.
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/log.h"
#include "rpc/rpc_test_util.h"
#include "rpc/tls_test_util.h"
#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"
#include "test_util.h"

namespace tensorpc::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string rpc_endpoint(const Server& server) { return "127.0.0.1:" + std::to_string(server.port()); }

std::unique_ptr<Server> serve(ServerOptions options) {
  log::set_level(log::Level::error);
  options.port = 0;
  options.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1})};
  auto s = Server::start(std::move(options));
  if (!s.ok()) throw std::runtime_error(s.status().to_string());
  return std::move(s).value();
}

// Whether the server closed `fd` (EOF or a reset), waiting up to `wait`.
bool closed_by_server(int fd, milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Sends `bytes` one every 200 ms until the server closes the connection;
// how long after the first byte it did (or 20 s when it never did).
Clock::duration trickle_until_closed(int fd, const std::vector<uint8_t>& bytes) {
  const auto start = Clock::now();
  for (size_t i = 0; Clock::now() - start < seconds(20); ++i) {
    if (i < bytes.size()) (void)::send(fd, &bytes[i], 1, MSG_NOSIGNAL);
    if (closed_by_server(fd, milliseconds(200))) return Clock::now() - start;
  }
  return seconds(20);
}

std::vector<uint8_t> hello_frame(uint64_t features) {
  rpc::WireWriter w;
  rpc::HelloRequest req;
  req.client = "a slow stranger";
  req.features = features;
  rpc::encode(w, req);
  rpc::FrameHeader h;
  h.command = rpc::Command::hello;
  h.request_id = 1;
  h.payload_length = w.bytes().size();
  std::vector<uint8_t> frame(rpc::kFrameHeaderSize);
  rpc::encode_header(h, frame.data());
  frame.insert(frame.end(), w.bytes().begin(), w.bytes().end());
  return frame;
}

ServerOptions with_deadline(milliseconds handshake) {
  ServerOptions o;
  o.handshake_timeout = handshake;
  return o;
}

TEST(HandshakeDeadline, APeerTricklingItsHelloIsClosedAtTheDeadlineAndOthersAreServed) {
  auto server = serve(with_deadline(milliseconds(1000)));
  RawClient slow(server->port());
  const auto took = trickle_until_closed(slow.socket().fd(), hello_frame(0));
  EXPECT_GE(took, milliseconds(800));
  EXPECT_LT(took, seconds(5)) << "a trickling HELLO kept its connection past the 1 s deadline";
  RawClient normal(server->port());
  EXPECT_TRUE(normal.hello().ok());
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_TRUE(normal.call_status(rpc::Command::ping).ok()) << "an admitted client has no handshake deadline";
}

TEST(HandshakeDeadline, APeerTricklingItsAuthIsClosedAtTheDeadline) {
  ServerOptions o = with_deadline(milliseconds(1000));
  o.key = "the cluster's secret";
  auto server = serve(o);
  RawClient slow(server->port());
  rpc::WireWriter hello;
  rpc::encode(hello, rpc::HelloRequest{.features = rpc::kFeatureKey, .client = "a slow stranger"});
  ASSERT_TRUE(slow.send_frame(rpc::Command::hello, hello).ok());
  auto reply = slow.read_reply();
  ASSERT_TRUE(reply.ok() && reply.value().status.ok()) << "HELLO with a key is answered with a nonce";
  // An AUTH frame, a byte at a time: its header says 64 bytes follow.
  rpc::FrameHeader h;
  h.command = rpc::Command::auth;
  h.request_id = 2;
  h.payload_length = 64;
  std::vector<uint8_t> auth(rpc::kFrameHeaderSize + 64, 0x11);
  rpc::encode_header(h, auth.data());
  const auto took = trickle_until_closed(slow.socket().fd(), auth);
  EXPECT_LT(took, seconds(5)) << "a trickling AUTH kept its connection past the 1 s deadline";
}

TEST(HandshakeDeadline, APeerTricklingItsTlsHandshakeIsClosedAtTheDeadline) {
  TestCa ca;
  ServerOptions o = with_deadline(milliseconds(1000));
  o.tls = ca.issue("server", {"127.0.0.1"});
  o.tls.ca_file.clear();
  auto server = serve(o);
  auto socket = rpc::Socket::connect("127.0.0.1", server->port());
  ASSERT_TRUE(socket.ok());
  // The start of a TLS record that announces a 512-byte ClientHello.
  std::vector<uint8_t> record = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03};
  record.resize(200, 0x00);
  const auto took = trickle_until_closed(socket.value().fd(), record);
  EXPECT_LT(took, seconds(5)) << "a trickling TLS handshake kept its connection past the 1 s deadline";
}

TEST(PendingConnections, PastTheCapTheOldestPendingIsDroppedNeverAnAdmittedClient) {
  ServerOptions o;
  o.max_pending = 4;
  auto server = serve(o);
  RawClient admitted(server->port());
  ASSERT_TRUE(admitted.hello().ok());
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 10; ++i) silent.push_back(std::make_unique<RawClient>(server->port()));
  const auto deadline = Clock::now() + seconds(10);
  while (server->stats().dropped_pending < 6 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(server->stats().dropped_pending, 6u);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(closed_by_server(silent[i]->socket().fd(), seconds(5))) << "silent " << i;
  for (int i = 6; i < 10; ++i) EXPECT_FALSE(closed_by_server(silent[i]->socket().fd(), milliseconds(50))) << i;
  EXPECT_TRUE(admitted.call_status(rpc::Command::ping).ok()) << "the admitted client was dropped";
}

TEST(AdmittedClients, OnePastMaxClientsIsRefusedSayingTheServerIsFullAndALaterOneGetsIn) {
  ServerOptions o;
  o.max_clients = 1;
  auto server = serve(o);
  auto first = std::make_unique<RawClient>(server->port());
  ASSERT_TRUE(first->hello().ok());
  RawClient second(server->port());
  const Status refused = second.hello();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), StatusCode::out_of_memory) << refused.to_string();
  EXPECT_NE(refused.message().find("the server is full"), std::string::npos) << refused.to_string();
  EXPECT_NE(refused.message().find("--max-clients"), std::string::npos) << refused.to_string();
  EXPECT_TRUE(closed_by_server(second.socket().fd(), seconds(5)));
  // Through the client library, the refusal is the error of opening.
  const Status via_library = ping(rpc_endpoint(*server));
  EXPECT_NE(via_library.message().find("the server is full"), std::string::npos) << via_library.to_string();

  first.reset();  // its place is given back when its session ends
  Status later = internal_error("not tried");
  for (auto deadline = Clock::now() + seconds(10); Clock::now() < deadline && !later.ok();) {
    RawClient third(server->port());
    later = third.hello();
    if (!later.ok()) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(later.ok()) << later.to_string();
}

size_t count_entries(const char* dir) {
  size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

// A small job through the client library: allocate, write, read back.
Clock::duration timed_job(const std::string& endpoint) {
  const auto start = Clock::now();
  auto device = remote_device(endpoint, 0);
  auto buffer = device->allocate(1 << 20);
  check(buffer.status(), "allocate");
  std::vector<uint8_t> bytes(1 << 20, 0x42), back(1 << 20);
  Context ctx;
  Tensor* t = ctx.new_tensor(DType::f32, {1 << 18}, "t");
  check(buffer.value()->place(*t, 0), "place");
  check(buffer.value()->set(*t, bytes.data(), 0, bytes.size()), "set");
  check(buffer.value()->get(*t, back.data(), 0, back.size()), "get");
  EXPECT_EQ(back, bytes);
  return Clock::now() - start;
}

TEST(PendingConnections, FiveHundredSilentConnectionsHoldFewThreadsDelayNoClientAndLeaveNothingBehind) {
  auto server = serve(ServerOptions{});
  const std::string endpoint = rpc_endpoint(*server);
  (void)timed_job(endpoint);  // warm: the connection, the device's threads
  const size_t threads_before = count_entries("/proc/self/task");
  const size_t fds_before = count_entries("/proc/self/fd");
  const auto alone = timed_job(endpoint);

  std::vector<int> silent;
  size_t most_threads = 0;
  for (int i = 0; i < 500; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "connection " << i;
    silent.push_back(fd);
    if (i % 50 == 0) most_threads = std::max(most_threads, count_entries("/proc/self/task"));
  }
  const auto with_silent = timed_job(endpoint);
  most_threads = std::max(most_threads, count_entries("/proc/self/task"));
  // A client queued behind the silent ones would wait for their handshake
  // timeout (10 s by default); half of it tells that from a slow machine (a
  // sanitizer build on a busy one took 0.5 s more than alone).
  EXPECT_LT(with_silent, alone + ServerOptions{}.handshake_timeout / 2);
  // At most max_pending sessions are in their handshake; one dropped for a
  // newer one ends as soon as its thread runs again, which on a busy machine
  // can be a while (a thread per silent connection would be 500).
  EXPECT_LT(most_threads, threads_before + 2 * ServerOptions{}.max_pending + 32)
      << "the server held a thread per silent connection";

  for (int fd : silent) ::close(fd);
  bool back = false;
  for (auto deadline = Clock::now() + seconds(15); Clock::now() < deadline && !back;) {
    std::this_thread::sleep_for(milliseconds(50));
    back = count_entries("/proc/self/task") <= threads_before + 2 && count_entries("/proc/self/fd") <= fds_before + 2;
  }
  EXPECT_TRUE(back) << "threads " << count_entries("/proc/self/task") << " (before " << threads_before << "), fds "
                    << count_entries("/proc/self/fd") << " (before " << fds_before << ")";
}

}  // namespace
}  // namespace tensorpc::test
