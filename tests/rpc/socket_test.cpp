// Socket's read-ahead: a small receive takes what the peer already sent in
// one system call and keeps the rest for the next receives; readiness counts
// the kept bytes, which a poll of the descriptor cannot see; a large receive
// takes the kept bytes first and the rest straight from the kernel; a move
// carries the kept bytes along.
#include "rpc/transport/socket.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "rpc_test_util.h"

namespace tensorpc::test {
namespace {

using rpc::Socket;

// Both ends of one loopback connection.
struct Pair {
  Socket a, b;
};

Pair connected() {
  auto listener = Socket::listen("127.0.0.1", 0);
  EXPECT_TRUE(listener.ok()) << listener.status().to_string();
  auto a = Socket::connect("127.0.0.1", listener.value().local_port());
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  auto b = listener.value().accept();
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return {std::move(a).value(), std::move(b).value()};
}

// Whether the kernel holds bytes for this socket (what a poll sees).
bool kernel_readable(const Socket& s) {
  pollfd p{s.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// Waits until the kernel holds all `n` bytes sent to `s`, so that the next
// small receive takes them in one call.
void wait_for_bytes(const Socket& s, size_t n) {
  std::vector<uint8_t> peek(n);
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       std::chrono::steady_clock::now() < deadline;) {
    const ssize_t got = ::recv(s.fd(), peek.data(), n, MSG_PEEK | MSG_DONTWAIT);
    if (got >= 0 && static_cast<size_t>(got) == n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL() << "the " << n << " bytes never all arrived";
}

TEST(SocketReadAhead, FramesSentTogetherAreReadOneByOneAndTheKeptBytesCountAsReadable) {
  Pair p = connected();
  const std::vector<uint8_t> sent = random_bytes(3 * 24, 1);
  ASSERT_TRUE(p.a.send_all(sent.data(), sent.size()).ok());
  wait_for_bytes(p.b, sent.size());

  std::vector<uint8_t> got(sent.size());
  ASSERT_TRUE(p.b.recv_all(got.data(), 24).ok());
  // The other two frames came with the first: the kernel has nothing left,
  // yet the socket says there is more to read.
  EXPECT_FALSE(kernel_readable(p.b));
  EXPECT_TRUE(p.b.buffered());
  EXPECT_TRUE(p.b.readable_now());
  EXPECT_TRUE(p.b.wait_readable().ok());  // returns at once: the bytes are here
  ASSERT_TRUE(p.b.recv_all(got.data() + 24, 24).ok());
  ASSERT_TRUE(p.b.recv_all(got.data() + 48, 24).ok());
  EXPECT_EQ(got, sent);
  EXPECT_FALSE(p.b.buffered());
  EXPECT_FALSE(p.b.readable_now());
}

TEST(SocketReadAhead, ALargeReceiveTakesTheKeptBytesThenTheRestInOrder) {
  Pair p = connected();
  const std::vector<uint8_t> head = random_bytes(24, 3);
  const std::vector<uint8_t> body = random_bytes(1 << 20, 5);
  std::thread sender([&] {
    std::vector<uint8_t> all = head;
    all.insert(all.end(), body.begin(), body.end());
    EXPECT_TRUE(p.a.send_all(all.data(), all.size()).ok());
  });
  std::vector<uint8_t> got_head(head.size()), got_body(body.size());
  ASSERT_TRUE(p.b.recv_all(got_head.data(), got_head.size()).ok());
  ASSERT_TRUE(p.b.recv_all(got_body.data(), got_body.size()).ok());
  sender.join();
  EXPECT_EQ(got_head, head);
  EXPECT_EQ(got_body, body);
  EXPECT_FALSE(p.b.buffered());
}

TEST(SocketReadAhead, SmallReceivesAcrossManySendsWithATimeoutKeepEveryByteInOrder) {
  Pair p = connected();
  p.b.set_io_timeout(std::chrono::seconds(5));  // receives poll between non-blocking reads
  // Sizes that straddle the read-ahead's length and each other's edges.
  const std::vector<size_t> sizes = {1, 23, 24, 100, 5000, 16383, 16384, 16385, 40000, 3, 70000, 8};
  const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
  const std::vector<uint8_t> sent = random_bytes(total, 9);
  std::thread sender([&] {
    // In pieces that do not match the receives, some after a pause.
    for (size_t at = 0, piece = 0; at < total; ++piece) {
      const size_t n = std::min(total - at, size_t{777} * (piece % 5 + 1) + piece);
      EXPECT_TRUE(p.a.send_all(sent.data() + at, n).ok());
      at += n;
      if (piece % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<uint8_t> got(total);
  size_t at = 0;
  for (size_t n : sizes) {
    ASSERT_TRUE(p.b.recv_all(got.data() + at, n).ok()) << "receive of " << n << " at " << at;
    at += n;
  }
  sender.join();
  EXPECT_EQ(got, sent);
}

TEST(SocketReadAhead, AMovedSocketKeepsItsBytesAndTheEndIsSeenAfterThem) {
  Pair p = connected();
  const std::vector<uint8_t> sent = random_bytes(48, 11);
  ASSERT_TRUE(p.a.send_all(sent.data(), sent.size()).ok());
  p.a.close();
  wait_for_bytes(p.b, sent.size());
  std::vector<uint8_t> got(sent.size());
  ASSERT_TRUE(p.b.recv_all(got.data(), 8).ok());
  Socket moved = std::move(p.b);
  EXPECT_TRUE(moved.buffered());
  Socket assigned;
  assigned = std::move(moved);
  ASSERT_TRUE(assigned.recv_all(got.data() + 8, 40).ok());
  EXPECT_EQ(got, sent);
  uint8_t more = 0;
  const Status end = assigned.recv_all(&more, 1);
  EXPECT_FALSE(end.ok());
  EXPECT_NE(end.message().find("connection closed by peer"), std::string::npos) << end.to_string();
}

}  // namespace
}  // namespace tensorpc::test
