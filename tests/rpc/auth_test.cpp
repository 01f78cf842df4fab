// Pre-shared keys (docs/protocol.md, "Keys"): the proofs and key files, a
// keyed server spoken to through the client library and by a raw client that
// breaks the handshake on purpose, a fake server that cannot prove the key,
// and copies between servers that share one.
#include "rpc/transport/auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "file_util.h"
#include "remote_test_util.h"
#include "core/log.h"
#include "rpc_test_util.h"
#include "tensorpc/key.h"

namespace tensorpc::test {
namespace {

using rpc::AuthNonce;
using rpc::AuthProof;
using rpc::AuthRole;
using rpc::Command;

const std::string kKey = "the cluster's secret";
const std::string kOtherKey = "another cluster's secret";

AuthNonce nonce_of(uint8_t fill) {
  AuthNonce n;
  n.fill(fill);
  return n;
}

AuthProof proof(const std::string& key, AuthRole role, const AuthNonce& client, const AuthNonce& server) {
  auto p = rpc::auth_proof(key, role, client, server);
  if (!p.ok()) throw std::runtime_error(p.status().to_string());
  return p.value();
}

// ---- the proofs -----------------------------------------------------------------------

TEST(AuthProof, IsHmacSha256OfTheLabelTheRoleAndBothNonces) {
  const AuthNonce client = nonce_of(0x11), server = nonce_of(0x22);
  // The input exactly as docs/protocol.md lays it out, hashed here by OpenSSL directly.
  std::vector<uint8_t> input;
  for (const char c : std::string("tensorpc-auth-v1")) input.push_back(static_cast<uint8_t>(c));
  input.push_back(1);  // the client proves
  input.insert(input.end(), client.begin(), client.end());
  input.insert(input.end(), server.begin(), server.end());
  ASSERT_EQ(input.size(), 16u + 1 + 32 + 32);
  AuthProof expected{};
  unsigned int length = 0;
  ASSERT_NE(HMAC(EVP_sha256(), kKey.data(), static_cast<int>(kKey.size()), input.data(), input.size(), expected.data(),
                 &length),
            nullptr);
  ASSERT_EQ(length, 32u);
  EXPECT_EQ(proof(kKey, AuthRole::client, client, server), expected);

  input[16] = 2;  // the server proves
  ASSERT_NE(HMAC(EVP_sha256(), kKey.data(), static_cast<int>(kKey.size()), input.data(), input.size(), expected.data(),
                 &length),
            nullptr);
  EXPECT_EQ(proof(kKey, AuthRole::server, client, server), expected);
}

TEST(AuthProof, ChangesWithTheKeyTheRoleAndEitherNonce) {
  const AuthNonce a = nonce_of(1), b = nonce_of(2), c = nonce_of(3);
  const AuthProof base = proof(kKey, AuthRole::client, a, b);
  EXPECT_EQ(proof(kKey, AuthRole::client, a, b), base);
  EXPECT_NE(proof(kOtherKey, AuthRole::client, a, b), base);
  EXPECT_NE(proof(kKey, AuthRole::server, a, b), base);
  EXPECT_NE(proof(kKey, AuthRole::client, c, b), base);
  EXPECT_NE(proof(kKey, AuthRole::client, a, c), base);
  EXPECT_NE(proof(kKey, AuthRole::client, b, a), base);  // the nonces' order matters
  EXPECT_TRUE(rpc::proof_matches(base, base));
  AuthProof one_bit = base;
  one_bit[31] ^= 1;
  EXPECT_FALSE(rpc::proof_matches(base, one_bit));
}

TEST(AuthProof, NoncesAreFreshEachTime) {
  auto a = rpc::fresh_nonce(), b = rpc::fresh_nonce();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a.value(), b.value());
  EXPECT_NE(a.value(), AuthNonce{});
}

TEST(AuthProof, AnEmptyKeyMakesNoProof) {
  EXPECT_FALSE(rpc::auth_proof("", AuthRole::client, nonce_of(1), nonce_of(2)).ok());
}

// ---- key files --------------------------------------------------------------------------

TEST(KeyFile, OneTrailingNewlineIsNotPartOfTheKey) {
  EXPECT_EQ(read_key_file(TempFile("secret\n").path).value(), "secret");
  EXPECT_EQ(read_key_file(TempFile("secret\r\n").path).value(), "secret");
  EXPECT_EQ(read_key_file(TempFile("secret").path).value(), "secret");
  EXPECT_EQ(read_key_file(TempFile("secret\n\n").path).value(), "secret\n");
  EXPECT_EQ(read_key_file(TempFile("secret\r").path).value(), "secret\r");  // a newline is "\n" or "\r\n"
  const std::string binary("\0\x01\xff key", 7);
  EXPECT_EQ(read_key_file(TempFile(binary).path).value(), binary);
}

TEST(KeyFile, AMissingEmptyOrOversizedFileIsAnErrorNamingIt) {
  const std::string missing = "/nonexistent/dir/tensorpc.key";
  auto r = read_key_file(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), missing)) << r.status().to_string();

  for (const std::string& bytes : {std::string(), std::string("\n"), std::string(kMaxKeyBytes + 1, 'k')}) {
    TempFile f(bytes);
    auto k = read_key_file(f.path);
    ASSERT_FALSE(k.ok()) << bytes.size() << " bytes";
    EXPECT_TRUE(contains(k.status().message(), f.path)) << k.status().to_string();
  }
  EXPECT_TRUE(read_key_file(TempFile(std::string(kMaxKeyBytes, 'k')).path).ok());
}

TEST(KeyFile, AClientsKeyIsTheOptionOrElseTheFileNamedInTheEnvironment) {
  TempFile f("from the environment\n");
  {
    ScopedEnv env(kKeyFileVariable, f.path);
    EXPECT_EQ(rpc::client_key(std::nullopt).value(), "from the environment");
    EXPECT_EQ(rpc::client_key(std::string("given")).value(), "given");
    EXPECT_EQ(rpc::client_key(std::string()).value(), "");  // explicitly none
  }
  {
    ScopedEnv env(kKeyFileVariable, "");
    EXPECT_EQ(rpc::client_key(std::nullopt).value(), "");
  }
  {
    ScopedEnv env(kKeyFileVariable, "/nonexistent/tensorpc.key");
    auto k = rpc::client_key(std::nullopt);
    ASSERT_FALSE(k.ok());
    EXPECT_TRUE(contains(k.status().message(), "TENSORPC_KEY_FILE")) << k.status().to_string();
    EXPECT_TRUE(contains(k.status().message(), "/nonexistent/tensorpc.key")) << k.status().to_string();
  }
}

// ---- a keyed server through the client library -----------------------------------------

class KeyedServer : public ::testing::Test {
 protected:
  void SetUp() override {
    log::set_level(log::Level::error);
    server_ = std::make_unique<InProcessServer>(two_cpus(), kKey);
  }

  std::unique_ptr<InProcessServer> server_;
};

TEST_F(KeyedServer, TheRightKeyAllocatesSetsComputesAndGets) {
  auto devices = connect_devices(server_->endpoint(), RemoteOptions{.key = kKey});
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  ASSERT_EQ(devices.value().size(), 2u);
  Device& device = *devices.value()[1];

  Context ctx;
  Tensor* a = input(ctx, DType::f32, {64, 4});
  Tensor* b = input(ctx, DType::f32, {64, 4});
  Tensor* sum = ctx.add(a, b);
  GraphRun run(device, {sum});  // allocates on the server
  const std::vector<float> x = run.write(a, random_floats(256, 1));
  const std::vector<float> y = run.write(b, random_floats(256, 2));
  run.compute();
  const std::vector<float> got = run.read(sum);
  ASSERT_EQ(got.size(), 256u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], x[i] + y[i]) << i;
  EXPECT_GT(server_->stats().live_buffers, 0u);
}

TEST_F(KeyedServer, AWrongKeyIsRefusedAndLeavesNothingOnTheServer) {
  auto devices = connect_devices(server_->endpoint(), RemoteOptions{.key = kOtherKey});
  ASSERT_FALSE(devices.ok());
  const std::string m = devices.status().message();
  EXPECT_TRUE(contains(m, "authentication failed")) << m;
  EXPECT_TRUE(contains(m, server_->endpoint())) << m;

  auto device = remote_device(server_->endpoint(), 0, RemoteOptions{.key = kOtherKey});
  auto buffer = device->allocate(1024);
  ASSERT_FALSE(buffer.ok());
  EXPECT_TRUE(contains(buffer.status().message(), "authentication failed")) << buffer.status().to_string();

  EXPECT_TRUE(eventually([&] { return server_->stats().sessions == 0; }));
  EXPECT_EQ(server_->stats().live_buffers, 0u);
  EXPECT_EQ(server_->stats().buffer_bytes, 0u);
}

TEST_F(KeyedServer, AClientWithoutAKeyIsToldTheServerRequiresOne) {
  auto devices = connect_devices(server_->endpoint(), RemoteOptions{.key = ""});
  ASSERT_FALSE(devices.ok());
  const std::string m = devices.status().message();
  EXPECT_TRUE(contains(m, "this server requires a key, and the client has none")) << m;
  EXPECT_TRUE(contains(m, "HELLO to " + server_->endpoint())) << m;
  EXPECT_TRUE(eventually([&] { return server_->stats().sessions == 0; }));
}

TEST(KeyMismatch, AClientWithAKeyIsToldTheServerHasNone) {
  log::set_level(log::Level::error);
  InProcessServer unkeyed;
  auto devices = connect_devices(unkeyed.endpoint(), RemoteOptions{.key = kKey});
  ASSERT_FALSE(devices.ok());
  const std::string m = devices.status().message();
  EXPECT_TRUE(contains(m, "this client has a key, and the server has none")) << m;
  EXPECT_TRUE(contains(m, unkeyed.endpoint())) << m;
  // Without a key the same server serves as before.
  EXPECT_TRUE(connect_devices(unkeyed.endpoint(), RemoteOptions{.key = ""}).ok());
}

TEST_F(KeyedServer, TheKeyFileNamedInTheEnvironmentIsUsedWhenNoKeyIsGiven) {
  TempFile f(kKey + "\n");
  ScopedEnv env(kKeyFileVariable, f.path);
  auto devices = connect_devices(server_->endpoint());
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  auto buffer = devices.value()[0]->allocate(4096);
  ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
  EXPECT_EQ(server_->stats().live_buffers, 1u);
  EXPECT_TRUE(ping(server_->endpoint()).ok());
}

// ---- the handshake broken on purpose, by a raw client -----------------------------------

// HELLO announcing a key; the server's nonce, or the reason there is none.
StatusOr<AuthNonce> hello_with_key(RawClient& c) {
  auto reply = c.call_for<rpc::HelloReply>(
      Command::hello, rpc::HelloRequest{.features = rpc::kFeatureKey, .client = "raw keyed client"});
  if (!reply.ok()) return reply.status();
  if ((reply.value().features & rpc::kFeatureKey) == 0) return internal_error("the HELLO reply carries no nonce");
  return reply.value().server_nonce;
}

StatusOr<RawReply> send_auth(RawClient& c, const AuthNonce& client_nonce, const AuthProof& client_proof) {
  rpc::WireWriter w;
  rpc::encode(w, rpc::AuthRequest{.client_nonce = client_nonce, .client_proof = client_proof});
  return c.call(Command::auth, w);
}

// The AUTH exchange done right; the server's proof, or why there is none.
StatusOr<AuthProof> authenticate(RawClient& c, const AuthNonce& server_nonce, const AuthNonce& client_nonce) {
  auto reply = c.call_for<rpc::AuthReply>(
      Command::auth, rpc::AuthRequest{.client_nonce = client_nonce,
                                      .client_proof = proof(kKey, AuthRole::client, client_nonce, server_nonce)});
  if (!reply.ok()) return reply.status();
  return reply.value().server_proof;
}

TEST_F(KeyedServer, CommandsBeforeAuthenticationAreRefusedAndTheConnectionClosed) {
  const uint16_t port = server_->server().port();
  rpc::WireWriter alloc;
  rpc::encode(alloc, rpc::BufferAllocRequest{0, 64});
  const std::vector<std::pair<Command, rpc::WireWriter>> commands = {
      {Command::list_devices, {}}, {Command::buffer_alloc, alloc}, {Command::ping, {}}, {Command::synchronize, {}}};
  for (const auto& [command, payload] : commands) {
    // After HELLO, before AUTH.
    RawClient c(port);
    ASSERT_TRUE(hello_with_key(c).ok());
    Status s = c.call_status(command, payload);
    EXPECT_EQ(s.code(), StatusCode::protocol_error) << rpc::name_of(command) << ": " << s.to_string();
    EXPECT_TRUE(contains(s.message(), "before authentication")) << s.to_string();
    EXPECT_TRUE(c.closed_by_server()) << rpc::name_of(command);

    // Before HELLO.
    RawClient d(port);
    s = d.call_status(command, payload);
    EXPECT_EQ(s.code(), StatusCode::protocol_error) << rpc::name_of(command) << ": " << s.to_string();
    EXPECT_TRUE(d.closed_by_server()) << rpc::name_of(command);
  }
  // A streamed command is refused the same way, its bytes never taken.
  RawClient e(port);
  ASSERT_TRUE(hello_with_key(e).ok());
  EXPECT_EQ(e.set_tensor(1, 0, std::vector<uint8_t>(100, 7)).code(), StatusCode::protocol_error);
  EXPECT_TRUE(e.closed_by_server());

  // A HELLO that does not announce a key is refused too.
  RawClient f(port);
  Status s = f.hello();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "requires a key")) << s.to_string();
  EXPECT_TRUE(f.closed_by_server());

  EXPECT_EQ(server_->stats().live_buffers, 0u);
  EXPECT_TRUE(eventually([&] { return server_->stats().sessions == 0; }));
}

TEST_F(KeyedServer, AfterTheClientsProofEveryCommandIsServed) {
  RawClient c(server_->server().port());
  auto server_nonce = hello_with_key(c);
  ASSERT_TRUE(server_nonce.ok()) << server_nonce.status().to_string();
  const AuthNonce client_nonce = rpc::fresh_nonce().value();
  auto server_proof = authenticate(c, server_nonce.value(), client_nonce);
  ASSERT_TRUE(server_proof.ok()) << server_proof.status().to_string();
  // Mutual: the server proves the key over the same two nonces, in its own
  // role, so its proof is not the client's reflected back.
  EXPECT_EQ(server_proof.value(), proof(kKey, AuthRole::server, client_nonce, server_nonce.value()));
  EXPECT_NE(server_proof.value(), proof(kKey, AuthRole::client, client_nonce, server_nonce.value()));

  const uint64_t h = c.alloc(256);
  ASSERT_NE(h, 0u);
  const std::vector<uint8_t> bytes(100, 42);
  ASSERT_TRUE(c.set_tensor(h, 0, bytes).ok());
  EXPECT_EQ(c.get_tensor(h, 0, bytes.size()).value(), bytes);

  // The handshake is over: another AUTH is refused and ends the connection.
  auto again = send_auth(c, client_nonce, proof(kKey, AuthRole::client, client_nonce, server_nonce.value()));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().status.code(), StatusCode::protocol_error) << again.value().status.to_string();
  EXPECT_TRUE(c.closed_by_server());
  EXPECT_TRUE(eventually([&] { return server_->stats().live_buffers == 0; }));
}

TEST_F(KeyedServer, AWrongProofGetsOnlyARefusalAndAClosedConnection) {
  RawClient c(server_->server().port());
  auto server_nonce = hello_with_key(c);
  ASSERT_TRUE(server_nonce.ok());
  const AuthNonce client_nonce = nonce_of(9);
  auto r = send_auth(c, client_nonce, proof(kOtherKey, AuthRole::client, client_nonce, server_nonce.value()));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r.value().status.ok());
  EXPECT_TRUE(contains(r.value().status.message(), "authentication failed")) << r.value().status.to_string();
  EXPECT_TRUE(r.value().rest.empty());  // no server proof, nothing else
  EXPECT_TRUE(c.closed_by_server());
}

TEST_F(KeyedServer, AClientProofReplayedOnAnotherConnectionIsRefused) {
  const uint16_t port = server_->server().port();
  // A recorded, successful handshake.
  RawClient first(port);
  auto first_nonce = hello_with_key(first);
  ASSERT_TRUE(first_nonce.ok());
  const AuthNonce client_nonce = rpc::fresh_nonce().value();
  const AuthProof recorded = proof(kKey, AuthRole::client, client_nonce, first_nonce.value());
  auto accepted = send_auth(first, client_nonce, recorded);
  ASSERT_TRUE(accepted.ok() && accepted.value().status.ok());

  // Replayed word for word on a new connection, by someone without the key.
  RawClient replay(port);
  auto replay_nonce = hello_with_key(replay);
  ASSERT_TRUE(replay_nonce.ok());
  EXPECT_NE(replay_nonce.value(), first_nonce.value());
  auto r = send_auth(replay, client_nonce, recorded);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(contains(r.value().status.message(), "authentication failed")) << r.value().status.to_string();
  EXPECT_TRUE(replay.closed_by_server());

  // Reflected: the server's own proof of the first connection, offered as a client's.
  RawClient reflect(port);
  auto reflect_nonce = hello_with_key(reflect);
  ASSERT_TRUE(reflect_nonce.ok());
  rpc::AuthReply first_reply;
  rpc::WireReader in = accepted.value().fields();
  ASSERT_TRUE(rpc::decode(in, first_reply).ok());
  r = send_auth(reflect, client_nonce, first_reply.server_proof);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(contains(r.value().status.message(), "authentication failed")) << r.value().status.to_string();
  EXPECT_TRUE(reflect.closed_by_server());

  // The first connection is unaffected.
  EXPECT_TRUE(first.ping().ok());
}

TEST_F(KeyedServer, AFrameLargerThanAHelloBeforeAuthenticationClosesTheConnection) {
  RawClient c(server_->server().port());
  ASSERT_TRUE(hello_with_key(c).ok());
  ASSERT_TRUE(c.send_header(Command::auth, rpc::kMaxHelloRequestSize + 1).ok());
  EXPECT_TRUE(c.closed_by_server());
  RawClient d(server_->server().port());
  ASSERT_TRUE(d.send_header(Command::hello, uint64_t{1} << 30).ok());
  EXPECT_TRUE(d.closed_by_server());
}

TEST(KeyMismatch, AuthToAServerWithoutAKeyIsRefusedAndClosed) {
  log::set_level(log::Level::error);
  InProcessServer unkeyed;
  RawClient c(unkeyed.server().port());
  ASSERT_TRUE(c.hello().ok());
  auto r = send_auth(c, nonce_of(1), AuthProof{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().status.code(), StatusCode::protocol_error) << r.value().status.to_string();
  EXPECT_TRUE(c.closed_by_server());
}

// ---- a server that cannot prove the key ----------------------------------------------------

// Accepts one connection, answers HELLO with a nonce as a keyed server would,
// and answers AUTH with `server_proof(client's proof)` without knowing the key.
class ImpostorServer {
 public:
  explicit ImpostorServer(std::function<AuthProof(const rpc::AuthRequest&)> server_proof)
      : server_proof_(std::move(server_proof)) {
    listener_ = rpc::Socket::listen("127.0.0.1", 0).value();
    endpoint_ = "127.0.0.1:" + std::to_string(listener_.local_port());
    thread_ = std::thread([this] { serve(); });
  }
  ~ImpostorServer() {
    listener_.shutdown();
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void serve() {
    auto peer = listener_.accept();
    if (!peer.ok()) return;
    rpc::Socket s = std::move(peer).value();
    for (int i = 0; i < 2; ++i) {
      uint8_t raw[rpc::kFrameHeaderSize];
      if (!s.recv_all(raw, sizeof raw).ok()) return;
      const rpc::FrameHeader h =
          rpc::decode_header(std::span<const uint8_t, rpc::kFrameHeaderSize>(raw, sizeof raw)).value();
      std::vector<uint8_t> payload(h.payload_length);
      if (!s.recv_all(payload.data(), payload.size()).ok()) return;
      rpc::WireWriter fields;
      if (h.command == Command::hello) {
        rpc::encode(fields, rpc::HelloReply{
                                .features = rpc::kFeatureKey, .server = "impostor", .server_nonce = nonce_of(0x5a)});
      } else {
        rpc::AuthRequest req;
        rpc::WireReader in(payload);
        if (!rpc::decode(in, req).ok()) return;
        rpc::encode(fields, rpc::AuthReply{server_proof_(req)});
      }
      rpc::WireWriter w;
      rpc::encode_status(w, Status());
      w.raw(fields.bytes().data(), fields.size());
      rpc::FrameHeader reply{
          .command = h.command, .flags = rpc::kFlagReply, .request_id = h.request_id, .payload_length = w.size()};
      uint8_t head[rpc::kFrameHeaderSize];
      rpc::encode_header(reply, head);
      if (!s.send_all(head, sizeof head).ok() || !s.send_all(w.bytes().data(), w.size()).ok()) return;
    }
    uint8_t b;
    (void)s.recv_all(&b, 1);  // until the client hangs up
  }

  std::function<AuthProof(const rpc::AuthRequest&)> server_proof_;
  rpc::Socket listener_;
  std::string endpoint_;
  std::thread thread_;
};

TEST(KeyedClient, AServerThatReflectsTheClientsProofIsRefused) {
  ImpostorServer impostor([](const rpc::AuthRequest& req) { return req.client_proof; });
  auto devices = connect_devices(impostor.endpoint(), RemoteOptions{.key = kKey});
  ASSERT_FALSE(devices.ok());
  EXPECT_TRUE(contains(devices.status().message(), "the server's proof does not match"))
      << devices.status().to_string();
}

TEST(KeyedClient, AServerWithAnotherKeyIsRefused) {
  ImpostorServer impostor(
      [](const rpc::AuthRequest& req) { return proof(kOtherKey, AuthRole::server, req.client_nonce, nonce_of(0x5a)); });
  auto devices = connect_devices(impostor.endpoint(), RemoteOptions{.key = kKey});
  ASSERT_FALSE(devices.ok());
  EXPECT_TRUE(contains(devices.status().message(), "AUTH to " + impostor.endpoint())) << devices.status().to_string();
  EXPECT_TRUE(contains(devices.status().message(), "authentication failed")) << devices.status().to_string();
}

// ---- copies between servers that share a key ------------------------------------------------

// A 4 KiB f32 tensor at the start of `buffer`.
Tensor tensor_in(Buffer& buffer) {
  Tensor t;
  t.type = DType::f32;
  t.ne = {1024, 1, 1, 1};
  t.nb = {4, 4096, 4096, 4096};
  check(buffer.place(t, 0), "place");
  return t;
}

TEST(KeyedPeerCopy, ServersWithTheSameKeyCopyToEachOther) {
  log::set_level(log::Level::error);
  InProcessServer a(two_cpus(), kKey), b(two_cpus(), kKey);
  const RemoteOptions with_key{.key = kKey};
  auto src_device = remote_device(a.endpoint(), 0, with_key);
  auto dst_device = remote_device(b.endpoint(), 1, with_key);
  auto src = src_device->allocate(4096);
  auto dst = dst_device->allocate(4096);
  ASSERT_TRUE(src.ok() && dst.ok()) << src.status().to_string() << dst.status().to_string();
  Tensor s = tensor_in(*src.value()), d = tensor_in(*dst.value());
  const std::vector<float> values = random_floats(1024, 5);
  ASSERT_TRUE(src.value()->set(s, values.data(), 0, 4096).ok());

  const ConnectionStats before = connection_stats(a.endpoint());
  Status copied = dst.value()->copy(s, d);  // A sends to B, proving the key to B
  ASSERT_TRUE(copied.ok()) << copied.to_string();
  EXPECT_LT(connection_stats(a.endpoint()).bytes_received - before.bytes_received, 1024u);  // not via the client

  std::vector<float> got(1024);
  ASSERT_TRUE(dst.value()->get(d, got.data(), 0, 4096).ok());
  EXPECT_EQ(got, values);
}

TEST(KeyedPeerCopy, AServerWithAnotherKeyRefusesTheCopyNamingBothServers) {
  log::set_level(log::Level::error);
  InProcessServer a(two_cpus(), kKey), b(two_cpus(), kOtherKey);
  auto src_device = remote_device(a.endpoint(), 0, RemoteOptions{.key = kKey});
  auto dst_device = remote_device(b.endpoint(), 0, RemoteOptions{.key = kOtherKey});
  auto src = src_device->allocate(4096);
  auto dst = dst_device->allocate(4096);
  ASSERT_TRUE(src.ok() && dst.ok());
  Tensor s = tensor_in(*src.value()), d = tensor_in(*dst.value());
  Status copied = dst.value()->copy(s, d);
  ASSERT_FALSE(copied.ok());
  EXPECT_TRUE(contains(copied.message(), a.endpoint())) << copied.to_string();
  EXPECT_TRUE(contains(copied.message(), b.endpoint())) << copied.to_string();
  EXPECT_TRUE(contains(copied.message(), "authentication failed")) << copied.to_string();
}

}  // namespace
}  // namespace tensorpc::test
