// Perplexity: the arithmetic (NLL, its mean and error, the KL divergence), the
// logits of every token that scoring needs, the bundled model's figure on a held-out King
// James passage (tests/data/kjv-heldout.txt: Nahum and Habakkuk) against a
// float64 reference, quantized copies of it within stated margins of that
// figure, the same figure over a server, and the command's errors.
#include "tensorpc/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "file_util.h"
#include "model/runtime/generate.h"
#include "model/runtime/perplexity.h"
#include "rpc/remote_test_util.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/demo.h"
#include "tensorpc/quantize.h"
#include "test_util.h"

// TENSORPC_SOURCE_DIR: the repository, from tests/CMakeLists.txt.
namespace tensorpc::tools {
namespace {

using test::Capture;
using test::contains;

const std::string kHeldOut = std::string(TENSORPC_SOURCE_DIR) + "/tests/data/kjv-heldout.txt";

TEST(PerplexityStats, MeanPerplexityAndErrorAsLlamaPerplexityComputesThem) {
  NllStats s;
  EXPECT_EQ(s.perplexity_error(), 0.0);
  for (double x : {1.0, 2.0, 3.0}) s.add(x);
  EXPECT_EQ(s.count(), 3);
  EXPECT_DOUBLE_EQ(s.mean(), 2.0);
  EXPECT_DOUBLE_EQ(s.perplexity(), std::exp(2.0));
  // The population variance (2/3) over N - 1, carried through exp.
  EXPECT_NEAR(s.perplexity_error(), std::exp(2.0) * std::sqrt((2.0 / 3.0) / 2.0), 1e-12);
}

TEST(PerplexityStats, TokenNllIsMinusLogSoftmax) {
  const std::vector<float> uniform(1000, 3.5f);
  EXPECT_NEAR(token_nll(uniform, 17), std::log(1000.0), 1e-9);
  const std::vector<float> logits = {1000.0f, 0.0f, -1000.0f};  // no overflow however large
  EXPECT_NEAR(token_nll(logits, 0), 0.0, 1e-9);
  EXPECT_NEAR(token_nll(logits, 1), 1000.0, 1e-6);
  EXPECT_TRUE(std::isnan(token_nll(logits, 3)));
  EXPECT_TRUE(std::isnan(token_nll(logits, -1)));
}

TEST(PerplexityStats, TokenDivergenceIsTheKlDivergenceOfTheSoftmaxes) {
  // Base (1/2, 1/2), model (3/4, 1/4): 1/2 log(2/3) + 1/2 log 2 = 1/2 log(4/3).
  const TokenDivergence d = token_divergence(std::vector<float>{0.0f, 0.0f}, std::vector<float>{std::log(3.0f), 0.0f});
  EXPECT_NEAR(d.kl, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_TRUE(d.same_top);  // the base's tie ranks the lower index first
  // Swapped logits: p (1 - p) * 2 each way, i.e. 2 tanh(1); the tops differ.
  const TokenDivergence swapped = token_divergence(std::vector<float>{0.0f, 2.0f}, std::vector<float>{2.0f, 0.0f});
  EXPECT_NEAR(swapped.kl, 2 * std::tanh(1.0), 1e-6);
  EXPECT_FALSE(swapped.same_top);
  const std::vector<float> extreme = {1000.0f, 0.0f, -1000.0f};  // no overflow however large
  EXPECT_EQ(token_divergence(extreme, extreme).kl, 0.0);
  EXPECT_TRUE(std::isnan(token_divergence(extreme, std::vector<float>{1.0f, 2.0f}).kl));
}

// The bundled model (or a file made from it) on the local CPU, two threads,
// with a cache of one 128-token chunk.
PlacementOptions one_chunk_of_cache() {
  PlacementOptions o;
  o.n_ctx = 128;
  return o;
}

struct LocalModel {
  explicit LocalModel(const std::string& path)
      : model(LlamaModel::open(path, {.digest_dir = ""}).value()),
        placement(ModelPlacement::create(*model, {&cpu}, one_chunk_of_cache()).value()) {}
  std::unique_ptr<LlamaModel> model;
  CpuDevice cpu{CpuDeviceOptions{.threads = 2}};
  std::unique_ptr<ModelPlacement> placement;
};

// Perplexity over the first `chunks` chunks of the held-out text (0: all).
PerplexityResult held_out_perplexity(const std::string& path, int64_t chunks = 0) {
  LocalModel m(path);
  Generator gen(*m.model, *m.placement, {.n_batch = 128});
  const std::vector<int32_t> tokens = m.model->tokenizer().encode(test::read_file(kHeldOut));
  return measure_perplexity(gen, tokens, {.n_ctx = 128, .max_chunks = chunks}).value();
}

TEST(PerplexityLogits, EvalAllGivesEachTokensLogitsAsEvaluatingItsPrefixWould) {
  LocalModel m(bundled_model_path());
  const std::vector<int32_t> tokens =
      m.model->tokenizer().encode("And the LORD answered me, and said, Write the vision");
  ASSERT_GE(tokens.size(), 10u);
  const size_t n_vocab = static_cast<size_t>(m.model->hparams().n_vocab);
  Generator all(*m.model, *m.placement, {.n_batch = 4});  // several batches: rows append in order
  const std::vector<float> rows = all.eval_all(tokens).value();
  ASSERT_EQ(rows.size(), tokens.size() * n_vocab);
  for (size_t i : {size_t{0}, size_t{3}, size_t{4}, tokens.size() - 1}) {
    Generator one(*m.model, *m.placement);
    ASSERT_TRUE(one.reset().ok());
    const std::vector<float> last = one.eval(std::span(tokens).first(i + 1)).value();
    for (size_t v = 0; v < n_vocab; ++v) ASSERT_NEAR(rows[i * n_vocab + v], last[v], 2e-3) << "row " << i;
  }
}

TEST(Perplexity, TheBundledModelOnTheHeldOutPassageMatchesAFloat64Reference) {
  // tools/train/sample.py's float64 numpy forward pass, scored the same way,
  // gives 49.6935 ± 2.6546 over 2079 tokens (33 chunks of 128).
  const PerplexityResult r = held_out_perplexity(bundled_model_path());
  EXPECT_EQ(r.chunks, 33);
  EXPECT_EQ(r.stats.count(), 33 * 63);
  EXPECT_TRUE(std::isfinite(r.stats.perplexity()));
  EXPECT_NEAR(r.stats.perplexity(), 49.6935, 0.05);
  EXPECT_NEAR(r.stats.perplexity_error(), 2.6546, 0.01);
}

// A quantized copy of the bundled model: loads, generates, and scores within
// `margin` (relative) of the original's perplexity. On this model every K
// type falls back (rows of 128 and 384), so Q4_K_M is q5_0 with q8_0 on
// use_more_bits layers, Q6_K is q8_0, and outputs are q8_0. Measured over
// all 33 chunks: original 49.6935; Q8_0 49.6971, Q6_K 49.6971, Q5_K_M 49.7379,
// Q4_K_M 49.7229, Q4_0 49.9890, IQ4_NL 49.6329.
struct QuantizedCase {
  const char* mix;
  double margin;
};

class PerplexityQuantized : public ::testing::TestWithParam<QuantizedCase> {};

TEST_P(PerplexityQuantized, LoadsGeneratesAndStaysWithinItsMarginOfTheOriginal) {
  const QuantizedCase& c = GetParam();
  test::ScopedTempDir dir;
  const std::string path = dir.path + "/q.gguf";
  Capture out, err;
  ASSERT_EQ(quantize_command({bundled_model_path(), path, c.mix, 2}, out.f, err.f), 0) << err.text();
  {
    LocalModel m(path);
    GenerateOptions g;
    g.n_predict = 8;
    g.stop_at_eos = false;
    g.sampler.temperature = 0;
    auto r = generate_text(*m.model, *m.placement, "In the beginning", g);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r.value().generated.size(), 8u);
    EXPECT_FALSE(r.value().text.empty());
  }
  static const double original = held_out_perplexity(bundled_model_path()).stats.perplexity();
  const double ppl = held_out_perplexity(path).stats.perplexity();
  EXPECT_NEAR(ppl / original, 1.0, c.margin) << c.mix << ": " << ppl << " against " << original;
}

INSTANTIATE_TEST_SUITE_P(PerplexityMixes, PerplexityQuantized,
                         ::testing::Values(QuantizedCase{"Q8_0", 0.003}, QuantizedCase{"Q6_K", 0.003},
                                           QuantizedCase{"Q5_K_M", 0.01}, QuantizedCase{"Q4_K_M", 0.01},
                                           QuantizedCase{"Q4_0", 0.025}, QuantizedCase{"IQ4_NL", 0.015}),
                         [](const auto& info) { return std::string(info.param.mix); });

TEST(Perplexity, TheDivergenceFromItselfIsZeroAndFromAQuantizedCopySmall) {
  test::ScopedTempDir dir;
  const std::string q4 = dir.path + "/q4_0.gguf";
  Capture out, err;
  ASSERT_EQ(quantize_command({bundled_model_path(), q4, "Q4_0", 2}, out.f, err.f), 0) << err.text();
  LocalModel base(bundled_model_path());
  Generator base_gen(*base.model, *base.placement, {.n_batch = 128});
  const std::vector<int32_t> tokens = base.model->tokenizer().encode(test::read_file(kHeldOut));
  for (const std::string& path : {bundled_model_path(), q4}) {
    LocalModel m(path);
    Generator gen(*m.model, *m.placement, {.n_batch = 128});
    PerplexityOptions o{.n_ctx = 128, .max_chunks = 4};
    o.base = &base_gen;
    const PerplexityResult r = measure_perplexity(gen, tokens, o).value();
    ASSERT_EQ(r.kl.count(), r.stats.count());
    if (path == q4) {
      EXPECT_GT(r.kl.mean(), 1e-4);  // 4-bit weights move the distributions, a little
      EXPECT_LT(r.kl.mean(), 0.05);
      EXPECT_GT(r.same_top, r.kl.count() * 9 / 10);
      EXPECT_GT(r.kl.mean_error(), 0.0);
    } else {
      EXPECT_LT(r.kl.mean(), 1e-9);
      EXPECT_EQ(r.same_top, r.kl.count());
    }
  }
}

// ---- the command --------------------------------------------------------------

// The first line the command writes to stdout: "perplexity: …".
std::string result_line(const Capture& out) {
  const std::string text = out.text();
  return text.substr(0, text.find('\n'));
}

TEST(PerplexityCommand, OverALocalServerEqualsTheLocalCpu) {
  test::InProcessServer server;  // one CPU device of two threads, as the local one
  test::ScopedTempDir digests;
  test::ScopedEnv digest_dir("TENSORPC_DIGEST_DIR", digests.path);  // the model's digests go there, not to ~/.cache
  PerplexityCommandOptions local;
  local.setup.model = bundled_model_path();
  local.setup.threads = 2;
  local.text_file = kHeldOut;
  local.chunks = 4;
  PerplexityCommandOptions remote = local;
  remote.setup.endpoints = {server.endpoint()};
  remote.setup.use_local = false;

  Capture out_local, err_local, out_remote, err_remote;
  ASSERT_EQ(perplexity_command(local, out_local.f, err_local.f), 0) << err_local.text();
  ASSERT_EQ(perplexity_command(remote, out_remote.f, err_remote.f), 0) << err_remote.text();
  EXPECT_TRUE(contains(err_remote.text(), server.endpoint() + "/cpu0")) << err_remote.text();  // the placement
  EXPECT_TRUE(contains(result_line(out_local), "over 252 tokens (4 chunks of 128)")) << out_local.text();
  EXPECT_EQ(result_line(out_remote), result_line(out_local));
  EXPECT_TRUE(contains(out_local.text(), "tokens/s")) << out_local.text();
}

TEST(PerplexityCommand, KlBasePrintsTheDivergenceAndRefusesAnotherVocabulary) {
  test::ScopedTempDir dir;
  const std::string q8 = dir.path + "/q8_0.gguf";
  Capture qout, qerr;
  ASSERT_EQ(quantize_command({bundled_model_path(), q8, "Q8_0", 2}, qout.f, qerr.f), 0) << qerr.text();
  PerplexityCommandOptions o;
  o.setup.model = q8;
  o.setup.threads = 2;
  o.text_file = kHeldOut;
  o.chunks = 2;
  o.kl_base = bundled_model_path();
  Capture out, err;
  ASSERT_EQ(perplexity_command(o, out.f, err.f), 0) << err.text();
  EXPECT_TRUE(contains(out.text(), "KL divergence from " + bundled_model_path() + ": 0.0")) << out.text();
  EXPECT_TRUE(contains(out.text(), "the same top token for ")) << out.text();
  EXPECT_TRUE(contains(out.text(), "% of 126 tokens")) << out.text();

  o.kl_base = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";  // 4096 tokens, the bundled model 2048
  Capture out2, err2;
  EXPECT_EQ(perplexity_command(o, out2.f, err2.f), 1);
  EXPECT_TRUE(contains(err2.text(), "--kl-base " + o.kl_base + ": the base model's vocabulary has 4096 tokens"))
      << err2.text();
  o.kl_base = "/nonexistent/base.gguf";
  Capture out3, err3;
  EXPECT_EQ(perplexity_command(o, out3.f, err3.f), 1);
  EXPECT_TRUE(contains(err3.text(), "cannot open '/nonexistent/base.gguf'")) << err3.text();
}

TEST(PerplexityCommand, ATextShorterThanTwoChunksIsAClearError) {
  test::TempFile text("In the beginning God created the heaven and the earth.\n");
  PerplexityCommandOptions o;
  o.setup.model = bundled_model_path();
  o.text_file = text.path;
  Capture out, err;
  EXPECT_EQ(perplexity_command(o, out.f, err.f), 1);
  EXPECT_TRUE(contains(err.text(), "chunks of 128 need at least 256 (two chunks)")) << err.text();
}

TEST(PerplexityCommand, AMissingTextOrModelIsAnErrorNamingTheFile) {
  PerplexityCommandOptions o;
  o.setup.model = bundled_model_path();
  o.text_file = "/nonexistent/text.txt";
  Capture out, err;
  EXPECT_EQ(perplexity_command(o, out.f, err.f), 1);
  EXPECT_TRUE(contains(err.text(), "cannot read /nonexistent/text.txt")) << err.text();
  o.text_file = kHeldOut;
  o.setup.model = "/nonexistent/model.gguf";
  Capture out2, err2;
  EXPECT_EQ(perplexity_command(o, out2.f, err2.f), 1);
  EXPECT_TRUE(contains(err2.text(), "cannot open '/nonexistent/model.gguf'")) << err2.text();
}

}  // namespace
}  // namespace tensorpc::tools
