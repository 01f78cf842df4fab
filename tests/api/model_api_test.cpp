// The public model API (include/tensorpc/model.h) on the bundled model: it
// generates what the library's own parts generate (LlamaModel, ModelPlacement,
// Generator, Sampler stepped by hand here), on the local CPU and spread over a
// server, where it reports what the upload and the decode cost on the link;
// on_open sees the model before any upload and can stop the open; its
// callback can stop a generation and cancel() ends one from another thread;
// a file that is not there is an error naming it.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "model/arch/llama_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/placement.h"
#include "model/runtime/sampler.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/model.h"
#include "tensorpc/server.h"

namespace tensorpc {
namespace {

const std::string kModelPath = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
const std::string kPrompt = "In the beginning";
constexpr int kTokens = 24;

ModelOptions local_options() {
  ModelOptions o;
  o.path = kModelPath;
  o.threads = 2;
  o.context_size = 256;
  return o;
}

GenerationOptions greedy(int n) {
  GenerationOptions g;
  g.max_tokens = n;
  g.sampling.temperature = 0;
  g.stop_at_end = false;  // every step, so the comparison covers all of them
  return g;
}

// Greedy text through the internal parts, one step at a time: the logits of
// each step, the sampler's pick, the tokenizer's text for what was picked.
std::string internal_greedy_text(int n) {
  auto model = LlamaModel::open(kModelPath);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  const LlamaModel& m = *model.value();
  CpuDevice cpu({.threads = 2});
  PlacementOptions options;
  options.n_ctx = 256;
  auto placement = ModelPlacement::create(m, {&cpu}, options);
  EXPECT_TRUE(placement.ok()) << placement.status().to_string();
  if (!placement.ok()) return {};
  Generator gen(m, *placement.value());
  SamplerOptions greedy;
  greedy.temperature = 0;
  auto sampler = Sampler::create(greedy);
  EXPECT_TRUE(sampler.ok());
  const Tokenizer& tok = m.tokenizer();
  std::vector<int32_t> step = tok.encode(kPrompt);
  for (int32_t t : step) sampler.value().accept(t);
  DetokenizeStream stream(tok);
  std::string text;
  for (int i = 0; i < n; ++i) {
    auto logits = gen.eval(step);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return {};
    const int32_t next = sampler.value().sample(logits.value());
    sampler.value().accept(next);
    text += stream.push(next);
    step = {next};
  }
  return text + stream.flush();
}

TEST(PublicModelApi, GreedyTextEqualsTheInternalPath) {
  auto model = Model::open(local_options());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::string streamed;
  int calls = 0;
  auto r = model.value().generate(kPrompt, greedy(kTokens), [&](std::string_view piece, int32_t token) {
    streamed += piece;
    if (token >= 0) ++calls;
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::string expected = internal_greedy_text(kTokens);
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(r.value().text, expected);
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(calls, kTokens);
  EXPECT_EQ(r.value().tokens.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ(r.value().finish, FinishReason::max_tokens);
  EXPECT_EQ(r.value().prompt_tokens, static_cast<int64_t>(model.value().tokenize(kPrompt).size()));

  // A second generation on the same model starts over and gives the same text.
  auto again = model.value().generate(kPrompt, greedy(kTokens));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again.value().text, expected);
}

// A server on a loopback port the OS picks, with devices cpu0 and cpu1 of one thread each.
StatusOr<std::unique_ptr<Server>> start_two_cpu_server() {
  ServerOptions so;
  so.port = 0;
  so.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1}),
                std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu1", .threads = 1})};
  return Server::start(so);
}

TEST(PublicModelApi, SpreadOverAServerGeneratesTheSameText) {
  auto server = start_two_cpu_server();
  ASSERT_TRUE(server.ok()) << server.status().to_string();

  ModelOptions o = local_options();
  o.servers = {"127.0.0.1:" + std::to_string(server.value()->port())};
  o.remote.key = "";  // this server has none, whatever the environment says
  o.split = {1, 1, 1};
  uint64_t progress_calls = 0;
  o.on_progress = [&](uint64_t, uint64_t, const std::string&) { ++progress_calls; };
  auto model = Model::open(o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_GT(progress_calls, 0u);
  const ModelInfo info = model.value().info();
  EXPECT_EQ(info.devices.size(), 3u);
  EXPECT_EQ(info.context_size, 256);
  EXPECT_GT(info.layers, 0);

  auto r = model.value().generate(kPrompt, greedy(kTokens));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().text, internal_greedy_text(kTokens));
  // Two of three devices are the server's: their weights went over the link
  // (a fresh server's cache holds none), and every decode step cost a round trip.
  EXPECT_GT(info.server_weight_bytes, 0u);
  EXPECT_GE(info.server_bytes_sent, info.server_weight_bytes);
  EXPECT_EQ(r.value().decode_steps, kTokens - 1);
  EXPECT_GE(r.value().decode_round_trips, static_cast<uint64_t>(r.value().decode_steps));
  EXPECT_GT(r.value().decode_bytes_sent, 0u);
  EXPECT_GT(r.value().decode_bytes_received, 0u);
  EXPECT_NE(r.value().schedule.find("127.0.0.1:"), std::string::npos) << r.value().schedule;

  // The same weights again: the server's weights cache has them, so far fewer bytes go.
  auto again = Model::open(o);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again.value().info().server_weight_bytes, info.server_weight_bytes);
  EXPECT_LT(again.value().info().server_bytes_sent, info.server_weight_bytes / 2);
}

// The bundled chat model on the local CPU, its bundled draft model on one
// device of a server: the text of decoding without it, in fewer steps. A
// device the server lacks is refused naming those it has; prompt lookup
// beside a draft model is refused.
TEST(PublicModelApi, ADraftModelOnAServersDeviceGivesTheSameText) {
  auto server = start_two_cpu_server();
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string endpoint = "127.0.0.1:" + std::to_string(server.value()->port());
  const std::string models = std::string(TENSORPC_SOURCE_DIR) + "/models/";
  ModelOptions o;
  o.path = models + "kjv-bpe.gguf";
  o.threads = 1;
  o.context_size = 256;
  o.remote.key = "";
  GenerationOptions g = greedy(40);
  g.sampling.seed = 5;
  auto plain = Model::open(o);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto expected = plain.value().generate("And the LORD said unto Moses", g);
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();

  o.draft_path = models + "kjv-bpe-draft.gguf";
  o.draft_device = endpoint + "/cpu1";
  auto model = Model::open(o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_NE(model.value().info().draft.find("2 layers on " + endpoint + "/cpu1"), std::string::npos)
      << model.value().info().draft;
  auto r = model.value().generate("And the LORD said unto Moses", g);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().text, expected.value().text);
  EXPECT_GT(r.value().accepted_tokens, 0);
  EXPECT_LT(r.value().decode_steps, expected.value().decode_steps);
  g.lookup = true;
  EXPECT_EQ(model.value().generate("And", g).status().code(), StatusCode::invalid_argument);

  o.draft_device = endpoint + "/gpu7";
  auto missing = Model::open(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("draft device " + endpoint + "/gpu7: the server has " + endpoint +
                                            "/cpu0, " + endpoint + "/cpu1"),
            std::string::npos)
      << missing.status().to_string();
}

TEST(PublicModelApi, OnOpenSeesTheModelBeforeAnyUploadAndCanStopTheOpen) {
  ModelOptions o = local_options();
  o.context_size = 0;  // the model's, at most 2048: on_open sees it resolved
  std::vector<ModelInfo> seen;
  bool uploaded_before_open = false;
  o.on_progress = [&](uint64_t, uint64_t, const std::string&) { uploaded_before_open |= seen.empty(); };
  o.on_open = [&](const ModelInfo& info) {
    seen.push_back(info);
    return Status();
  };
  auto model = Model::open(o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_FALSE(uploaded_before_open);
  const ModelInfo placed = model.value().info();
  EXPECT_EQ(seen[0].architecture, placed.architecture);
  EXPECT_EQ(seen[0].layers, placed.layers);
  EXPECT_EQ(seen[0].heads, placed.heads);
  EXPECT_EQ(seen[0].kv_heads, placed.kv_heads);
  EXPECT_EQ(seen[0].parameters, placed.parameters);
  EXPECT_EQ(seen[0].context_size, placed.context_size);
  EXPECT_TRUE(seen[0].devices.empty());
  EXPECT_EQ(placed.server_weight_bytes, 0u);  // the local CPU alone

  // A failure from on_open ends the open before anything is uploaded.
  int progress_calls = 0;
  o.on_progress = [&](uint64_t, uint64_t, const std::string&) { ++progress_calls; };
  o.on_open = [](const ModelInfo&) { return invalid_argument("not this model"); };
  auto refused = Model::open(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(refused.status().message().find("not this model"), std::string::npos) << refused.status().to_string();
  EXPECT_EQ(progress_calls, 0);
}

TEST(PublicModelApi, AnUnknownLocalDeviceIsAnErrorNamingIt) {
  ModelOptions o = local_options();
  o.local_devices = {"cpu", "gpu"};
  auto model = Model::open(o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::invalid_argument) << model.status().to_string();
  EXPECT_NE(model.status().message().find("local device 'gpu': expected cpu, vulkan"), std::string::npos)
      << model.status().to_string();
}

TEST(PublicModelApi, SamplingOptionsAreCheckedWithoutAModel) {
  EXPECT_TRUE(SamplingOptions{}.validate().ok());
  SamplingOptions bad;
  bad.top_p = 0;
  EXPECT_EQ(bad.validate().code(), StatusCode::invalid_argument);
  bad = SamplingOptions{};
  bad.temperature = -1;
  EXPECT_EQ(bad.validate().code(), StatusCode::invalid_argument);
}

TEST(PublicModelApi, TokenizeAndDetokenizeRoundTrip) {
  auto model = Model::open(local_options());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::string text = "and God said, Let there be light";
  const std::vector<int32_t> tokens = model.value().tokenize(text);
  ASSERT_FALSE(tokens.empty());
  auto back = model.value().detokenize(tokens);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back.value(), text);

  const std::vector<int32_t> bad = {tokens[0], -1};
  auto refused = model.value().detokenize(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("-1"), std::string::npos) << refused.status().to_string();
}

TEST(PublicModelApi, TheCallbackStopsGenerationWhenItReturnsFalse) {
  auto model = Model::open(local_options());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  int calls = 0;
  auto r = model.value().generate(kPrompt, greedy(kTokens), [&](std::string_view, int32_t) { return ++calls < 3; });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().finish, FinishReason::stopped);
  EXPECT_EQ(r.value().tokens.size(), 3u);
}

TEST(PublicModelApi, CancelFromAnotherThreadEndsTheGeneration) {
  auto model = Model::open(local_options());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Model& m = model.value();
  std::atomic<bool> first_token{false}, cancelled{false};
  std::thread canceller([&] {
    while (!first_token.load()) std::this_thread::yield();
    m.cancel();
    cancelled.store(true);
  });
  // The first token's callback waits for the other thread's cancel(), so the
  // generation is certainly running when it comes.
  auto r = m.generate(kPrompt, greedy(200), [&](std::string_view, int32_t) {
    first_token.store(true);
    while (!cancelled.load()) std::this_thread::yield();
    return true;
  });
  canceller.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().finish, FinishReason::cancelled);
  EXPECT_EQ(r.value().tokens.size(), 1u);

  // The cancel was for that generation only.
  auto next = m.generate(kPrompt, greedy(4));
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_EQ(next.value().finish, FinishReason::max_tokens);
  EXPECT_EQ(next.value().tokens.size(), 4u);
}

TEST(PublicModelApi, AMissingFileIsAnErrorNamingIt) {
  ModelOptions o = local_options();
  o.path = std::string(TENSORPC_SOURCE_DIR) + "/models/no-such-model.gguf";
  auto model = Model::open(o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::not_found) << model.status().to_string();
  EXPECT_NE(model.status().message().find("no-such-model.gguf"), std::string::npos) << model.status().to_string();
}

TEST(PublicModelApi, BadSamplingOptionsAreAnErrorBeforeAnyStep) {
  auto model = Model::open(local_options());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  GenerationOptions g = greedy(4);
  g.sampling.top_p = 0;  // must be in (0, 1]
  auto r = model.value().generate(kPrompt, g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().to_string();
}

}  // namespace
}  // namespace tensorpc
