// Copies between servers go from server to server (docs/protocol.md, "Copies
// between servers"): the bytes never pass through the client
// (PeerCopy), and a write grant is single-use, exact and bound to the life
// of the connection that asked for it (WriteGrant).
#include <array>

#include "pipeline_util.h"
#include "remote_test_util.h"
#include "core/log.h"
#include "rpc_test_util.h"

namespace tensorpc::test {
namespace {

using rpc::Command;

// ---- through the client library -----------------------------------------------------

TEST(PeerCopy, PipelineHandOverBetweenServersGoesServerToServer) {
  InProcessServer a(two_cpus()), b(two_cpus());
  auto on_a = connect_devices(a.endpoint());
  auto on_b = connect_devices(b.endpoint());
  ASSERT_TRUE(on_a.ok() && on_b.ok());
  ConnectionStats a0, a1, b0, b1;
  uint64_t tensor_bytes = 0;
  const std::vector<float> y = run_pipeline(*on_a.value()[0], *on_b.value()[1], [&](Stage& s1, Stage& s2) {
    tensor_bytes = s1.out->nbytes();
    a0 = connection_stats(a.endpoint());
    b0 = connection_stats(b.endpoint());
    check(s2.in->buffer->copy(*s1.out, *s2.in), "copy");  // returns when written
    a1 = connection_stats(a.endpoint());
    b1 = connection_stats(b.endpoint());
  });
  EXPECT_EQ(tensor_bytes, uint64_t{4} << 20);
  for (const auto& [before, after] : {std::pair{a0, a1}, std::pair{b0, b1}}) {
    EXPECT_LT(after.bytes_sent - before.bytes_sent, 1024u);
    EXPECT_LT(after.bytes_received - before.bytes_received, 1024u);
  }
  EXPECT_EQ(y, local_pipeline());
}

TEST(PeerCopy, AFailureNamesBothEndpoints) {
  log::set_level(log::Level::error);
  InProcessServer a(two_cpus()), b(two_cpus());
  auto src_device = remote_device(a.endpoint(), 0);
  auto dst_device = remote_device(b.endpoint(), 0);
  auto src = src_device->allocate(4096);
  auto dst = dst_device->allocate(4096);
  ASSERT_TRUE(src.ok() && dst.ok());
  Tensor s, d;
  s.type = d.type = DType::f32;
  s.ne = d.ne = {1024, 1, 1, 1};
  s.nb = d.nb = {4, 4096, 4096, 4096};
  ASSERT_TRUE(src.value()->place(s, 0).ok());
  ASSERT_TRUE(dst.value()->place(d, 0).ok());
  ASSERT_TRUE(dst.value()->copy(s, d).ok());
  b.stop();  // the destination goes away
  Status st = dst.value()->copy(s, d);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), a.endpoint())) << st.to_string();
  EXPECT_TRUE(contains(st.message(), b.endpoint())) << st.to_string();
}

TEST(PeerCopy, AServerWithAnAllowListSendsOnlyToThePeersOnIt) {
  log::set_level(log::Level::error);
  InProcessServer b(two_cpus()), c(two_cpus());
  ServerOptions options;
  options.port = 0;
  options.allowed_peers = {b.endpoint()};
  auto a = Server::start(options);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  const std::string a_endpoint = "127.0.0.1:" + std::to_string(a.value()->port());
  auto src_device = remote_device(a_endpoint, 0);
  auto src = src_device->allocate(4096);
  ASSERT_TRUE(src.ok());
  Tensor s;
  s.type = DType::f32;
  s.ne = {1024, 1, 1, 1};
  s.nb = {4, 4096, 4096, 4096};
  ASSERT_TRUE(src.value()->place(s, 0).ok());
  for (const InProcessServer* to : {&b, &c}) {
    auto dst_device = remote_device(to->endpoint(), 0);
    auto dst = dst_device->allocate(4096);
    ASSERT_TRUE(dst.ok());
    Tensor d = s;
    ASSERT_TRUE(dst.value()->place(d, 0).ok());
    const Status st = dst.value()->copy(s, d);
    if (to == &b) {
      EXPECT_TRUE(st.ok()) << st.to_string();
    } else {
      ASSERT_FALSE(st.ok());
      EXPECT_TRUE(contains(st.message(), c.endpoint())) << st.to_string();
      EXPECT_TRUE(contains(st.message(), "--allow-peer")) << st.to_string();
    }
  }
  // The client's connection to C is gone with its buffer; had A connected to
  // C, A's peer connection would still be open there.
  EXPECT_TRUE(eventually([&] { return c.server().stats().sessions == 0; })) << "A connected to C";
  ServerOptions bad;
  bad.port = 0;
  bad.allowed_peers = {"no port here"};
  EXPECT_FALSE(Server::start(bad).ok());
}

// ---- the grants, with raw clients -------------------------------------------------

// Two servers, a raw client on each: a source buffer on A holding a pattern,
// a zeroed destination buffer on B.
class WriteGrant : public ::testing::Test {
 protected:
  static constexpr uint64_t kSize = 1024;

  void SetUp() override {
    log::set_level(log::Level::error);
    for (size_t i = 0; i < kSize; ++i) pattern_[i] = static_cast<uint8_t>(i * 13 + 1);
    ASSERT_TRUE(on_a_.hello().ok());
    ASSERT_TRUE(on_b_.hello().ok());
    src_ = on_a_.alloc(kSize, 0);
    dst_ = on_b_.alloc(kSize, 1);
    ASSERT_TRUE(on_a_.set_tensor(src_, 0, pattern_).ok());
    ASSERT_TRUE(on_b_.set_tensor(dst_, 0, zeros_).ok());
  }
  void TearDown() override {
    a_.stop();
    b_.stop();
  }

  static StatusOr<rpc::GrantToken> grant(RawClient& c, uint64_t handle, uint64_t offset, uint64_t size) {
    auto reply = c.call_for<rpc::GrantWriteReply>(Command::grant_write, rpc::GrantWriteRequest{handle, offset, size});
    if (!reply.ok()) return reply.status();
    return reply.value().token;
  }
  // Asks A to copy the source's first `size` bytes to B under `token`.
  Status copy_to_b(const rpc::GrantToken& token, uint64_t size = kSize) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::CopyToPeerRequest{src_, 0, size, b_.endpoint(), token});
    return on_a_.call_status(Command::copy_to_peer, w);
  }
  std::vector<uint8_t> destination() {
    auto got = on_b_.get_tensor(dst_, 0, kSize);
    return got.ok() ? got.value() : std::vector<uint8_t>();
  }
  void expect_refused(const Status& s, const char* what) {
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_TRUE(contains(s.message(), "refused") || contains(s.message(), "freed")) << what << ": " << s.to_string();
    EXPECT_TRUE(contains(s.message(), a_.endpoint()) && contains(s.message(), b_.endpoint()))
        << what << ": " << s.to_string();
    EXPECT_EQ(destination(), zeros_) << what << ": something was written";
  }

  InProcessServer a_{two_cpus()}, b_{two_cpus()};
  RawClient on_a_{a_.server().port()}, on_b_{b_.server().port()};
  uint64_t src_ = 0, dst_ = 0;
  std::vector<uint8_t> pattern_ = std::vector<uint8_t>(kSize), zeros_ = std::vector<uint8_t>(kSize, 0);
};

TEST_F(WriteGrant, AGrantedCopyWritesExactlyTheGrantedRange) {
  auto token = grant(on_b_, dst_, 0, kSize);
  ASSERT_TRUE(token.ok()) << token.status().to_string();
  Status s = copy_to_b(token.value());
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(destination(), pattern_);
}

TEST_F(WriteGrant, AForgedTokenIsRefused) {
  ASSERT_TRUE(grant(on_b_, dst_, 0, kSize).ok());  // a real one exists, but is not this
  rpc::GrantToken forged{};
  forged[0] = 42;
  expect_refused(copy_to_b(forged), "forged token");
}

TEST_F(WriteGrant, AUsedTokenIsRefused) {
  auto token = grant(on_b_, dst_, 0, kSize);
  ASSERT_TRUE(token.ok());
  ASSERT_TRUE(copy_to_b(token.value()).ok());
  ASSERT_TRUE(on_b_.set_tensor(dst_, 0, zeros_).ok());
  expect_refused(copy_to_b(token.value()), "reused token");
}

TEST_F(WriteGrant, ATokenForASmallerRangeIsRefused) {
  auto token = grant(on_b_, dst_, 0, kSize / 2);
  ASSERT_TRUE(token.ok());
  expect_refused(copy_to_b(token.value(), kSize), "range larger than granted");
  // The token was spent on that try: even its own size is now refused.
  expect_refused(copy_to_b(token.value(), kSize / 2), "token spent on a refused try");
}

TEST_F(WriteGrant, ATokenOfADisconnectedClientIsRefused) {
  uint64_t handle = 0;
  rpc::GrantToken token{};
  {
    RawClient gone(b_.server().port());
    ASSERT_TRUE(gone.hello().ok());
    handle = gone.alloc(kSize, 0);
    auto t = grant(gone, handle, 0, kSize);
    ASSERT_TRUE(t.ok());
    token = t.value();
  }
  ASSERT_TRUE(eventually([&] { return b_.stats().sessions == 1; }));
  const uint64_t live = b_.stats().live_buffers;
  expect_refused(copy_to_b(token), "token of a disconnected client");
  EXPECT_EQ(b_.stats().live_buffers, live);
}

TEST_F(WriteGrant, ATokenOfAFreedBufferIsRefused) {
  const uint64_t other = on_b_.alloc(kSize, 0);
  auto token = grant(on_b_, other, 0, kSize);
  ASSERT_TRUE(token.ok());
  ASSERT_TRUE(on_b_.free(other).ok());
  expect_refused(copy_to_b(token.value()), "freed buffer");
}

TEST_F(WriteGrant, AGrantOutsideTheBufferIsRefusedAtOnce) {
  EXPECT_FALSE(grant(on_b_, dst_, 1, kSize).ok());
  EXPECT_FALSE(grant(on_b_, 999, 0, 1).ok());
  const uint64_t freed = on_b_.alloc(kSize, 0);
  ASSERT_TRUE(on_b_.free(freed).ok());
  EXPECT_FALSE(grant(on_b_, freed, 0, 1).ok());
}

TEST_F(WriteGrant, AForgedWriteSentStraightToTheServerIsDrainedAndRefused) {
  rpc::WireWriter w;
  rpc::encode(w, rpc::WriteGrantedRequest{rpc::GrantToken{}, kSize});
  w.raw(pattern_.data(), kSize);
  Status s = on_b_.call_status(Command::write_granted, w);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "refused")) << s.to_string();
  EXPECT_TRUE(on_b_.ping().ok());  // the bytes were drained: the connection goes on
  EXPECT_EQ(destination(), zeros_);
}

}  // namespace
}  // namespace tensorpc::test
