// Generation across servers equals generation on the local CPU, token for
// token: a random llama model (f32, bf16, and block formats of 32 and of 256
// values; GQA, 4 layers), a random model of each other architecture, and,
// when it is there, the bundled one, spread over two in-process servers with two CPU
// devices each.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>

#include "api/device_set.h"
#include "lab/random_model.h"
#include "model/runtime/chat_session.h"
#include "model/runtime/generate.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/demo.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"

namespace tensorpc::tools {
namespace {

// Two servers on loopback ports, two one-thread CPU devices each, each
// session keeping `stored_graphs` graphs and plans.
struct TwoServers {
  explicit TwoServers(size_t stored_graphs = ServerOptions{}.stored_graphs) {
    for (int i = 0; i < 2; ++i) {
      ServerOptions o;
      o.port = 0;
      o.stored_graphs = stored_graphs;
      o.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1}),
                   std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu1", .threads = 1})};
      servers.push_back(Server::start(o).value());
      endpoints.push_back("127.0.0.1:" + std::to_string(servers.back()->port()));
    }
  }
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::string> endpoints;
};

GenerateOptions greedy(int n) {
  GenerateOptions g;
  g.n_predict = n;
  g.stop_at_eos = false;  // random models may well pick EOS; the comparison wants every step
  g.sampler.temperature = 0;
  return g;
}

// Generates on the servers' four devices (ratios 1,1,1,1); also checks the
// table names every device and that the decode went through the servers.
std::optional<GenerateResult> run_remote(const LlamaModel& model, const std::vector<std::string>& endpoints,
                                         const std::string& prompt, const GenerateOptions& g, int64_t n_ctx) {
  auto devices = DeviceSet::connect({}, 0, endpoints);
  EXPECT_TRUE(devices.ok()) << devices.status().to_string();
  if (!devices.ok()) return std::nullopt;
  const std::vector<Device*> list = devices.value().devices();
  EXPECT_EQ(list.size(), 4u);
  auto placement =
      ModelPlacement::create(model, list, {.ratios = std::vector<double>(list.size(), 1.0), .n_ctx = n_ctx});
  EXPECT_TRUE(placement.ok()) << placement.status().to_string();
  if (!placement.ok()) return std::nullopt;
  const std::string table = placement.value()->table();
  for (Device* d : list) EXPECT_NE(table.find(d->name()), std::string::npos) << d->name() << " not in\n" << table;
  auto r = generate_text(model, *placement.value(), prompt, g);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return std::nullopt;
  EXPECT_GT(r.value().decode.round_trips, 0u);
  return std::move(r).value();
}

std::vector<int32_t> generate_remote(const LlamaModel& model, const std::vector<std::string>& endpoints,
                                     const std::string& prompt, const GenerateOptions& g, int64_t n_ctx) {
  auto r = run_remote(model, endpoints, prompt, g, n_ctx);
  return r ? r->generated : std::vector<int32_t>{};
}

std::vector<int32_t> generate_local(const LlamaModel& model, const std::string& prompt, const GenerateOptions& g,
                                    int64_t n_ctx) {
  CpuDevice cpu({.threads = 2});
  auto placement = ModelPlacement::create(model, {&cpu}, {.n_ctx = n_ctx});
  EXPECT_TRUE(placement.ok()) << placement.status().to_string();
  if (!placement.ok()) return {};
  auto r = generate_text(model, *placement.value(), prompt, g);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value().generated : std::vector<int32_t>{};
}

class RandomModelGeneration : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    path = (std::filesystem::temp_directory_path() /
            ("tensorpc_generation_test_" + std::to_string(::getpid()) + "_" + name_of(GetParam()) + ".gguf"))
               .string();
    RandomModelOptions o;
    o.type = GetParam();
    if (block_size(o.type) > o.n_embd) {  // the super-block formats need rows of 256
      o.n_embd = 256;
      o.n_ff = 512;
    }
    ASSERT_TRUE(write_random_llama(path, o).ok());
    auto m = LlamaModel::open(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(m).value();
  }
  void TearDown() override {
    model.reset();
    std::filesystem::remove(path);
  }
  std::string path;
  std::unique_ptr<LlamaModel> model;
};

TEST_P(RandomModelGeneration, GreedyAcrossTwoServersEqualsLocal) {
  GenerateOptions g = greedy(40);
  g.generator.n_batch = 4;          // the prompt takes several prefill steps
  g.generator.kv_granularity = 16;  // and decoding crosses KV windows at 16, 32 and 48
  const std::string prompt = "in the beginning was the word and the word was";
  ASSERT_GT(model->tokenizer().encode(prompt).size(), 8u);

  TwoServers servers;
  const std::vector<int32_t> remote = generate_remote(*model, servers.endpoints, prompt, g, 128);
  const std::vector<int32_t> local = generate_local(*model, prompt, g, 128);
  ASSERT_EQ(local.size(), 40u);
  EXPECT_EQ(remote, local);
}

// The last server picks the sampler's candidates (top_k) and sends back a
// few hundred bytes instead of every logit: the same tokens, greedy and
// sampled, for a fraction of the bytes.
TEST_P(RandomModelGeneration, CandidatesPickedOnTheServersGiveTheTokensAllLogitsGive) {
  const std::string prompt = "in the beginning was the word";
  TwoServers servers;
  GenerateOptions sampled = greedy(24);
  sampled.sampler = SamplerOptions{};  // temperature 0.8, top-k 40, top-p 0.95, penalty 1.1
  sampled.sampler.seed = 5;
  for (GenerateOptions g : {greedy(24), sampled}) {
    g.generator.select_on_device = false;
    const auto whole = run_remote(*model, servers.endpoints, prompt, g, 128);
    g.generator.select_on_device = true;
    const auto picked = run_remote(*model, servers.endpoints, prompt, g, 128);
    ASSERT_TRUE(whole && picked);
    ASSERT_EQ(picked->generated.size(), 24u);
    EXPECT_EQ(picked->generated, whole->generated) << "temperature " << g.sampler.temperature;
    const uint64_t whole_bytes = whole->decode.bytes_received;
    const uint64_t picked_bytes = picked->decode.bytes_received;
    // The random model's vocabulary is a few hundred tokens: even so, the
    // candidates (at most 106 values and ids) are well under its logits.
    EXPECT_LT(picked_bytes, whole_bytes) << "temperature " << g.sampler.temperature;
  }
}

// A generator the caller keeps starts over for each generation: the same
// prompt gives the same tokens after another prompt ran in between, as a
// fresh generator gives them, and nothing is planned anew.
TEST_P(RandomModelGeneration, AGeneratorUsedAgainStartsOverAndPlansNothingNew) {
  const std::string prompt = "in the beginning was the word";
  const GenerateOptions g = greedy(12);
  TwoServers servers;
  auto devices = DeviceSet::connect({}, 0, servers.endpoints);
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  const std::vector<Device*> list = devices.value().devices();
  auto placement =
      ModelPlacement::create(*model, list, {.ratios = std::vector<double>(list.size(), 1.0), .n_ctx = 128});
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  Generator gen(*model, *placement.value(), g.generator);

  auto first = generate_text(gen, prompt, g);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto other = generate_text(gen, "and the earth was without form", g);
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  const uint64_t plans = gen.scheduler().plans_made();
  auto again = generate_text(gen, prompt, g);
  ASSERT_TRUE(again.ok()) << again.status().to_string();

  ASSERT_EQ(first.value().generated.size(), 12u);
  EXPECT_EQ(again.value().generated, first.value().generated);
  EXPECT_NE(other.value().generated, first.value().generated);
  EXPECT_EQ(gen.scheduler().plans_made(), plans) << "the third generation planned anew";
  EXPECT_EQ(first.value().generated, generate_local(*model, prompt, g, 128));
}

INSTANTIATE_TEST_SUITE_P(Types, RandomModelGeneration,
                         ::testing::Values(DType::f32, DType::q8_0, DType::bf16, DType::q5_1, DType::iq4_nl,
                                           DType::q4_K, DType::q6_K),
                         [](const auto& info) { return std::string(name_of(info.param)); });

// Servers that keep one graph and one plan per session drop each as soon as
// another is stored: generation (twice on one generator) gives the local
// CPU's tokens all the same; nothing depends on what a server keeps
// (tests/rpc/stored_work_test.cpp shows the resends themselves).
class OnePlanServers : public RandomModelGeneration {};

TEST_P(OnePlanServers, GiveTheLocalTokens) {
  const std::string prompt = "in the beginning was the word and the word was";
  GenerateOptions g = greedy(20);
  g.generator.n_batch = 4;          // prefill plans of 4 tokens, then decode plans of 1
  g.generator.kv_granularity = 16;  // and new ones as decoding crosses KV windows
  TwoServers servers(/*stored_graphs=*/1);
  auto devices = DeviceSet::connect({}, 0, servers.endpoints);
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  const std::vector<Device*> list = devices.value().devices();
  auto placement = ModelPlacement::create(*model, list, {.ratios = std::vector<double>(list.size(), 1.0), .n_ctx = 64});
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  Generator gen(*model, *placement.value(), g.generator);

  auto first = generate_text(gen, prompt, g);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto again = generate_text(gen, prompt, g);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  ASSERT_EQ(first.value().generated.size(), 20u);
  EXPECT_EQ(first.value().generated, generate_local(*model, prompt, g, 64));
  EXPECT_EQ(again.value().generated, first.value().generated);
}

INSTANTIATE_TEST_SUITE_P(F32, OnePlanServers, ::testing::Values(DType::f32),
                         [](const auto& info) { return std::string(name_of(info.param)); });

// Each architecture's step graph — biases, per-head norms, fused matrices,
// soft-caps with their tanh, the second mask of the sliding layers — travels
// to the servers and gives the tokens the local CPU gives.
class ArchitectureGeneration : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchitectureGeneration, GreedyAcrossTwoServersEqualsLocal) {
  RandomModelOptions o;
  o.arch = GetParam();
  o.n_layer = 4;
  if (o.arch == "gemma2" || o.arch == "phi3") o.sliding_window = 8;  // shorter than the text: the windows matter
  if (o.arch == "gemma2") {
    o.attn_softcap = 2.0f;
    o.final_softcap = 3.0f;
  }
  if (o.arch == "qwen3") o.n_head_dim = 24;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tensorpc_arch_generation_" + std::to_string(::getpid()) + "_" + o.arch + ".gguf"))
                               .string();
  ASSERT_TRUE(write_random_llama(path, o).ok());
  auto model = LlamaModel::open(path);
  std::filesystem::remove(path);  // the mapping stays
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(model.value()->arch().name, o.arch);

  GenerateOptions g = greedy(24);
  g.generator.n_batch = 4;
  g.generator.kv_granularity = 16;
  const std::string prompt = "in the beginning was the word";
  TwoServers servers;
  const std::vector<int32_t> remote = generate_remote(*model.value(), servers.endpoints, prompt, g, 64);
  const std::vector<int32_t> local = generate_local(*model.value(), prompt, g, 64);
  ASSERT_EQ(local.size(), 24u);
  EXPECT_EQ(remote, local);
}

INSTANTIATE_TEST_SUITE_P(Architectures, ArchitectureGeneration, ::testing::Values("qwen2", "qwen3", "phi3", "gemma2"),
                         [](const auto& info) { return std::string(info.param); });

TEST(DeviceSet, AMissingServerIsAnErrorNamingItsEndpoint) {
  const std::string endpoint = "127.0.0.1:1";  // privileged, never a tensorpc-server in tests
  auto devices = DeviceSet::connect({"cpu"}, 1, {endpoint});
  ASSERT_FALSE(devices.ok());
  EXPECT_NE(devices.status().message().find(endpoint), std::string::npos) << devices.status().to_string();
}

// The bundled models: the SentencePiece one and the byte-level BPE chat one.
class BundledModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    path = GetParam() == "kjv-tiny" ? bundled_model_path()
                                    : std::string(TENSORPC_SOURCE_DIR) + "/models/" + GetParam() + ".gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (tools/train/ makes it)";
    auto m = LlamaModel::open(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(m).value();
  }
  std::string path;
  std::unique_ptr<LlamaModel> model;
};

TEST_P(BundledModel, GreedyAcrossTwoServersEqualsLocal) {
  const GenerateOptions g = greedy(32);
  TwoServers servers;
  const std::vector<int32_t> remote = generate_remote(*model, servers.endpoints, "In the beginning", g, 256);
  const std::vector<int32_t> local = generate_local(*model, "In the beginning", g, 256);
  ASSERT_EQ(local.size(), 32u);
  EXPECT_EQ(remote, local);
}

// Two turns of a conversation with the chat model: the replies across the
// servers' four devices equal the local CPU's, and the second turn reuses
// the cache there as here.
TEST(BundledChatModel, AConversationAcrossTwoServersEqualsLocal) {
  const std::string path = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (tools/train/make_bpe_model.sh makes it)";
  auto model = LlamaModel::open(path);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const Tokenizer& tok = model.value()->tokenizer();
  auto text = model.value()->file().get_string("tokenizer.chat_template");
  ASSERT_TRUE(text.ok());
  const auto converse = [&](ModelPlacement& placement) {
    Generator gen(*model.value(), placement);
    ChatSessionOptions o;
    o.sampler.temperature = 0;
    o.n_predict = 24;
    o.system_prompt = "Answer with a verse.";
    auto t = ChatTemplate::detect(text.value(), tok.text(tok.bos()), tok.text(tok.eos()));
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    auto session = ChatSession::create(gen, std::move(t).value(), o);
    EXPECT_TRUE(session.ok()) << session.status().to_string();
    std::vector<std::string> replies;
    std::vector<int64_t> evaluated;
    for (const char* message : {"In the beginning God created the heaven and the earth.", "And there was light."}) {
      auto turn = session.value().reply(message);
      EXPECT_TRUE(turn.ok()) << turn.status().to_string();
      if (!turn.ok()) break;
      replies.push_back(turn.value().text);
      evaluated.push_back(turn.value().evaluated);
    }
    return std::make_pair(replies, evaluated);
  };
  TwoServers servers;
  auto devices = DeviceSet::connect({}, 0, servers.endpoints);
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  const std::vector<Device*> list = devices.value().devices();
  auto remote_placement =
      ModelPlacement::create(*model.value(), list, {.ratios = std::vector<double>(4, 1.0), .n_ctx = 256});
  ASSERT_TRUE(remote_placement.ok()) << remote_placement.status().to_string();
  const auto remote = converse(*remote_placement.value());
  remote_placement.value().reset();
  CpuDevice cpu({.threads = 2});
  auto local_placement = ModelPlacement::create(*model.value(), {&cpu}, {.n_ctx = 256});
  ASSERT_TRUE(local_placement.ok()) << local_placement.status().to_string();
  const auto local = converse(*local_placement.value());
  ASSERT_EQ(local.first.size(), 2u);
  EXPECT_FALSE(local.first[0].empty());
  EXPECT_EQ(remote.first, local.first);
  EXPECT_EQ(remote.second, local.second);
  EXPECT_LT(local.second[1], local.second[0]) << "the second turn evaluates only its own tokens";
}

INSTANTIATE_TEST_SUITE_P(Models, BundledModel, ::testing::Values("kjv-tiny", "kjv-bpe"),
                         [](const auto& info) { return info.param == "kjv-tiny" ? "SentencePiece" : "BytePairs"; });

}  // namespace
}  // namespace tensorpc::tools
