// LinkProxy: an emulated link adds its one-way delay in each direction and
// paces bulk bytes to its rate (within generous bounds: the machine may be
// busy), passes bytes on unchanged, and parse_link reads "1ms,1gbit".
#include "lab/link_proxy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "rpc/transport/socket.h"

namespace tensorpc::tools {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A server of one connection: for each 8-byte length it reads that many
// bytes and answers with their last one (one byte), so a 1-byte message
// is a ping and a long one a bulk transfer with an acknowledgement.
class AckServer {
 public:
  AckServer() : listener_(rpc::Socket::listen("127.0.0.1", 0).value()) {
    thread_ = std::thread([this] {
      auto s = listener_.accept();
      if (!s.ok()) return;
      conn_ = std::move(s).value();
      std::vector<uint8_t> buf;
      uint64_t size = 0;
      while (conn_.recv_all(&size, sizeof size).ok()) {
        buf.resize(size);
        if (!conn_.recv_all(buf.data(), size).ok()) break;
        if (!conn_.send_all(&buf.back(), 1).ok()) break;
      }
    });
  }
  ~AckServer() {
    listener_.shutdown();
    conn_.shutdown();
    thread_.join();
  }
  uint16_t port() const { return listener_.local_port(); }

 private:
  rpc::Socket listener_, conn_;
  std::thread thread_;
};

// Sends `size` (≥ 1) bytes, the last one `last`, and returns the acknowledging byte.
uint8_t exchange(rpc::Socket& s, uint64_t size, uint8_t last) {
  std::vector<uint8_t> data(size - 1, 0x5a);
  data.push_back(last);
  EXPECT_TRUE(s.send_all(&size, sizeof size).ok());
  EXPECT_TRUE(s.send_all(data.data(), size).ok());
  uint8_t ack = 0;
  EXPECT_TRUE(s.recv_all(&ack, 1).ok());
  return ack;
}

TEST(LinkProxy, AddsTheOneWayDelayInEachDirection) {
  AckServer server;
  auto proxy = LinkProxy::start("127.0.0.1", server.port(), parse_link("10ms,inf").value()).value();
  auto s = rpc::Socket::connect("127.0.0.1", proxy->port()).value();
  EXPECT_EQ(exchange(s, 1, 7), 7);  // connected, warm
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    EXPECT_EQ(exchange(s, 1, static_cast<uint8_t>(i)), i);
    best = std::min(best, seconds_since(start));
  }
  // Two crossings of 10 ms each; the request's two sends may cross separately.
  EXPECT_GE(best, 0.020);
  EXPECT_LT(best, 0.020 + 0.050);
}

TEST(LinkProxy, PacesBulkBytesToTheRate) {
  AckServer server;
  auto proxy = LinkProxy::start("127.0.0.1", server.port(), parse_link("1ms,100mbit").value()).value();
  auto s = rpc::Socket::connect("127.0.0.1", proxy->port()).value();
  EXPECT_EQ(exchange(s, 1, 1), 1);
  const uint64_t size = uint64_t{2} << 20;  // 16.8 Mbit: 168 ms at 100 Mbit/s
  const auto start = Clock::now();
  EXPECT_EQ(exchange(s, size, 42), 42);
  const double seconds = seconds_since(start);
  const double expected = static_cast<double>(size) * 8 / 100e6 + 0.002;
  EXPECT_GE(seconds, 0.9 * expected);
  EXPECT_LT(seconds, 4 * expected);
}

TEST(LinkProxy, StopClosesForwardedConnections) {
  AckServer server;
  auto proxy = LinkProxy::start("127.0.0.1", server.port(), parse_link("0ms,inf").value()).value();
  auto s = rpc::Socket::connect("127.0.0.1", proxy->port()).value();
  EXPECT_EQ(exchange(s, 1000, 3), 3);
  proxy->stop();
  uint8_t byte = 0;
  EXPECT_FALSE(s.recv_all(&byte, 1).ok());
}

TEST(LinkProxy, CountsTheConnectionsItForwards) {
  AckServer first;
  auto proxy = LinkProxy::start("127.0.0.1", first.port(), parse_link("0ms,inf").value()).value();
  {
    auto s = rpc::Socket::connect("127.0.0.1", proxy->port()).value();
    EXPECT_EQ(exchange(s, 5, 9), 9);
  }
  EXPECT_EQ(proxy->connections(), 1u);
}

TEST(ParseLink, ReadsDelayAndRate) {
  const LinkShape a = parse_link("1ms,1gbit").value();
  EXPECT_EQ(a.one_way_delay, std::chrono::milliseconds(1));
  EXPECT_DOUBLE_EQ(a.bits_per_second, 1e9);
  EXPECT_EQ(a.to_string(), "1ms,1gbit");
  const LinkShape b = parse_link("250us,100mbit").value();
  EXPECT_EQ(b.one_way_delay, std::chrono::microseconds(250));
  EXPECT_DOUBLE_EQ(b.bits_per_second, 100e6);
  EXPECT_EQ(parse_link("0s,inf").value().bits_per_second, 0);
}

TEST(ParseLink, RejectsWhatIsNotDelayAndRate) {
  for (const char* bad : {"", "1ms", "1,1gbit", "1ms,1", "-1ms,1gbit", "1ms,0gbit", "xms,1gbit", "1ms,1gbps"}) {
    auto r = parse_link(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_NE(r.status().message().find("--link"), std::string::npos) << r.status().to_string();
  }
}

}  // namespace
}  // namespace tensorpc::tools
