// ServerProcess (the demo's and the tests' tensorpc-server child): ready only
// when the server itself listens on its port. Another process's listener on
// that port neither passes for the server nor hides why the server stopped.
#include "server_process.h"

#include <gtest/gtest.h>

#include <chrono>

#include "rpc/transport/socket.h"
#include "test_util.h"

// TENSORPC_SERVER_BINARY: the path of tensorpc-server, from tests/CMakeLists.txt.
namespace tensorpc::tools {
namespace {

using namespace std::chrono_literals;
using test::contains;

TEST(ServerProcess, AnotherListenerOnThePortIsNotTakenForTheServer) {
  auto other = rpc::Socket::listen("127.0.0.1", 0);
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  const uint16_t port = other.value().local_port();

  // A server that stops at once (its key file is missing): the open port
  // is not it.
  auto stopped =
      ServerProcess::start_on(TENSORPC_SERVER_BINARY, {"--key-file", "/nonexistent/tensorpc.key"}, port, 10s);
  ASSERT_FALSE(stopped.ok()) << "another process's port passed for the server";
  EXPECT_TRUE(contains(stopped.status().message(), "exited with status 2")) << stopped.status().message();

  // A server that cannot bind the port says so.
  auto refused = ServerProcess::start_on(TENSORPC_SERVER_BINARY, {"--device", "cpu:1"}, port, 10s);
  ASSERT_FALSE(refused.ok()) << "another process's port passed for the server";
  EXPECT_TRUE(contains(refused.status().message(), "Address already in use")) << refused.status().message();
}

TEST(ServerProcess, AServerOnAPortOfItsOwnIsReadyAndStops) {
  auto server = ServerProcess::start(TENSORPC_SERVER_BINARY, {"--device", "cpu:1"}, 10s);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  EXPECT_TRUE(contains(server.value()->output(), "listening on " + server.value()->endpoint()))
      << server.value()->output();
  EXPECT_TRUE(rpc::Socket::connect("127.0.0.1", server.value()->port()).ok());
  EXPECT_EQ(server.value()->stop(), 0);
  EXPECT_EQ(server.value()->stop(), -1);
}

}  // namespace
}  // namespace tensorpc::tools
