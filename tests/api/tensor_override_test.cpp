// Tensor overrides (ModelOptions::tensor_overrides, `--override-tensor`) end
// to end: the bundled model with its feed-forward weights on one
// tensorpc-server and everything else on another generates the local CPU's
// greedy text, each node that reads an overridden weight runs on that
// weight's server, a decode step still waits for one reply, and the
// placement table says what the override put where.
#include <gtest/gtest.h>

#include <string>

#include "server_test_util.h"
#include "tensorpc/model.h"
#include "test_util.h"

namespace tensorpc {
namespace {

using test::contains;

const std::string kModelPath = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
const std::string kPrompt = "In the beginning";
constexpr int kTokens = 24;

ModelOptions options() { return test::local_options(kModelPath, 128); }

TEST(TensorOverride, FeedForwardOnOneServerAttentionOnAnotherGeneratesTheLocalText) {
  auto local = Model::open(options());
  ASSERT_TRUE(local.ok()) << local.status().to_string();
  auto expected = local.value().generate(kPrompt, test::greedy(kTokens));
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();

  auto a = test::start_cpu_server(), b = test::start_cpu_server();
  ASSERT_TRUE(a && b);
  const std::string ffn_device = a->endpoint() + "/cpu0";
  ModelOptions o = test::on_servers(options(), *a, *b, {0, 1});  // every layer on b, but for what the override takes
  o.tensor_overrides = {{"ffn_.*", ffn_device}};
  auto model = Model::open(o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();

  // The table: a holds no layer but the feed-forward weights.
  const ModelInfo info = model.value().info();
  EXPECT_TRUE(contains(info.placement, "override")) << info.placement;
  const std::string line = test::placement_row(info.placement, "ffn_.*");
  ASSERT_FALSE(line.empty()) << info.placement;
  EXPECT_TRUE(contains(line, ffn_device)) << line;
  // kjv-tiny: ffn_gate, ffn_up, ffn_down and ffn_norm in each of 4 layers.
  EXPECT_TRUE(contains(line, " 16 ")) << line;

  auto r = model.value().generate(kPrompt, test::greedy(kTokens));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().text, expected.value().text);
  // The feed-forward runs on a, next to its weights (the schedule names each
  // node's device), and the step still takes one reply: each server hands
  // its activations to the other, and only the last answers.
  const std::string& schedule = r.value().schedule;
  EXPECT_TRUE(contains(schedule, "'blk.0.ffn_up.weight' -> [0] " + ffn_device)) << schedule;
  auto again = model.value().generate(kPrompt, test::greedy(kTokens));  // with every plan stored
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again.value().text, expected.value().text);
  EXPECT_EQ(again.value().decode_round_trips, static_cast<uint64_t>(again.value().decode_steps)) << schedule;
}

}  // namespace
}  // namespace tensorpc
