// AwakeCores: the CPU latency request of --awake-cores. The kernel's file is
// root's and not on every machine, so these give the request a file of their
// own: what it writes there, that it holds the file open exactly as long as
// it lives, and the errors of a file that cannot take a request. The
// server's flag is tested against whatever this machine allows.
#include "awake_cores.h"

#include <filesystem>
#include <optional>

#include "file_util.h"
#include "rpc/remote_test_util.h"
#include "server_process.h"
#include "test_util.h"

namespace tensorpc::tools {
namespace {

using test::contains;

// How many of this process's descriptors are open on `path`.
size_t open_on(const std::string& path) {
  const std::filesystem::path target = std::filesystem::canonical(path);
  size_t n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    n += std::filesystem::read_symlink(fd.path(), ec) == target ? 1 : 0;
  }
  return n;
}

TEST(AwakeCores, AsksForZeroMicrosecondsAndHoldsTheFileOpenWhileItLives) {
  const test::TempFile file("");
  {
    auto held = AwakeCores::request(file.path);
    ASSERT_TRUE(held.ok()) << held.status().to_string();
    // The kernel's format: a 32-bit binary number of microseconds.
    EXPECT_EQ(test::read_file(file.path), std::string(4, '\0'));
    EXPECT_EQ(open_on(file.path), 1u);
    // Moved, the request is still one open file, closed once.
    std::optional<AwakeCores> moved;
    moved.emplace(std::move(held).value());
    AwakeCores again = std::move(*moved);
    moved.reset();
    EXPECT_EQ(open_on(file.path), 1u);
  }
  EXPECT_EQ(open_on(file.path), 0u);
}

TEST(AwakeCores, AFlagLeftOffRequestsNothing) {
  const test::TempFile file("");
  {
    auto none = AwakeCores::request_if("");
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none.value().has_value());
    auto held = AwakeCores::request_if(file.path);
    ASSERT_TRUE(held.ok()) << held.status().to_string();
    EXPECT_TRUE(held.value().has_value());
    EXPECT_EQ(open_on(file.path), 1u);
    EXPECT_FALSE(AwakeCores::request_if("/nonexistent-tensorpc-dir/x").ok());
  }
  EXPECT_EQ(open_on(file.path), 0u);
}

TEST(AwakeCores, AFileThatCannotTakeTheRequestIsAnErrorNamingIt) {
  const std::string missing = "/nonexistent-tensorpc-dir/cpu_dma_latency";
  auto absent = AwakeCores::request(missing);
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::io_error);
  EXPECT_TRUE(contains(absent.status().message(), "cannot keep idle cores awake: " + missing))
      << absent.status().message();
  EXPECT_TRUE(contains(absent.status().message(), "takes no CPU latency requests")) << absent.status().message();

  const std::string directory = std::filesystem::temp_directory_path().string();
  auto not_a_file = AwakeCores::request(directory);
  ASSERT_FALSE(not_a_file.ok());
  EXPECT_TRUE(contains(not_a_file.status().message(), directory)) << not_a_file.status().message();
  EXPECT_EQ(open_on(directory), 0u);
}

// Where this process can make the request, so can the server, which then
// serves; where it cannot, the server says why and exits 2 without serving.
TEST(AwakeCores, TheServerServesWithTheRequestHeldOrSaysWhyItCannot) {
  const auto here = AwakeCores::request();
  auto server = ServerProcess::start(TENSORPC_SERVER_BINARY, {"--awake-cores"}, std::chrono::seconds(10));
  if (here.ok()) {
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    EXPECT_GT(server.value()->port(), 0);
    EXPECT_TRUE(test::eventually([&] { return contains(server.value()->output(), "idle cores: kept awake"); }))
        << server.value()->output();
    EXPECT_EQ(server.value()->stop(), 0);
  } else {
    ASSERT_FALSE(server.ok()) << "the server started though " << here.status().message();
    EXPECT_TRUE(contains(server.status().message(), "exited with status 2")) << server.status().message();
    EXPECT_TRUE(contains(server.status().message(), here.status().message())) << server.status().message();
  }
}

}  // namespace
}  // namespace tensorpc::tools
