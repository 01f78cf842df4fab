// Mixtures of experts from files tensorpc did not write: tests/model/arch/
// write_moe_ggufs.py writes a tiny model of each MoE architecture with the
// Python writer of tools/train (numpy), laid out as llama.cpp's converter
// lays out converted models. Each loads with its architecture and expert
// sizes, generates the local CPU's greedy text over two servers, and with
// its experts on one server and the rest on another.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "file_util.h"
#include "model/arch/llama_model.h"
#include "server_test_util.h"
#include "tensorpc/model.h"
#include "test_util.h"

namespace tensorpc {
namespace {

using test::contains;
using test::moe_options;
using test::moe_text;
using test::on_servers;
using test::start_cpu_server;

// What the script writes (its MODELS), as the loader must read it.
struct WrittenModel {
  const char* file;
  const char* arch;
  int64_t n_layer, n_head_dim, n_expert, n_expert_used, n_ff_exp, n_ff_shexp, n_swa;
};
constexpr WrittenModel kModels[] = {
    {"mixtral", "llama", 2, 16, 4, 2, 96, 0, 0},  // experts feed_forward_length wide
    {"qwen2moe", "qwen2moe", 2, 16, 8, 2, 32, 64, 0},
    {"qwen3moe", "qwen3moe", 3, 32, 8, 2, 32, 0, 0},
    {"gpt-oss", "gpt-oss", 4, 32, 4, 2, 48, 0, 8},
};

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// The first of the build's Python and the system's (where the Debian package
// python3-numpy puts numpy) that imports numpy; "" (and a failure naming what
// to install) when neither does.
std::string python_with_numpy() {
  std::string tried;
  for (const char* python : {TENSORPC_PYTHON3, "/usr/bin/python3"}) {
    const auto [code, out] = test::run_command(quoted(python) + " -c 'import numpy' 2>&1");
    if (code == 0) return python;
    tried += "\n  " + std::string(python) + ": " + out;
  }
  ADD_FAILURE() << "these tests need Python 3 with numpy: install python3-numpy (scripts/install-deps.sh) or "
                   "`pip install numpy` for "
                << TENSORPC_PYTHON3 << ". Tried:" << tried;
  return {};
}

// Runs the script into `dir`; false (and a failure with its output) when it fails.
bool write_models(const test::ScopedTempDir& dir) {
  const std::string python = python_with_numpy();
  if (python.empty()) return false;
  const auto [code, out] =
      test::run_command(quoted(python) + " " + quoted(TENSORPC_MOE_GGUF_SCRIPT) + " " + quoted(dir.path) + " 2>&1");
  EXPECT_EQ(code, 0) << out;
  return code == 0;
}

// Different bytes in `text`: a text of one piece repeated (a fixed point of
// greedy decoding) would make the comparisons weak.
size_t distinct_bytes(const std::string& text) { return std::set<char>(text.begin(), text.end()).size(); }

std::string path_of(const test::ScopedTempDir& dir, const WrittenModel& m) { return dir.path + "/" + m.file + ".gguf"; }

TEST(MoeIndependentFiles, EachLoadsWithItsArchitectureAndExpertSizes) {
  test::ScopedTempDir dir;
  ASSERT_TRUE(write_models(dir));
  for (const WrittenModel& m : kModels) {
    SCOPED_TRACE(m.file);
    auto model = LlamaModel::open(path_of(dir, m));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const LlamaHparams& hp = model.value()->hparams();
    EXPECT_EQ(hp.arch->name, m.arch);
    EXPECT_EQ(hp.n_vocab, 320);
    EXPECT_EQ(hp.n_embd, 64);
    EXPECT_EQ(hp.n_layer, m.n_layer);
    EXPECT_EQ(hp.head_dim(), m.n_head_dim);
    EXPECT_EQ(hp.n_expert, m.n_expert);
    EXPECT_EQ(hp.n_expert_used, m.n_expert_used);
    EXPECT_EQ(hp.n_ff_exp, m.n_ff_exp);
    EXPECT_EQ(hp.n_ff_shexp, m.n_ff_shexp);
    EXPECT_EQ(hp.n_swa, m.n_swa);
  }
}

TEST(MoeIndependentFiles, EachOverTwoServersGeneratesTheLocalText) {
  test::ScopedTempDir dir;
  ASSERT_TRUE(write_models(dir));
  auto a = start_cpu_server(), b = start_cpu_server();
  ASSERT_TRUE(a && b);
  for (const WrittenModel& m : kModels) {
    SCOPED_TRACE(m.file);
    const std::string path = path_of(dir, m);
    const std::string expected = moe_text(moe_options(path));
    EXPECT_GE(distinct_bytes(expected), 6u) << expected;
    EXPECT_EQ(moe_text(on_servers(moe_options(path), *a, *b, {1, 1})), expected);
  }
}

// gpt-oss, the architecture with the most expert tensors: its experts'
// matrices and biases on server a, everything else on server b.
TEST(MoeIndependentFiles, ExpertsOnOneServerTheRestOnAnotherGenerateTheLocalText) {
  test::ScopedTempDir dir;
  ASSERT_TRUE(write_models(dir));
  const WrittenModel& m = kModels[3];
  const std::string path = path_of(dir, m);
  const std::string expected = moe_text(moe_options(path));
  ASSERT_GE(distinct_bytes(expected), 6u) << expected;

  auto a = start_cpu_server(), b = start_cpu_server();
  ASSERT_TRUE(a && b);
  const std::string experts_device = a->endpoint() + "/cpu0";
  ModelOptions o = on_servers(moe_options(path), *a, *b, {0, 1});
  o.tensor_overrides = {{"_exps", experts_device}};
  auto model = Model::open(o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(model.value().info().architecture, "gpt-oss");
  const std::string& placement = model.value().info().placement;
  const std::string line = test::placement_row(placement, "_exps");
  ASSERT_FALSE(line.empty()) << placement;
  EXPECT_TRUE(contains(line, experts_device)) << line;
  // gate, up and down experts and their biases, of each layer
  EXPECT_TRUE(contains(line, " " + std::to_string(6 * m.n_layer) + " ")) << line;

  auto r = model.value().generate(test::kMoePrompt, test::greedy(test::kMoeTokens));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().text, expected);
  EXPECT_TRUE(contains(r.value().schedule, "'blk.0.ffn_down_exps.bias' -> [0] " + experts_device))
      << r.value().schedule;
}

}  // namespace
}  // namespace tensorpc
