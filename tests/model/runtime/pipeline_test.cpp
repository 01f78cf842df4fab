// A model's layers in a pipeline over three servers, A -> B -> C in layer
// order: each server hands its output activations straight to the next
// (COPY_TO_PEER), and the client talks only to the first (the step's input,
// one-way) and the last (the result). The text equals the local CPU's, the
// client waits for one reply a step whatever the number of servers, and a
// server killed in the middle of the text ends the generation with an error
// naming it, never a hang. The last server samples the token (the sample
// op), with the client's settings and draws: the text equals the local
// CPU's sampled on the client from every logit.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "api/device_set.h"
#include "lab/random_model.h"
#include "model/runtime/generate.h"
#include "model/runtime/sampler.h"
#include "rpc/rpc_test_util.h"
#include "server_process.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/server.h"

namespace tensorpc::tools {
namespace {

using Clock = std::chrono::steady_clock;

using test::kSanitized;

class Pipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        (std::filesystem::temp_directory_path() / ("tensorpc_pipeline_test_" + std::to_string(::getpid()) + ".gguf"))
            .string();
    RandomModelOptions o;
    o.n_layer = 6;  // two a server
    o.n_ctx = 2048;
    ASSERT_TRUE(write_random_llama(path_, o).ok());
    auto m = LlamaModel::open(path_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
  }
  void TearDown() override {
    model_.reset();
    std::filesystem::remove(path_);
  }

  // The model over one device of each endpoint, in order: layers 0-1 on the
  // first, 2-3 on the second, 4-5 and the output on the third.
  std::unique_ptr<ModelPlacement> place(const std::vector<std::string>& endpoints, int64_t n_ctx) {
    auto devices = DeviceSet::connect({}, 0, endpoints);
    EXPECT_TRUE(devices.ok()) << devices.status().to_string();
    if (!devices.ok()) return nullptr;
    devices_ = std::make_unique<DeviceSet>(std::move(devices).value());
    const std::vector<Device*> list = devices_->devices();
    EXPECT_EQ(list.size(), endpoints.size());
    auto placement =
        ModelPlacement::create(*model_, list, {.ratios = std::vector<double>(list.size(), 1.0), .n_ctx = n_ctx});
    EXPECT_TRUE(placement.ok()) << placement.status().to_string();
    return placement.ok() ? std::move(placement).value() : nullptr;
  }

  // The local CPU's tokens, sampled on the client from every logit.
  std::vector<int32_t> local_tokens(const std::string& prompt, GenerateOptions g, int64_t n_ctx) {
    g.generator.select_on_device = false;
    CpuDevice cpu({.threads = 2});
    auto placement = ModelPlacement::create(*model_, {&cpu}, {.n_ctx = n_ctx});
    EXPECT_TRUE(placement.ok()) << placement.status().to_string();
    if (!placement.ok()) return {};
    auto r = generate_text(*model_, *placement.value(), prompt, g);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value().generated : std::vector<int32_t>{};
  }

  std::string path_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<DeviceSet> devices_;
};

GenerateOptions options(int n, float temperature) {
  GenerateOptions g;
  g.n_predict = n;
  g.stop_at_eos = false;  // a random model may pick EOS; the comparison wants every step
  g.sampler.temperature = temperature;
  g.sampler.seed = 7;
  g.generator.kv_granularity = 16;  // decoding crosses KV windows, so new plans are made on the way
  return g;
}

TEST_F(Pipeline, TextOverThreeServersEqualsLocalAndTakesOneReplyAStep) {
  // The local tokens first: a model is placed on one set of devices at a time.
  const std::string prompt = "in the beginning was the word and the word was";
  const std::vector<int32_t> local_greedy = local_tokens(prompt, options(40, 0.0f), 128);
  const std::vector<int32_t> local_sampled = local_tokens(prompt, options(40, 0.8f), 128);
  ASSERT_EQ(local_greedy.size(), 40u);
  ASSERT_EQ(local_sampled.size(), 40u);

  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::string> endpoints;
  for (int i = 0; i < 3; ++i) {
    ServerOptions o;
    o.port = 0;
    o.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1})};
    servers.push_back(Server::start(o).value());
    endpoints.push_back("127.0.0.1:" + std::to_string(servers.back()->port()));
  }
  auto placement = place(endpoints, 128);
  ASSERT_NE(placement, nullptr);
  Generator gen(*model_, *placement, options(0, 0).generator);

  for (const float temperature : {0.0f, 0.8f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    const GenerateOptions g = options(40, temperature);
    auto first = generate_text(gen, prompt, g);  // plans made and stored on the way
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(first.value().generated, temperature == 0.0f ? local_greedy : local_sampled);

    // Again on the same generator, with every plan stored: the client sends
    // each step's input to the first server without waiting and reads the
    // result from the last, one reply a step for the three servers.
    auto again = generate_text(gen, prompt, g);
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(again.value().generated, first.value().generated);
    EXPECT_EQ(again.value().decode_steps, 39);
    EXPECT_EQ(again.value().decode.round_trips, static_cast<uint64_t>(again.value().decode_steps))
        << again.value().schedule;
    if (temperature > 0.0f) {
      // The last server samples (the sample op): each step's answer is a
      // token id, less than the candidates a client would sample from.
      const int64_t k = Sampler::create(g.sampler).value().candidates_needed(model_->hparams().n_vocab);
      ASSERT_GT(k, 1);
      EXPECT_LT(again.value().decode.bytes_received / static_cast<uint64_t>(again.value().decode_steps),
                static_cast<uint64_t>(2 * k) * sizeof(float));
    }
  }
}

class PipelineKill : public Pipeline, public ::testing::WithParamInterface<int> {};

// The first, the middle or the last server killed: the servers after it wait
// for bytes that will not come, and are told so at once.
TEST_P(PipelineKill, AServerKilledMidTextEndsTheGenerationWithAnErrorNamingIt) {
  const int doomed = GetParam();
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> endpoints;
  for (int i = 0; i < 3; ++i) {
    auto p = ServerProcess::start(TENSORPC_SERVER_BINARY, {"--device", "cpu:1"}, std::chrono::seconds(30));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    servers.push_back(std::move(p).value());
    endpoints.push_back(servers.back()->endpoint());
  }
  auto placement = place(endpoints, 2048);
  ASSERT_NE(placement, nullptr);
  Generator gen(*model_, *placement, options(0, 0).generator);

  // Far more tokens than the test waits for: the servers are decoding when
  // one is killed.
  std::atomic<int> tokens{0};
  StatusOr<GenerateResult> result = internal_error("not run");
  Clock::time_point ended;
  std::thread generating([&] {
    result = generate_text(gen, "in the beginning", options(2000, 0.8f), [&](std::string_view, int32_t) {
      ++tokens;
      return true;
    });
    ended = Clock::now();
  });
  const auto started = Clock::now();
  while (tokens.load() < 20 && Clock::now() - started < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto killed_at = Clock::now();
  ::kill(servers[doomed]->pid(), SIGKILL);
  generating.join();

  ASSERT_GE(tokens.load(), 20) << "the generation did not get going";
  ASSERT_FALSE(result.ok()) << "the generation ended before the server was killed (" << tokens.load() << " tokens)";
  const auto server_logs = [&] {
    std::string logs;
    for (size_t i = 0; i < servers.size(); ++i) logs += "\n--- " + endpoints[i] + ":\n" + servers[i]->output();
    return logs;
  };
  EXPECT_LT(ended - killed_at, std::chrono::seconds(kSanitized ? 20 : 5))
      << result.status().to_string() << server_logs();
  EXPECT_NE(result.status().message().find(endpoints[doomed]), std::string::npos) << result.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Servers, PipelineKill, ::testing::Values(0, 1, 2), [](const auto& info) {
  return std::string(info.param == 0 ? "First" : info.param == 1 ? "Middle" : "Last");
});

}  // namespace
}  // namespace tensorpc::tools
