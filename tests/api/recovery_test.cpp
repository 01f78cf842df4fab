// Recovery from a lost server (RecoveryOptions, src/api/cluster_recovery.h)
// end to end: the bundled model over three tensorpc-server processes, the
// middle one killed with SIGKILL in the middle of a generation. Restarted on
// its port, or not (its layers re-placed on the other two, or on a
// standby), the text equals the uninterrupted run's, greedy and sampled
// with a seed; with recovery off the generation ends with an error naming
// the server; a server frozen with SIGSTOP past the timeout is treated as
// lost; and when nothing can take a server's place, generate() fails as
// unavailable and the next one, the server back, goes on.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "server_test_util.h"
#include "tensorpc/model.h"
#include "test_util.h"

namespace tensorpc {
namespace {

using test::contains;
using tools::ServerProcess;

const std::string kModelPath = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";
const std::string kPrompt = "And God said";
constexpr int kTokens = 300;
// The token whose callback kills the middle server: a different one each run, said on failure.
const int kKillAt = 20 + static_cast<int>(std::random_device{}() % 260);

std::unique_ptr<ServerProcess> restart_on(uint16_t port) {
  auto p = ServerProcess::start_on(TENSORPC_SERVER_BINARY, {"--device", "cpu:1"}, port, std::chrono::seconds(30));
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : nullptr;
}

GenerationOptions sampled(int max_tokens) {
  GenerationOptions g = test::greedy(max_tokens);
  g.sampling.temperature = 0.9f;
  g.sampling.seed = 1234;
  return g;
}

class Recovery : public ::testing::Test {
 protected:
  void SetUp() override {
    std::printf("the middle server is lost at token %d\n", kKillAt);
    for (auto& s : servers_) {
      s = test::start_cpu_server();
      ASSERT_TRUE(s);
    }
  }
  void TearDown() override {
    model_done_ = true;
    for (std::thread& t : restarters_) t.join();
  }

  // The model on the three servers alone, a third of its layers on each.
  ModelOptions options() {
    ModelOptions o = test::local_options(kModelPath, 512);
    o.servers = {servers_[0]->endpoint(), servers_[1]->endpoint(), servers_[2]->endpoint()};
    o.use_local_cpu = false;
    o.split = {1, 1, 1};
    o.recovery.reconnect_wait_s = 20;
    o.recovery.on_event = [this](const std::string& line) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      events_ += std::to_string(t) + " " + line + "\n";
    };
    return o;
  }

  // Kills the middle server at once; with `restart_after`, starts it again on its port that much later.
  void kill_middle(std::optional<std::chrono::milliseconds> restart_after) {
    ServerProcess& middle = *servers_[1];
    ASSERT_EQ(::kill(middle.pid(), SIGKILL), 0);
    (void)middle.stop();  // reaps it
    if (!restart_after) return;
    const uint16_t port = middle.port();
    // The thread that starts a server must outlive it (the server dies with the thread that forked it).
    restarters_.emplace_back([this, port, wait = *restart_after] {
      std::this_thread::sleep_for(wait);
      auto restarted = restart_on(port);
      while (!model_done_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
  }

  // The text of `o`'s model from kPrompt, with `g`; at token kKillAt, `fault` runs.
  StatusOr<Generation> generate(const ModelOptions& o, const GenerationOptions& g,
                                const std::function<void()>& fault = {}) {
    auto model = Model::open(o);
    if (!model.ok()) return model.status();
    int n = 0;
    auto r = model.value().generate(kPrompt, g, [&](std::string_view, int32_t) {
      if (++n == kKillAt && fault) fault();
      return true;
    });
    if (r.ok()) recoveries_ = model.value().info().recoveries;
    return r;
  }

  // Kills the middle server at token kKillAt and restarts it a second later:
  // the text is the uninterrupted run's, its layers back on it.
  void expect_restart_recovers(const GenerationOptions& g) {
    auto expected = generate(options(), g);
    ASSERT_TRUE(expected.ok()) << expected.status().to_string();
    ASSERT_EQ(expected.value().tokens.size(), static_cast<size_t>(kTokens));
    auto r = generate(options(), g, [&] { kill_middle(std::chrono::milliseconds(1000)); });
    ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << events_;
    EXPECT_EQ(r.value().text, expected.value().text) << events_;
    EXPECT_EQ(recoveries_, 1u);
    const std::string middle = servers_[1]->endpoint();
    EXPECT_TRUE(contains(events_, "server " + middle + " lost")) << events_;
    EXPECT_TRUE(contains(events_, "server " + middle + " answers again")) << events_;
    EXPECT_TRUE(contains(events_, "tokens evaluated again")) << events_;
  }

  std::unique_ptr<ServerProcess> servers_[3];
  std::vector<std::thread> restarters_;  // each holds a restarted server until TearDown
  std::atomic<bool> model_done_{false};
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::string events_;
  uint64_t recoveries_ = 0;
};

TEST_F(Recovery, RestartedServerTakesItsLayersBackAndTheGreedyTextIsUnchanged) {
  expect_restart_recovers(test::greedy(kTokens));
}

TEST_F(Recovery, RestartedServerTakesItsLayersBackAndTheSampledTextIsUnchanged) {
  expect_restart_recovers(sampled(kTokens));
}

TEST_F(Recovery, LayersOfAServerThatStaysDownGoToTheOthers) {
  auto expected = generate(options(), test::greedy(kTokens));
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  ModelOptions o = options();
  o.recovery.reconnect_wait_s = 0.5;
  const std::string middle = servers_[1]->endpoint();
  auto r = generate(o, test::greedy(kTokens), [&] { kill_middle(std::nullopt); });
  ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << events_;
  EXPECT_EQ(r.value().text, expected.value().text) << events_;
  EXPECT_TRUE(contains(events_, "placing the model again without " + middle)) << events_;
  // The placement said where the layers went: the two servers left, none on the lost one.
  const size_t table = events_.find("placed again:");
  ASSERT_NE(table, std::string::npos) << events_;
  EXPECT_FALSE(contains(events_.substr(table), middle + "/cpu0")) << events_;
  EXPECT_TRUE(contains(events_.substr(table), servers_[2]->endpoint() + "/cpu0")) << events_;
}

TEST_F(Recovery, AStandbyTakesTheLostServersLayers) {
  auto standby = test::start_cpu_server();
  ASSERT_TRUE(standby);
  auto expected = generate(options(), test::greedy(kTokens));
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  ModelOptions o = options();
  o.recovery.reconnect_wait_s = 0.5;
  o.recovery.standby = {standby->endpoint()};
  auto model = Model::open(o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(model.value().info().standby, o.recovery.standby);
  EXPECT_FALSE(contains(model.value().info().placement, standby->endpoint())) << "a standby holds no layers";
  int n = 0;
  auto r = model.value().generate(kPrompt, test::greedy(kTokens), [&](std::string_view, int32_t) {
    if (++n == kKillAt) kill_middle(std::nullopt);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << events_;
  EXPECT_EQ(r.value().text, expected.value().text) << events_;
  EXPECT_TRUE(contains(events_, "standby server " + standby->endpoint() + " takes the place of")) << events_;
  const ModelInfo info = model.value().info();
  EXPECT_TRUE(contains(test::placement_row(info.placement, standby->endpoint() + "/cpu0"), "-")) << info.placement;
  EXPECT_TRUE(info.standby.empty() || info.standby.front() != standby->endpoint());
}

TEST_F(Recovery, WithRecoveryOffTheErrorNamesTheServer) {
  ModelOptions o = options();
  o.recovery.enabled = false;
  auto r = generate(o, test::greedy(kTokens), [&] { kill_middle(std::nullopt); });
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), servers_[1]->endpoint())) << r.status().to_string();
  EXPECT_TRUE(events_.empty()) << events_;
}

TEST_F(Recovery, AStandbyThatCannotBeReachedFailsTheOpen) {
  ModelOptions o = options();
  auto gone = test::start_cpu_server();
  ASSERT_TRUE(gone);
  o.recovery.standby = {gone->endpoint()};
  (void)gone->stop();
  auto model = Model::open(o);
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(contains(model.status().message(), "standby server " + o.recovery.standby[0]))
      << model.status().to_string();
}

TEST_F(Recovery, AFrozenServerIsLostAfterTheTimeoutAndNeverTrustedAgain) {
  auto expected = generate(options(), test::greedy(kTokens));
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  ModelOptions o = options();
  o.remote.reply_timeout = std::chrono::milliseconds(1500);
  o.recovery.reconnect_wait_s = 0.5;
  const pid_t frozen = servers_[1]->pid();
  const auto start = std::chrono::steady_clock::now();
  auto r = generate(o, test::greedy(kTokens), [&] { ASSERT_EQ(::kill(frozen, SIGSTOP), 0); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(::kill(frozen, SIGCONT), 0);
  ASSERT_TRUE(r.ok()) << r.status().to_string() << "\n" << events_;
  EXPECT_EQ(r.value().text, expected.value().text) << events_;
  EXPECT_TRUE(contains(events_, "placing the model again without " + servers_[1]->endpoint())) << events_;
  EXPECT_LT(seconds, 30) << "bounded by the timeout and the probes\n" << events_;
}

TEST_F(Recovery, NothingToTakeItsPlaceIsUnavailableAndTheNextGenerationTriesAgain) {
  // The model on the middle server alone: lost, it leaves no device.
  ModelOptions o = options();
  o.recovery.reconnect_wait_s = 0.5;
  o.servers = {servers_[1]->endpoint()};
  o.split = {1};
  auto model = Model::open(o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  int n = 0;
  auto r = model.value().generate(kPrompt, test::greedy(kTokens), [&](std::string_view, int32_t) {
    if (++n == kKillAt) kill_middle(std::nullopt);
    return true;
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::unavailable) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), servers_[1]->endpoint() + " lost")) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), "did not answer again")) << r.status().to_string();

  // Back on its port: the next generation reloads it there and runs.
  servers_[1] = restart_on(servers_[1]->port());
  ASSERT_TRUE(servers_[1]);
  auto again = model.value().generate(kPrompt, test::greedy(16));
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << events_;
  auto fresh = Model::open(o);
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  auto expected = fresh.value().generate(kPrompt, test::greedy(16));
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  EXPECT_EQ(again.value().text, expected.value().text);
}

}  // namespace
}  // namespace tensorpc
