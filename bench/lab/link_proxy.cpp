// LinkProxy (link_proxy.h): accept loop, and per connection and direction a
// reader that stamps chunks with their arrival time across the link and a
// writer that delivers them at that time.
#include "lab/link_proxy.h"

#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "rpc/transport/socket.h"

namespace tensorpc::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kChunk = 64 << 10;       // read at most this much at once
constexpr size_t kMaxInFlight = 4 << 20;  // bytes a direction holds before it stops reading

// The proxy's own thread wake-ups must not count as link time, or a round
// trip over it costs more than twice the delay (on a virtual machine, by
// 100–200 µs a hop). So a chunk's time is the kernel's receive timestamp,
// not when the reader woke; the writer sleeps with a 1 µs timer slack (the
// default is 50 µs) to just before the chunk is due and spins the rest.
constexpr auto kSpinBeforeDue = std::chrono::microseconds(40);

// The kernel's receive time of the bytes recvmsg() returned, on the steady
// clock (the timestamp is wall-clock time): now where it gave none.
Clock::time_point received_at(const msghdr& msg) {
  const Clock::time_point now = Clock::now();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
    timespec stamp{};
    std::memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
    timespec wall{};
    clock_gettime(CLOCK_REALTIME, &wall);
    const auto ago =
        std::chrono::seconds(wall.tv_sec - stamp.tv_sec) + std::chrono::nanoseconds(wall.tv_nsec - stamp.tv_nsec);
    // A clock step could make it nonsense: trust it only within a second.
    if (ago >= Clock::duration::zero() && ago < std::chrono::seconds(1)) {
      return now - std::chrono::duration_cast<Clock::duration>(ago);
    }
  }
  return now;
}

// Sleeps to `due` on a tight timer, spinning its last microseconds.
void wait_until(Clock::time_point due) {
  if (Clock::now() + kSpinBeforeDue < due) std::this_thread::sleep_until(due - kSpinBeforeDue);
  while (Clock::now() < due) {
  }
}

// Splits "12.5ms" into 12.5 and "ms"; false when there is no number.
bool split_number(std::string_view text, double* value, std::string_view* unit) {
  const std::string s(text);
  size_t used = 0;
  try {
    *value = std::stod(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  *unit = text.substr(used);
  return std::isfinite(*value) && *value >= 0;
}

// One direction of one connection: bytes read from `from` arrive at `to`
// one delay after the link finished sending them.
class Direction {
 public:
  Direction(int from, int to, const LinkShape& shape) : from_(from), to_(to), shape_(shape) {}
  ~Direction() { join(); }

  void start() {
    reader_ = std::thread([this] {
      read_loop();
      ++loops_done_;
    });
    writer_ = std::thread([this] {
      write_loop();
      ++loops_done_;
    });
  }
  // Both loops have returned: join() will not block.
  bool finished() const { return loops_done_ == 2; }
  void join() {
    if (reader_.joinable()) reader_.join();
    if (writer_.joinable()) writer_.join();
  }

 private:
  struct Chunk {
    std::vector<uint8_t> bytes;  // empty: the sender closed its side
    Clock::time_point arrival;
  };

  void read_loop() {
    std::vector<uint8_t> buf(kChunk);
    const int on = 1;
    ::setsockopt(from_, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);  // without it, wake-up time counts
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
    Clock::time_point line_free = Clock::now();  // when the link has sent everything queued
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        space_.wait(lock, [&] { return in_flight_ < kMaxInFlight || failed_; });
        if (failed_) break;
      }
      iovec iov{buf.data(), buf.size()};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = ::recvmsg(from_, &msg, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      const Clock::time_point now = received_at(msg);
      line_free = std::max(now, line_free);
      if (shape_.bits_per_second > 0) {
        line_free += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(static_cast<double>(n) * 8 / shape_.bits_per_second));
      }
      push({std::vector<uint8_t>(buf.begin(), buf.begin() + n), line_free + shape_.one_way_delay});
    }
    push({{}, Clock::now()});
  }

  void write_loop() {
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // this thread's sleeps end within a microsecond
    for (;;) {
      Chunk c;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return !queue_.empty(); });
        c = std::move(queue_.front());
        queue_.pop_front();
      }
      if (c.bytes.empty()) {
        ::shutdown(to_, SHUT_WR);  // pass the sender's end of stream on
        return;
      }
      wait_until(c.arrival);
      if (!send_all(c.bytes)) {
        // The receiver is gone: stop reading too, so both ends see the close.
        ::shutdown(from_, SHUT_RDWR);
        std::lock_guard<std::mutex> lock(mu_);
        failed_ = true;
        space_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ -= c.bytes.size();
      space_.notify_all();
    }
  }

  void push(Chunk c) {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ += c.bytes.size();
    queue_.push_back(std::move(c));
    ready_.notify_one();
  }

  bool send_all(const std::vector<uint8_t>& bytes) {
    for (size_t sent = 0; sent < bytes.size();) {
      const ssize_t n = ::send(to_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  const int from_, to_;
  const LinkShape shape_;
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<Chunk> queue_;
  size_t in_flight_ = 0;
  bool failed_ = false;
  std::atomic<int> loops_done_{0};
  std::thread reader_, writer_;
};

// A forwarded connection: the accepted socket, the one to the target, and
// the two directions between them.
struct Forward {
  rpc::Socket client, target;
  std::unique_ptr<Direction> up, down;
};

}  // namespace

class LinkProxy::Impl {
 public:
  Impl(rpc::Socket listener, std::string host, uint16_t port, LinkShape shape)
      : listener_(std::move(listener)), host_(std::move(host)), port_(port), shape_(shape) {
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~Impl() { stop(); }

  uint16_t port() const { return listener_.local_port(); }
  uint64_t connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return accepted_;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    listener_.shutdown();
    if (accept_thread_.joinable()) accept_thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (Forward& f : forwards_) {
      f.client.shutdown();
      f.target.shutdown();
    }
    for (Forward& f : forwards_) {
      f.up->join();
      f.down->join();
    }
    forwards_.clear();
  }

 private:
  void accept_loop() {
    for (;;) {
      auto client = listener_.accept();
      if (!client.ok()) return;  // stop() shut the listener down
      auto target = rpc::Socket::connect(host_, port_);
      if (!target.ok()) continue;  // the client sees its connection close
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      ++accepted_;
      // Connections both of whose ends closed are joined and dropped here,
      // so a long-lived proxy does not pile them up.
      forwards_.remove_if([](const Forward& f) { return f.up->finished() && f.down->finished(); });
      Forward& f = forwards_.emplace_back();
      f.client = std::move(client).value();
      f.target = std::move(target).value();
      f.up = std::make_unique<Direction>(f.client.fd(), f.target.fd(), shape_);
      f.down = std::make_unique<Direction>(f.target.fd(), f.client.fd(), shape_);
      f.up->start();
      f.down->start();
    }
  }

  rpc::Socket listener_;
  const std::string host_;
  const uint16_t port_;
  const LinkShape shape_;
  mutable std::mutex mu_;
  bool stopped_ = false;
  uint64_t accepted_ = 0;
  std::list<Forward> forwards_;  // a list: Directions keep the sockets' descriptors
  std::thread accept_thread_;
};

std::string LinkShape::to_string() const {
  char s[64];
  const double ms = std::chrono::duration<double, std::milli>(one_way_delay).count();
  if (bits_per_second <= 0) {
    std::snprintf(s, sizeof s, "%gms,inf", ms);
  } else if (bits_per_second >= 1e9) {
    std::snprintf(s, sizeof s, "%gms,%ggbit", ms, bits_per_second / 1e9);
  } else {
    std::snprintf(s, sizeof s, "%gms,%gmbit", ms, bits_per_second / 1e6);
  }
  return s;
}

StatusOr<LinkShape> parse_link(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("--link '" + std::string(text) + "': " + why + " (expected DELAY,RATE such as 1ms,1gbit)");
  };
  const size_t comma = text.find(',');
  if (comma == std::string_view::npos) return bad("no comma");
  LinkShape shape;
  double delay = 0;
  std::string_view unit;
  if (!split_number(text.substr(0, comma), &delay, &unit)) return bad("the delay is not a number ≥ 0");
  double per_second = 0;
  if (unit == "ns")
    per_second = 1e9;
  else if (unit == "us")
    per_second = 1e6;
  else if (unit == "ms")
    per_second = 1e3;
  else if (unit == "s")
    per_second = 1;
  else
    return bad("the delay's unit is not one of ns, us, ms, s");
  shape.one_way_delay = std::chrono::nanoseconds(static_cast<int64_t>(std::llround(delay / per_second * 1e9)));

  const std::string_view rate = text.substr(comma + 1);
  if (rate == "inf") return shape;
  double value = 0;
  if (!split_number(rate, &value, &unit) || value <= 0) return bad("the rate is not a positive number or inf");
  double scale = 0;
  if (unit == "bit")
    scale = 1;
  else if (unit == "kbit")
    scale = 1e3;
  else if (unit == "mbit")
    scale = 1e6;
  else if (unit == "gbit")
    scale = 1e9;
  else
    return bad("the rate's unit is not one of bit, kbit, mbit, gbit");
  shape.bits_per_second = value * scale;
  return shape;
}

StatusOr<std::unique_ptr<LinkProxy>> LinkProxy::start(const std::string& target_host, uint16_t target_port,
                                                      const LinkShape& shape) {
  auto listener = rpc::Socket::listen("127.0.0.1", 0);
  if (!listener.ok()) return listener.status().with_context("link proxy");
  return std::unique_ptr<LinkProxy>(
      new LinkProxy(std::make_unique<Impl>(std::move(listener).value(), target_host, target_port, shape)));
}

LinkProxy::LinkProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LinkProxy::~LinkProxy() { stop(); }
uint16_t LinkProxy::port() const { return impl_->port(); }
uint64_t LinkProxy::connections() const { return impl_->connections(); }
void LinkProxy::stop() { impl_->stop(); }

}  // namespace tensorpc::tools
