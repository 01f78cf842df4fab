// Mixtures of experts across servers: a small random model of each MoE
// architecture generates the same greedy text spread over two
// tensorpc-servers as on the local CPU, and with its experts put on one
// server by --override-tensor and everything else on another, still one
// reply a decode step.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "file_util.h"
#include "lab/random_model.h"
#include "server_test_util.h"
#include "tensorpc/model.h"
#include "test_util.h"

namespace tensorpc {
namespace {

using test::contains;
using test::kMoePrompt;
using test::kMoeTokens;
using test::moe_options;
using test::moe_text;
using test::on_servers;
using test::start_cpu_server;

// A four-layer model of `arch` with 6 experts, 2 a token, in q8_0 (the
// experts in `experts` when given).
std::string write_model(const test::ScopedTempDir& dir, const std::string& arch,
                        std::optional<DType> experts = std::nullopt) {
  tools::RandomModelOptions o;
  o.arch = arch;
  o.n_embd = 64;
  o.n_layer = 4;
  o.n_ff = 96;
  o.n_expert = 6;
  o.n_expert_used = 2;
  o.n_ff_exp = 64;
  o.type = DType::q8_0;
  o.seed = 5;
  o.expert_type = experts;
  if (arch == "gpt-oss") o.sliding_window = 8;
  const std::string path = dir.path + "/" + arch + (experts ? std::string("-") + name_of(*experts) : "") + ".gguf";
  EXPECT_TRUE(tools::write_random_llama(path, o).ok());
  return path;
}

TEST(MoeServers, EachArchitectureOverTwoServersGeneratesTheLocalText) {
  test::ScopedTempDir dir;
  auto a = start_cpu_server(), b = start_cpu_server();
  ASSERT_TRUE(a && b);
  for (const char* arch : {"llama", "qwen2moe", "qwen3moe", "gpt-oss"}) {
    SCOPED_TRACE(arch);
    const std::string path = write_model(dir, arch);
    EXPECT_EQ(moe_text(on_servers(moe_options(path), *a, *b, {1, 1})), moe_text(moe_options(path)));
  }
}

TEST(MoeServers, GptOssWithMxfp4ExpertsOverTwoServersGeneratesTheLocalText) {
  test::ScopedTempDir dir;
  const std::string path = write_model(dir, "gpt-oss", DType::mxfp4);
  auto a = start_cpu_server(), b = start_cpu_server();
  ASSERT_TRUE(a && b);
  const std::string expected = moe_text(moe_options(path));
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(moe_text(on_servers(moe_options(path), *a, *b, {1, 1})), expected);
}

TEST(MoeServers, ExpertsOnOneServerAttentionOnAnotherGenerateTheLocalText) {
  test::ScopedTempDir dir;
  const std::string path = write_model(dir, "qwen3moe");
  const std::string expected = moe_text(moe_options(path));

  auto a = start_cpu_server(), b = start_cpu_server();
  ASSERT_TRUE(a && b);
  const std::string experts_device = a->endpoint() + "/cpu0";
  ModelOptions o = on_servers(moe_options(path), *a, *b, {0, 1});  // every layer on b but its experts
  o.tensor_overrides = {{"ffn_.*_exps", experts_device}};
  auto model = Model::open(o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const ModelInfo info = model.value().info();
  const std::string line = test::placement_row(info.placement, "ffn_.*_exps");
  ASSERT_FALSE(line.empty()) << info.placement;
  EXPECT_TRUE(contains(line, experts_device)) << line;
  EXPECT_TRUE(contains(line, " 12 ")) << line;  // gate, up and down experts of 4 layers

  auto r = model.value().generate(kMoePrompt, test::greedy(kMoeTokens));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().text, expected);
  EXPECT_TRUE(contains(r.value().schedule, "'blk.0.ffn_up_exps.weight' -> [0] " + experts_device))
      << r.value().schedule;
  auto again = model.value().generate(kMoePrompt, test::greedy(kMoeTokens));  // with every plan stored
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again.value().text, expected);
  EXPECT_EQ(again.value().decode_round_trips, static_cast<uint64_t>(again.value().decode_steps));
}

}  // namespace
}  // namespace tensorpc
