// Sampler::sample_candidates: from the largest logits alone (as a device's
// top_k op lays them out) it picks exactly the token sample() picks from all
// of them, draw for draw, for every chain the generator uses it for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "model/runtime/sampler.h"
#include "model/runtime/sampler_testing.h"

namespace tensorpc {
namespace {

using test::chains;
using test::Chain;
using test::rough_logits;
using test::top_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplerCandidates, PickTheSameTokensAsAllLogitsDrawForDraw) {
  std::mt19937 rng(11);
  for (const Chain& chain : chains()) {
    for (int vocab : {3, 64, 257, 2048}) {
      SamplerOptions o = chain.options;
      o.seed = 99;
      Sampler full = Sampler::create(o).value();
      Sampler partial = Sampler::create(o).value();
      for (int step = 0; step < 200; ++step) {
        // Asked each step, as the generator does: OpenAI's penalties need more as more tokens come.
        const int64_t k = partial.candidates_needed(vocab);
        ASSERT_GT(k, 0) << chain.name;
        ASSERT_LE(k, vocab);
        const std::vector<float> logits = rough_logits(rng, vocab);
        const int32_t want = full.sample(logits);
        StatusOr<int32_t> got = partial.sample_candidates(top_of(logits, k), vocab);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        ASSERT_EQ(got.value(), want) << chain.name << ", vocabulary " << vocab << ", step " << step;
        // Both accept the same token, so the histories stay equal and the
        // penalty bites on later steps.
        const int32_t accepted = want >= 0 ? want : step % vocab;
        full.accept(accepted, /*generated=*/true);
        partial.accept(accepted, /*generated=*/true);
      }
    }
  }
}

TEST(SamplerCandidates, HowManyAreNeeded) {
  SamplerOptions o;  // top-k 40
  o.repeat_penalty = 1.1f;  // over the last 64
  EXPECT_EQ(Sampler::create(o).value().candidates_needed(32000), 40 + 1 + 64);
  EXPECT_EQ(Sampler::create(o).value().candidates_needed(50), 50);  // never more than the vocabulary
  o.temperature = 0;
  EXPECT_EQ(Sampler::create(o).value().candidates_needed(32000), 1 + 64);
  o.repeat_penalty = 1.0f;
  EXPECT_EQ(Sampler::create(o).value().candidates_needed(32000), 1);
  o.repeat_penalty = 0.9f;  // a penalty below 1 raises logits: the largest alone cannot decide
  EXPECT_EQ(Sampler::create(o).value().candidates_needed(32000), 0);
  SamplerOptions no_top_k;
  no_top_k.top_k = 0;
  EXPECT_EQ(Sampler::create(no_top_k).value().candidates_needed(32000), 0);

  // OpenAI's adjustments: each token they lower is one more candidate; raising any needs all logits.
  SamplerOptions openai;
  openai.temperature = 0;
  openai.repeat_penalty = 1.0f;
  openai.presence_penalty = 0.5f;
  openai.logit_bias = {{7, -3.0f}};
  Sampler s = Sampler::create(openai).value();
  EXPECT_EQ(s.candidates_needed(32000), 1 + 1);
  s.accept(5);  // a prompt token: not penalised
  EXPECT_EQ(s.candidates_needed(32000), 1 + 1);
  s.accept(5, /*generated=*/true);
  s.accept(5, /*generated=*/true);
  s.accept(9, /*generated=*/true);
  EXPECT_EQ(s.candidates_needed(32000), 1 + 1 + 2);
  openai.logit_bias = {{7, 3.0f}};
  EXPECT_EQ(Sampler::create(openai).value().candidates_needed(32000), 0);
  openai.logit_bias.clear();
  openai.frequency_penalty = -0.5f;
  EXPECT_EQ(Sampler::create(openai).value().candidates_needed(32000), 0);
}

TEST(SamplerCandidates, AllInfiniteCandidatesAreUndecided) {
  SamplerOptions o;
  o.temperature = 0;
  o.repeat_penalty = 1.0f;
  Sampler s = Sampler::create(o).value();
  // Every candidate +inf: more +inf tokens may lie outside them.
  EXPECT_EQ(s.sample_candidates(std::vector<float>{kInf, 4.0f}, 100).value(), Sampler::kUndecided);
  // With a finite one among them, every +inf token is a candidate.
  EXPECT_EQ(s.sample_candidates(std::vector<float>{kInf, 1.0f, 9.0f, 4.0f}, 100).value(), 9);
  // The whole vocabulary as candidates decides anyway.
  EXPECT_EQ(s.sample_candidates(std::vector<float>{kInf, kInf, 1.0f, 0.0f}, 2).value(), 0);
}

TEST(SamplerCandidates, CandidatesThatAreNotDistinctTokensAreRefused) {
  Sampler s = Sampler::create(SamplerOptions{}).value();
  const auto refused = [&](std::vector<float> top, const char* needle) {
    StatusOr<int32_t> r = s.sample_candidates(top, 10);
    if (r.ok()) return ::testing::AssertionFailure() << "accepted";
    if (r.status().message().find(needle) == std::string::npos) {
      return ::testing::AssertionFailure() << r.status().to_string();
    }
    return ::testing::AssertionSuccess();
  };
  EXPECT_TRUE(refused({1.0f, 0.5f, 3.0f}, "not k candidates"));
  EXPECT_TRUE(refused({}, "not k candidates"));
  EXPECT_TRUE(refused({1.0f, 0.5f, 3.0f, 10.0f}, "token 10"));
  EXPECT_TRUE(refused({1.0f, 0.5f, 3.0f, -1.0f}, "token -1"));
  EXPECT_TRUE(refused({1.0f, 0.5f, 3.0f, 2.5f}, "token 2.5"));
  EXPECT_TRUE(refused({1.0f, 0.5f, 3.0f, kNaN}, "not one of the 10"));
  EXPECT_TRUE(refused({1.0f, 0.5f, 4.0f, 4.0f}, "token 4 is a candidate twice"));
}

}  // namespace
}  // namespace tensorpc
