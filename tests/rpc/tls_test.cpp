// TLS links (tensorpc/tls.h): a TLS server and its clients, the refusals
// (a plain client, a plain server, a certificate from another CA or for
// another host, a client without a certificate where one is required), copies
// between TLS servers, bytes on the wire that cannot be read, and bad files.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdlib>
#include <mutex>
#include <thread>

#include "file_util.h"
#include "remote_test_util.h"
#include "core/log.h"
#include "rpc/transport/socket.h"
#include "tensorpc/tls.h"
#include "tls_test_util.h"

namespace tensorpc::test {
namespace {

// A server on 127.0.0.1 with a certificate for that address signed by `ca`.
// With `require_client_cert`, clients must present one signed by `ca` too.
ServerOptions tls_server_options(TestCa& ca, bool require_client_cert = false, const std::string& key = {}) {
  TlsOptions files = ca.issue("server", {"127.0.0.1", "localhost"});
  if (!require_client_cert) files.ca_file.clear();
  return options_of(two_cpus(), key, files);
}

RemoteOptions trusting(const TestCa& ca) { return RemoteOptions{.tls = TlsOptions{.ca_file = ca.ca_file()}}; }

// A 64 KiB f32 tensor at the start of `buffer`.
Tensor tensor_in(Buffer& buffer) {
  Tensor t;
  t.type = DType::f32;
  t.ne = {16384, 1, 1, 1};
  t.nb = {4, 65536, 65536, 65536};
  check(buffer.place(t, 0), "place");
  return t;
}

// Sets `values` into a new buffer on `device`, reads them back, and returns what came back.
StatusOr<std::vector<float>> round_trip(Device& device, const std::vector<float>& values) {
  auto buffer = device.allocate(values.size() * 4);
  if (!buffer.ok()) return buffer.status();
  Tensor t = tensor_in(*buffer.value());
  TENSORPC_RETURN_IF_ERROR(buffer.value()->set(t, values.data(), 0, values.size() * 4));
  std::vector<float> got(values.size());
  TENSORPC_RETURN_IF_ERROR(buffer.value()->get(t, got.data(), 0, got.size() * 4));
  return got;
}

// Opens the devices of `endpoint` with `options` and round-trips a tensor
// through device 0; the error of whichever step failed.
Status use_server(const std::string& endpoint, const RemoteOptions& options) {
  auto devices = connect_devices(endpoint, options);
  if (!devices.ok()) return devices.status();
  const std::vector<float> values = random_floats(16384, 3);
  auto got = round_trip(*devices.value()[0], values);
  if (!got.ok()) return got.status();
  if (got.value() != values) return internal_error("the bytes read back differ from those set");
  return Status();
}

// A relay between clients (one at a time) and a server that keeps every byte
// the clients sent: what an onlooker on the path would see.
class RecordingRelay {
 public:
  explicit RecordingRelay(uint16_t target_port) {
    auto listener = rpc::Socket::listen("127.0.0.1", 0);
    check(listener.status(), "listen");
    listener_ = std::move(listener).value();
    endpoint_ = "127.0.0.1:" + std::to_string(listener_.local_port());
    thread_ = std::thread([this, target_port] { relay(target_port); });
  }
  ~RecordingRelay() {
    listener_.shutdown();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      client_.shutdown();
      server_.shutdown();
    }
    thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }
  std::string seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }

 private:
  void relay(uint16_t target_port) {
    for (;;) {
      auto client = listener_.accept();
      if (!client.ok()) return;
      auto server = rpc::Socket::connect("127.0.0.1", target_port);
      if (!server.ok()) return;
      int client_fd = -1, server_fd = -1;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return;
        client_ = std::move(client).value();
        server_ = std::move(server).value();
        client_fd = client_.fd();
        server_fd = server_.fd();
      }
      std::thread back([this, server_fd, client_fd] { pump(server_fd, client_fd, false); });
      pump(client_fd, server_fd, true);
      back.join();
    }
  }
  void pump(int from, int to, bool record) {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::recv(from, chunk, sizeof chunk, 0);
      if (n <= 0) break;
      if (record) {
        std::lock_guard<std::mutex> lock(mutex_);
        seen_.append(chunk, static_cast<size_t>(n));
      }
      if (::send(to, chunk, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
    }
    ::shutdown(to, SHUT_WR);
  }

  rpc::Socket listener_, client_, server_;  // the pair being relayed: guarded by mutex_
  std::string endpoint_;
  std::mutex mutex_;
  bool stopping_ = false;  // guarded by mutex_
  std::string seen_;       // guarded by mutex_
  std::thread thread_;
};

// ---- a TLS server and its clients -----------------------------------------------

TEST(TlsServer, AClientThatTrustsItsCaSetsAndGetsTensorsBitForBit) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer server(tls_server_options(ca));
  auto devices = connect_devices(server.endpoint(), trusting(ca));
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  ASSERT_EQ(devices.value().size(), 2u);
  // Large enough to take many TLS records each way.
  const std::vector<float> values = random_floats(3 << 20, 7);
  auto buffer = devices.value()[1]->allocate(values.size() * 4);
  ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
  Tensor t = tensor_in(*buffer.value());
  t.ne[0] = static_cast<int64_t>(values.size());
  t.nb = {4, values.size() * 4, values.size() * 4, values.size() * 4};
  ASSERT_TRUE(buffer.value()->set(t, values.data(), 0, values.size() * 4).ok());
  std::vector<float> got(values.size());
  Status read = buffer.value()->get(t, got.data(), 0, got.size() * 4);
  ASSERT_TRUE(read.ok()) << read.to_string();
  EXPECT_EQ(got, values);
  EXPECT_TRUE(ping(server.endpoint(), trusting(ca)).ok());
}

TEST(TlsServer, TakesAKeyAsWellAndRefusesAWrongOne) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer server(tls_server_options(ca, false, "the cluster's secret"));
  RemoteOptions options = trusting(ca);
  options.key = "the cluster's secret";
  Status good = use_server(server.endpoint(), options);
  EXPECT_TRUE(good.ok()) << good.to_string();
  options.key = "a guess";
  Status bad = use_server(server.endpoint(), options);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.message(), "AUTH")) << bad.to_string();
}

TEST(TlsServer, APlainClientGetsNothingAndTheServerGoesOnServing) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer server(tls_server_options(ca));
  auto plain = connect_devices(server.endpoint(), RemoteOptions{.tls = TlsOptions{}, .reply_timeout = std::chrono::seconds(5)});
  ASSERT_FALSE(plain.ok());
  EXPECT_TRUE(contains(plain.status().message(), server.endpoint())) << plain.status().to_string();
  EXPECT_TRUE(contains(plain.status().message(), "it speaks only TLS")) << plain.status().to_string();
  EXPECT_TRUE(eventually([&] { return server.stats().sessions == 0; }));
  Status good = use_server(server.endpoint(), trusting(ca));
  EXPECT_TRUE(good.ok()) << good.to_string();
}

TEST(TlsServer, AClientThatNeverStartsTheHandshakeIsLetGoAfterTheIoTimeout) {
  log::set_level(log::Level::error);
  TestCa ca;
  ServerOptions options = tls_server_options(ca);
  options.io_timeout = std::chrono::milliseconds(200);
  InProcessServer server(std::move(options));
  auto silent = rpc::Socket::connect("127.0.0.1", server.server().port());
  ASSERT_TRUE(silent.ok());
  EXPECT_TRUE(eventually([&] { return server.stats().sessions == 1; }));
  EXPECT_TRUE(eventually([&] { return server.stats().sessions == 0; }));
}

TEST(TlsClient, APlainServerIsAnErrorThatSaysTheServerMayNotSpeakTls) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer plain(two_cpus());
  auto devices = connect_devices(plain.endpoint(), trusting(ca));
  ASSERT_FALSE(devices.ok());
  EXPECT_TRUE(contains(devices.status().message(), plain.endpoint())) << devices.status().to_string();
  EXPECT_TRUE(contains(devices.status().message(), "does the server speak TLS")) << devices.status().to_string();
  EXPECT_TRUE(eventually([&] { return plain.stats().sessions == 0; }));
}

TEST(TlsClient, RefusesACertificateFromAnotherCa) {
  log::set_level(log::Level::error);
  TestCa ca, stranger("another CA");
  InProcessServer server(tls_server_options(stranger));
  auto devices = connect_devices(server.endpoint(), trusting(ca));
  ASSERT_FALSE(devices.ok());
  EXPECT_TRUE(contains(devices.status().message(), "the server's certificate was refused")) << devices.status().to_string();
  EXPECT_EQ(server.stats().live_buffers, 0u);
}

TEST(TlsClient, RefusesACertificateForAnotherHost) {
  log::set_level(log::Level::error);
  TestCa ca;
  TlsOptions files = ca.issue("elsewhere", {"elsewhere.example", "10.9.8.7"});
  files.ca_file.clear();
  InProcessServer server(options_of(two_cpus(), {}, files));
  auto devices = connect_devices(server.endpoint(), trusting(ca));
  ASSERT_FALSE(devices.ok());
  EXPECT_TRUE(contains(devices.status().message(), "mismatch")) << devices.status().to_string();
}

TEST(TlsClient, ChecksTheNameWhenConnectingByName) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer server(tls_server_options(ca));  // its certificate names localhost too
  Status by_name = use_server("localhost:" + std::to_string(server.server().port()), trusting(ca));
  EXPECT_TRUE(by_name.ok()) << by_name.to_string();
}

TEST(TlsClient, TakesItsSettingsFromTheEnvironmentWhenUnset) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer server(tls_server_options(ca));
  ScopedEnv env(kTlsCaVariable, ca.ca_file());
  Status good = use_server(server.endpoint(), RemoteOptions{});
  EXPECT_TRUE(good.ok()) << good.to_string();
}

TEST(TlsClient, ACertificateWithoutItsKeyIsAnError) {
  auto tls = client_tls(TlsOptions{.ca_file = "ca.pem", .cert_file = "me.pem"});
  ASSERT_FALSE(tls.ok());
  EXPECT_TRUE(contains(tls.status().message(), "without its private key")) << tls.status().to_string();
  auto none = client_tls(TlsOptions{});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none.value().has_value());
}

TEST(TlsClient, AMissingCaFileIsAnErrorNamingIt) {
  InProcessServer plain(two_cpus());
  auto devices = connect_devices(plain.endpoint(), RemoteOptions{.tls = TlsOptions{.ca_file = "/no/such/ca.pem"}});
  ASSERT_FALSE(devices.ok());
  EXPECT_TRUE(contains(devices.status().message(), "/no/such/ca.pem")) << devices.status().to_string();
}

// ---- mutual TLS -----------------------------------------------------------------

TEST(MutualTls, AClientWithoutACertificateIsRefused) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer server(tls_server_options(ca, /*require_client_cert=*/true));
  Status refused = use_server(server.endpoint(), trusting(ca));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.message(), server.endpoint())) << refused.to_string();
  EXPECT_TRUE(contains(refused.message(), "wants a client certificate")) << refused.to_string();
  EXPECT_TRUE(eventually([&] { return server.stats().sessions == 0; }));
  EXPECT_EQ(server.stats().live_buffers, 0u);
}

TEST(MutualTls, AClientWithACertificateOfTheCaIsServed) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer server(tls_server_options(ca, /*require_client_cert=*/true));
  Status served = use_server(server.endpoint(), RemoteOptions{.tls = ca.issue("client", {"client"})});
  EXPECT_TRUE(served.ok()) << served.to_string();
}

TEST(MutualTls, AClientWithACertificateOfAnotherCaIsRefused) {
  log::set_level(log::Level::error);
  TestCa ca, stranger("another CA");
  InProcessServer server(tls_server_options(ca, /*require_client_cert=*/true));
  TlsOptions mine = stranger.issue("client", {"client"});
  mine.ca_file = ca.ca_file();  // it trusts the server, but the server does not trust it
  Status refused = use_server(server.endpoint(), RemoteOptions{.tls = mine});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(server.stats().live_buffers, 0u);
}

// ---- copies between TLS servers -------------------------------------------------

TEST(TlsPeerCopy, ServersOfOneCaCopyToEachOtherOverTls) {
  log::set_level(log::Level::error);
  TestCa ca;
  // Each server checks the other's certificate against the CA and presents its own.
  InProcessServer a(options_of(two_cpus(), {}, ca.issue("a", {"127.0.0.1"})));
  InProcessServer b(options_of(two_cpus(), {}, ca.issue("b", {"127.0.0.1"})));
  // Servers with a CA file ask their clients for certificates too.
  const RemoteOptions client{.tls = ca.issue("client", {"client"})};
  auto src_device = remote_device(a.endpoint(), 0, client);
  auto dst_device = remote_device(b.endpoint(), 1, client);
  auto src = src_device->allocate(65536);
  auto dst = dst_device->allocate(65536);
  ASSERT_TRUE(src.ok() && dst.ok()) << src.status().to_string() << dst.status().to_string();
  Tensor s = tensor_in(*src.value()), d = tensor_in(*dst.value());
  const std::vector<float> values = random_floats(16384, 9);
  ASSERT_TRUE(src.value()->set(s, values.data(), 0, 65536).ok());
  const ConnectionStats before = connection_stats(a.endpoint());
  Status copied = dst.value()->copy(s, d);
  ASSERT_TRUE(copied.ok()) << copied.to_string();
  EXPECT_LT(connection_stats(a.endpoint()).bytes_received - before.bytes_received, 1024u);  // not via the client
  std::vector<float> got(16384);
  ASSERT_TRUE(dst.value()->get(d, got.data(), 0, 65536).ok());
  EXPECT_EQ(got, values);
}

TEST(TlsPeerCopy, AServerWithoutACaFileCannotCheckItsPeersAndSaysSo) {
  log::set_level(log::Level::error);
  TestCa ca;
  InProcessServer a(tls_server_options(ca));  // no CA file: it cannot check b
  InProcessServer b(tls_server_options(ca));
  auto src_device = remote_device(a.endpoint(), 0, trusting(ca));
  auto dst_device = remote_device(b.endpoint(), 0, trusting(ca));
  auto src = src_device->allocate(65536);
  auto dst = dst_device->allocate(65536);
  ASSERT_TRUE(src.ok() && dst.ok());
  Tensor s = tensor_in(*src.value()), d = tensor_in(*dst.value());
  Status copied = dst.value()->copy(s, d);
  ASSERT_FALSE(copied.ok());
  EXPECT_TRUE(contains(copied.message(), "--tls-ca")) << copied.to_string();
}

// ---- what an onlooker sees ------------------------------------------------------

// The same distinctive tensor sent through a relay that records the
// client's bytes: readable on a plain link (so the check can fail), absent
// from a TLS one.
TEST(TlsOnTheWire, AnOnlookerCannotFindTheTensorsBytes) {
  log::set_level(log::Level::error);
  std::vector<float> values(16384);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977) * 0.5f + 1.0f;
  const std::string marker(reinterpret_cast<const char*>(values.data()) + 4000, 256);

  InProcessServer plain(two_cpus());
  RecordingRelay plain_relay(plain.server().port());
  auto plain_devices = connect_devices(plain_relay.endpoint(), RemoteOptions{.tls = TlsOptions{}});
  ASSERT_TRUE(plain_devices.ok()) << plain_devices.status().to_string();
  ASSERT_TRUE(round_trip(*plain_devices.value()[0], values).ok());
  EXPECT_TRUE(contains(plain_relay.seen(), marker));

  TestCa ca;
  InProcessServer server(tls_server_options(ca));
  RecordingRelay relay(server.server().port());
  auto devices = connect_devices(relay.endpoint(), trusting(ca));
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  auto got = round_trip(*devices.value()[0], values);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), values);
  EXPECT_GT(relay.seen().size(), values.size() * 4);
  EXPECT_FALSE(contains(relay.seen(), marker));
}

// ---- bad files ------------------------------------------------------------------

StatusOr<std::unique_ptr<Server>> start_with_tls(const TlsOptions& tls) {
  ServerOptions options = options_of(two_cpus(), {}, tls);
  options.port = 0;
  return Server::start(std::move(options));
}

TEST(TlsServerStart, AMissingCertificateFileIsAnErrorNamingIt) {
  auto server = start_with_tls({.cert_file = "/no/such/cert.pem", .key_file = "/no/such/key.pem"});
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), "/no/such/cert.pem")) << server.status().to_string();
}

TEST(TlsServerStart, AKeyThatIsNotTheCertificatesIsAnError) {
  TestCa ca;
  TlsOptions a = ca.issue("a", {"127.0.0.1"}), b = ca.issue("b", {"127.0.0.1"});
  auto server = start_with_tls({.cert_file = a.cert_file, .key_file = b.key_file});
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), "does not belong to the certificate")) << server.status().to_string();
}

TEST(TlsServerStart, ACertificateFileThatIsNotPemIsAnError) {
  TempFile junk("not a certificate\n");
  auto server = start_with_tls({.cert_file = junk.path, .key_file = junk.path});
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), junk.path)) << server.status().to_string();
}

TEST(TlsServerStart, ACaFileWithoutACertificateIsAnError) {
  TestCa ca;
  auto server = start_with_tls({.ca_file = ca.ca_file()});
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), "--tls-cert")) << server.status().to_string();
}

}  // namespace
}  // namespace tensorpc::test
