// Keys and TLS on the command line: tensorpc-server's --key-file (the key it
// then requires, the error for a file it cannot use), its warning when it
// listens beyond loopback without a key, its --tls-cert, --tls-key and
// --tls-ca (what it says at start, the errors for flags and files it cannot
// use), the client commands' --key-file and --tls-* flags, and `tensorpc
// certs`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "certs/certificate_authority.h"
#include "file_util.h"
#include "rpc/tls_test_util.h"
#include "server_process.h"
#include "tensorpc/devices.h"
#include "tensorpc/rpc_client.h"
#include "test_util.h"

#ifndef TENSORPC_SERVER_BINARY
#define TENSORPC_SERVER_BINARY "tensorpc-server"
#endif

namespace tensorpc::tools {
namespace {

using namespace std::chrono_literals;
using test::Capture;
using test::TempFile;
using test::TestCa;

using test::contains;

std::unique_ptr<ServerProcess> start_server(const std::vector<std::string>& args) {
  auto s = ServerProcess::start(TENSORPC_SERVER_BINARY, args, 10s);
  if (!s.ok()) throw std::runtime_error(s.status().to_string());
  return std::move(s).value();
}

// The server's output once it has printed `line` (it prints after it
// accepts), or all of it after a few seconds.
std::string output_after(const ServerProcess& server, const std::string& line) {
  for (int i = 0; i < 250 && !contains(server.output(), line); ++i) std::this_thread::sleep_for(20ms);
  return server.output();
}

TEST(ServerKeyFile, TheServerServesOnlyClientsThatHoldTheKeyInTheFile) {
  TempFile key("command-line secret\n");
  auto server = start_server({"--device", "cpu:1", "--key-file", key.path});
  const std::string out = output_after(*server, "key: ");
  EXPECT_TRUE(contains(out, "key: clients must prove the key in " + key.path)) << out;

  auto with_key = connect_devices(server->endpoint(), RemoteOptions{.key = "command-line secret"});
  ASSERT_TRUE(with_key.ok()) << with_key.status().to_string();
  EXPECT_EQ(with_key.value().size(), 1u);
  auto without = connect_devices(server->endpoint(), RemoteOptions{.key = ""});
  ASSERT_FALSE(without.ok());
  EXPECT_TRUE(contains(without.status().message(), "requires a key")) << without.status().to_string();

  // `tensorpc devices --key-file` reads the same file.
  auto options = remote_options(ClientFlags{.key_file = key.path});
  ASSERT_TRUE(options.ok()) << options.status().to_string();
  Capture listed, errors;
  EXPECT_EQ(list_devices_command({server->endpoint()}, listed.f, errors.f, options.value()), 0) << errors.text();
  EXPECT_TRUE(contains(listed.text(), server->endpoint() + "/cpu0")) << listed.text();
}

TEST(ServerKeyFile, AMissingOrEmptyKeyFileStopsTheServerNamingTheFile) {
  TempFile empty("");
  for (const std::string& path : {std::string("/nonexistent/dir/tensorpc.key"), empty.path}) {
    auto server = ServerProcess::start(TENSORPC_SERVER_BINARY, {"--key-file", path}, 10s);
    ASSERT_FALSE(server.ok()) << path;
    const std::string m = server.status().message();
    EXPECT_TRUE(contains(m, "exited with status 2")) << m;
    EXPECT_TRUE(contains(m, "--key-file")) << m;
    EXPECT_TRUE(contains(m, path)) << m;
  }
}

TEST(ServerKeyFile, ListeningBeyondLoopbackWithoutAKeyWarns) {
  auto open = start_server({"--device", "cpu:1", "-H", "0.0.0.0"});
  std::string out = output_after(*open, "WARNING");
  EXPECT_TRUE(contains(out, "WARNING: listening on 0.0.0.0, not a loopback address, without a key")) << out;
  EXPECT_TRUE(contains(out, "--key-file")) << out;
  open->stop();

  TempFile key("secret");
  auto keyed = start_server({"--device", "cpu:1", "-H", "0.0.0.0", "--key-file", key.path});
  out = output_after(*keyed, "key: ");
  EXPECT_TRUE(contains(out, "key: clients must prove the key")) << out;
  EXPECT_FALSE(contains(out, "WARNING")) << out;

  auto loopback = start_server({"--device", "cpu:1"});
  out = output_after(*loopback, "key: ");
  EXPECT_TRUE(contains(out, "key: none")) << out;
  EXPECT_FALSE(contains(out, "WARNING")) << out;
}

TEST(ClientKeyFile, AnUnusableKeyFileIsAnErrorNamingTheFlagAndTheFile) {
  auto options = remote_options(ClientFlags{.key_file = "/nonexistent/dir/tensorpc.key"});
  ASSERT_FALSE(options.ok());
  EXPECT_TRUE(contains(options.status().message(), "--key-file")) << options.status().to_string();
  EXPECT_TRUE(contains(options.status().message(), "/nonexistent/dir/tensorpc.key")) << options.status().to_string();
  // No flag: the key is left to TENSORPC_KEY_FILE.
  auto unset = remote_options(ClientFlags{});
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset.value().key.has_value());
}

TEST(ServerTls, ServesTlsClientsOfTheCommandLineAndSaysSo) {
  TestCa ca;
  const TlsOptions files = ca.issue("server", {"127.0.0.1"});
  auto server = ServerProcess::start(
      TENSORPC_SERVER_BINARY, {"--device", "cpu:1", "--tls-cert", files.cert_file, "--tls-key", files.key_file}, 10s);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string out = output_after(*server.value(), "tls: ");
  EXPECT_TRUE(contains(out, "tls: on (TLS 1.3)")) << out;

  ClientFlags flags;
  flags.tls_ca = ca.ca_file();
  auto options = remote_options(flags);
  ASSERT_TRUE(options.ok()) << options.status().to_string();
  Capture listed, errors;
  EXPECT_EQ(list_devices_command({server.value()->endpoint()}, listed.f, errors.f, options.value()), 0)
      << errors.text();
  EXPECT_TRUE(contains(listed.text(), server.value()->endpoint() + "/cpu0")) << listed.text();

  // Without --tls-ca the same command cannot list it.
  Capture plain_listed, plain_errors;
  EXPECT_EQ(list_devices_command({server.value()->endpoint()}, plain_listed.f, plain_errors.f,
                                 RemoteOptions{.tls = TlsOptions{}, .reply_timeout = 5s}),
            1);
  EXPECT_TRUE(contains(plain_errors.text(), server.value()->endpoint())) << plain_errors.text();
}

TEST(ServerTls, APlainServerSaysBytesTravelInTheClear) {
  auto server = ServerProcess::start(TENSORPC_SERVER_BINARY, {"--device", "cpu:1"}, 10s);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string out = output_after(*server.value(), "tls: ");
  EXPECT_TRUE(contains(out, "tls: none (bytes travel in the clear)")) << out;
}

TEST(ServerTls, ACertificateWithoutItsKeyIsAUsageError) {
  TestCa ca;
  const TlsOptions files = ca.issue("server", {"127.0.0.1"});
  auto server = ServerProcess::start(TENSORPC_SERVER_BINARY, {"--tls-cert", files.cert_file}, 10s);
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), "exited with status 2")) << server.status().message();
  EXPECT_TRUE(contains(server.status().message(), "--tls-key")) << server.status().message();
}

TEST(ServerTls, AnUnreadableCertificateStopsTheServerNamingTheFile) {
  TestCa ca;
  const TlsOptions files = ca.issue("server", {"127.0.0.1"});
  auto server = ServerProcess::start(TENSORPC_SERVER_BINARY,
                                     {"--tls-cert", "/nonexistent/cert.pem", "--tls-key", files.key_file}, 10s);
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), "/nonexistent/cert.pem")) << server.status().message();
}

TEST(ClientTlsFlags, ACertificateWithoutACaIsAnErrorNamingTheFlags) {
  ClientFlags flags;
  flags.tls_cert = "me.pem";
  flags.tls_key = "me.key";
  auto options = remote_options(flags);
  ASSERT_FALSE(options.ok());
  EXPECT_TRUE(contains(options.status().message(), "--tls-ca")) << options.status().to_string();
  // No TLS flag: left to the environment.
  auto unset = remote_options(ClientFlags{});
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset.value().tls.has_value());
}

TEST(Certs, MakeTheCaOnceAndKeepKeysToTheirOwner) {
  char tmpl[] = "/tmp/tensorpc-certs-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/cluster";  // made by ensure_ca
  auto ca = ensure_ca(dir);
  ASSERT_TRUE(ca.ok()) << ca.status().to_string();
  std::ifstream first(ca.value());
  const std::string before((std::istreambuf_iterator<char>(first)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(ensure_ca(dir).ok());
  std::ifstream second(ca.value());
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(second)), std::istreambuf_iterator<char>()), before);

  auto files = issue_certificate(dir, "gpu-box", {"10.0.0.5", "gpu-box"});
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  EXPECT_EQ(files.value().cert_file, dir + "/gpu-box.pem");
  for (const std::string& key : {dir + "/ca.key", files.value().key_file}) {
    const auto perms = std::filesystem::status(key).permissions();
    EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
              std::filesystem::perms::none)
        << key;
  }
  std::filesystem::remove_all(tmpl);
}

TEST(Certs, RefuseWhatCannotBeACertificate) {
  char tmpl[] = "/tmp/tensorpc-certs-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto no_ca = issue_certificate(dir, "server", {"127.0.0.1"});
  ASSERT_FALSE(no_ca.ok());
  EXPECT_TRUE(contains(no_ca.status().message(), dir + "/ca.pem")) << no_ca.status().to_string();
  ASSERT_TRUE(ensure_ca(dir).ok());
  auto bad_host = issue_certificate(dir, "server", {"not a host!"});
  ASSERT_FALSE(bad_host.ok());
  EXPECT_TRUE(contains(bad_host.status().message(), "neither an IP address nor a host name"))
      << bad_host.status().to_string();
  EXPECT_FALSE(issue_certificate(dir, "server", {}).ok());
  EXPECT_FALSE(issue_certificate(dir, "ca", {"127.0.0.1"}).ok());  // would overwrite the CA
  EXPECT_FALSE(issue_certificate(dir, "../x", {"127.0.0.1"}).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensorpc::tools
