// Client deadlines (RemoteOptions::reply_timeout, `--timeout`): a server
// that accepts and never answers, and a link that stops forwarding in the
// middle of a job, fail the waiting call within the timeout with an error
// naming the endpoint; a long computation is not cut off, because the
// server sends keep-alives while it works.
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/log.h"
#include "remote_test_util.h"
#include "rpc/transport/socket.h"
#include "rpc_test_util.h"
#include "tensorpc/model.h"

namespace tensorpc::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr milliseconds kTimeout{1000};

// A listener that accepts connections and never says a word.
class DeafServer {
 public:
  DeafServer() {
    auto l = rpc::Socket::listen("127.0.0.1", 0);
    if (!l.ok()) throw std::runtime_error(l.status().to_string());
    listener_ = std::move(l).value();
    thread_ = std::thread([this] {
      for (;;) {
        auto c = listener_.accept();
        if (!c.ok() || stop_) return;
        held_.push_back(std::move(c).value());
      }
    });
  }
  ~DeafServer() {
    stop_ = true;
    listener_.shutdown();
    thread_.join();
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(listener_.local_port()); }

 private:
  rpc::Socket listener_;
  std::vector<rpc::Socket> held_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Forwards each connection to `target` until freeze(): then it stops
// reading either side and sends nothing, without closing (a link that went
// silent: no FIN, no reset).
class FreezingProxy {
 public:
  explicit FreezingProxy(uint16_t target) : target_(target) {
    auto l = rpc::Socket::listen("127.0.0.1", 0);
    if (!l.ok()) throw std::runtime_error(l.status().to_string());
    listener_ = std::move(l).value();
    accept_ = std::thread([this] {
      for (;;) {
        auto client = listener_.accept();
        if (!client.ok() || done_) return;
        auto server = rpc::Socket::connect("127.0.0.1", target_);
        if (!server.ok()) return;
        auto link = std::make_unique<Link>();
        link->client = std::move(client).value();
        link->server = std::move(server).value();
        Link* l = link.get();
        l->up = std::thread([this, l] { pump(l->client.fd(), l->server.fd()); });
        l->down = std::thread([this, l] { pump(l->server.fd(), l->client.fd()); });
        links_.push_back(std::move(link));
      }
    });
  }
  ~FreezingProxy() {
    done_ = true;
    listener_.shutdown();
    accept_.join();
    for (auto& l : links_) {
      l->up.join();
      l->down.join();
    }
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(listener_.local_port()); }
  void freeze() { frozen_ = true; }

 private:
  struct Link {
    rpc::Socket client, server;
    std::thread up, down;
  };
  void pump(int from, int to) {
    char buf[1 << 16];
    while (!done_) {
      if (frozen_) {
        std::this_thread::sleep_for(milliseconds(10));
        continue;
      }
      pollfd p{from, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      const ssize_t n = ::recv(from, buf, sizeof buf, 0);
      if (n <= 0) {
        ::shutdown(to, SHUT_WR);
        return;
      }
      for (ssize_t sent = 0; sent < n;) {
        const ssize_t k = ::send(to, buf + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
        if (k <= 0) return;
        sent += k;
      }
    }
  }

  const uint16_t target_;
  rpc::Socket listener_;
  std::vector<std::unique_ptr<Link>> links_;  // the accept thread's until it ends
  std::atomic<bool> frozen_{false}, done_{false};
  std::thread accept_;
};

TEST(ClientDeadline, AServerThatAcceptsAndNeverAnswersFailsWithinTheTimeoutNamingIt) {
  DeafServer deaf;
  const auto start = Clock::now();
  const Status s = ping(deaf.endpoint(), RemoteOptions{.reply_timeout = kTimeout});
  const auto took = Clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_LT(took, kTimeout + seconds(2));
  EXPECT_NE(s.message().find(deaf.endpoint()), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("HELLO"), std::string::npos) << "what it waited for: " << s.to_string();
}

// out = x · w, run step after step through a proxy that goes silent after
// the third: the waiting call fails within the timeout, naming the proxy's
// endpoint, and the results read before stay right.
TEST(ClientDeadline, ALinkThatStopsForwardingMidJobFailsTheWaitingCallWithinTheTimeout) {
  log::set_level(log::Level::error);
  InProcessServer server;
  const uint16_t port = static_cast<uint16_t>(std::stoi(server.endpoint().substr(server.endpoint().rfind(':') + 1)));
  FreezingProxy proxy(port);
  auto device = remote_device(proxy.endpoint(), 0, RemoteOptions{.reply_timeout = kTimeout});
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {64, 8});
  Tensor* w = input(ctx, DType::f32, {64, 8});
  Tensor* out = ctx.mul_mat(w, x);
  Graph g = Graph::build({out});
  GraphAllocator alloc(*device);
  check(alloc.allocate(g), "allocate");
  check(write_from_f32(*w, random_floats(64 * 8, 1)), "w");
  auto stream = device->create_stream();
  ASSERT_TRUE(stream.ok());
  for (int step = 0; step < 5; ++step) {
    if (step == 3) proxy.freeze();
    const auto start = Clock::now();
    Status s = write_from_f32(*x, random_floats(64 * 8, 10 + step));
    if (s.ok()) s = stream.value()->compute_async(g);
    if (s.ok()) s = stream.value()->synchronize();
    if (s.ok()) s = read_as_f32(*out).status();
    if (step < 3) {
      ASSERT_TRUE(s.ok()) << "step " << step << ": " << s.to_string();
      continue;
    }
    ASSERT_FALSE(s.ok()) << "step " << step << " went through a frozen link";
    EXPECT_LT(Clock::now() - start, kTimeout + seconds(2));
    EXPECT_NE(s.message().find(proxy.endpoint()), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("timed out"), std::string::npos) << s.to_string();
    break;
  }
}

// Generation of the bundled model through a link that goes silent after
// five tokens: generate() fails within the timeout, naming the endpoint, and
// the pieces handed out before are the start of the text the model gives
// when nothing goes wrong.
TEST(ClientDeadline, AGenerationWhoseLinkGoesSilentFailsWithinTheTimeoutAndItsTextSoFarStands) {
  log::set_level(log::Level::error);
  InProcessServer server;
  const uint16_t port = static_cast<uint16_t>(std::stoi(server.endpoint().substr(server.endpoint().rfind(':') + 1)));
  FreezingProxy proxy(port);
  const auto open = [&](const std::string& endpoint) {
    ModelOptions o;
    o.path = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
    o.servers = {endpoint};
    o.use_local_cpu = false;
    o.remote.reply_timeout = kTimeout;
    o.recovery.enabled = false;  // the timeout's own error, not a wait for the link to come back
    auto model = Model::open(o);
    if (!model.ok()) throw std::runtime_error(model.status().to_string());
    return std::move(model).value();
  };
  GenerationOptions g;
  g.max_tokens = 48;
  g.sampling.temperature = 0;
  g.stop_at_end = false;
  const std::string prompt = "In the beginning God created";
  Model whole = open(server.endpoint());
  auto expected = whole.generate(prompt, g);
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();

  Model cut = open(proxy.endpoint());
  std::string so_far;
  int tokens = 0;
  Clock::time_point frozen_at;
  auto got = cut.generate(prompt, g, [&](std::string_view piece, int32_t) {
    so_far += piece;
    if (++tokens == 5) {
      proxy.freeze();
      frozen_at = Clock::now();
    }
    return true;
  });
  ASSERT_FALSE(got.ok()) << "a generation went through a silent link";
  EXPECT_LT(Clock::now() - frozen_at, kTimeout + seconds(3));
  EXPECT_NE(got.status().message().find(proxy.endpoint()), std::string::npos) << got.status().to_string();
  EXPECT_GE(tokens, 5);
  EXPECT_EQ(expected.value().text.substr(0, so_far.size()), so_far) << "the text handed out before the error";
}

// One computation that takes several times the timeout: the SYNCHRONIZE
// that waits for it hears the server's keep-alives and is not cut off.
TEST(ClientDeadline, ALongComputationIsNotCutOffThanksToKeepAlives) {
  log::set_level(log::Level::error);
  InProcessServer server({std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1})});
  auto device = remote_device(server.endpoint(), 0, RemoteOptions{.reply_timeout = kTimeout});
  auto stream = device->create_stream();
  ASSERT_TRUE(stream.ok());
  // Chains of n products of 256 x 256 matrices, longer until one takes
  // three timeouts on this machine.
  const auto run_chain = [&](int n) -> StatusOr<Clock::duration> {
    Context ctx;
    Tensor* a = input(ctx, DType::f32, {256, 256});
    Tensor* w = input(ctx, DType::f32, {256, 256});
    Tensor* c = a;
    for (int i = 0; i < n; ++i) c = ctx.scale(ctx.mul_mat(w, c), 1.0f / 256);
    Graph g = Graph::build({c});
    GraphAllocator alloc(*device);
    TENSORPC_RETURN_IF_ERROR(alloc.allocate(g));
    TENSORPC_RETURN_IF_ERROR(write_from_f32(*a, random_floats(256 * 256, 1)));
    TENSORPC_RETURN_IF_ERROR(write_from_f32(*w, random_floats(256 * 256, 2)));
    const auto start = Clock::now();
    TENSORPC_RETURN_IF_ERROR(stream.value()->compute_async(g));
    TENSORPC_RETURN_IF_ERROR(stream.value()->synchronize());
    return Clock::now() - start;
  };
  Clock::duration longest{};
  for (int n = 16; n <= 16384 && longest < 3 * kTimeout; n *= 4) {
    auto took = run_chain(n);
    ASSERT_TRUE(took.ok()) << n << " products: " << took.status().to_string();
    longest = took.value();
  }
  EXPECT_GE(longest, 3 * kTimeout) << "the computation was too quick to show anything";
}

}  // namespace
}  // namespace tensorpc::test
