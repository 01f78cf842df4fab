// Sampler: greedy is argmax, seeds reproduce, top-k / top-p / temperature
// shape the distribution as specified, the repetition penalty demotes recent
// tokens, and non-finite logits or bad options never crash.
#include "model/runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace tensorpc {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Sampler make(SamplerOptions o) { return Sampler::create(o).value(); }

SamplerOptions plain(float temperature, uint64_t seed = 1) {
  SamplerOptions o;
  o.temperature = temperature;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.repeat_penalty = 1.0f;
  o.seed = seed;
  return o;
}

std::vector<float> random_logits(std::mt19937& rng, int n) {
  std::normal_distribution<float> normal(0.0f, 3.0f);  // test data only; portability does not matter here
  std::vector<float> logits(n);
  for (float& l : logits) l = normal(rng);
  return logits;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Fraction of `draws` samples that pick each token.
std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) {
    const int32_t t = s.sample(logits);
    EXPECT_GE(t, 0);
    if (t >= 0) f[t] += 1.0 / draws;
  }
  return f;
}

TEST(SamplerGreedy, PicksTheArgmaxAndTheLowestIdOnTies) {
  Sampler s = make(plain(0.0f));
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) {
    const std::vector<float> logits = random_logits(rng, 1000);
    EXPECT_EQ(s.sample(logits), argmax(logits));
  }
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 3, 2}), 1);
}

TEST(SamplerSeed, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const std::vector<float> logits(50, 0.0f);  // flat: every draw depends on the engine
  Sampler a = make(plain(1.0f, 42)), b = make(plain(1.0f, 42)), c = make(plain(1.0f, 43));
  int differences = 0;
  for (int i = 0; i < 2000; ++i) {
    const int32_t ta = a.sample(logits);
    EXPECT_EQ(ta, b.sample(logits));
    differences += ta != c.sample(logits);
  }
  EXPECT_GT(differences, 1500);  // about 2000 * 49/50 expected
}

TEST(SamplerTopK, TopKOneIsGreedy) {
  SamplerOptions o = plain(1.5f);
  o.top_k = 1;
  Sampler s = make(o);
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    const std::vector<float> logits = random_logits(rng, 300);
    EXPECT_EQ(s.sample(logits), argmax(logits));
  }
}

TEST(SamplerTopK, OnlyTheKBestCanBeDrawn) {
  SamplerOptions o = plain(1.0f);
  o.top_k = 2;
  Sampler s = make(o);
  const std::vector<double> f = frequencies(s, {0.0f, 3.0f, 2.9f, 1.0f}, 5000);
  EXPECT_EQ(f[0] + f[3], 0.0);
  EXPECT_NEAR(f[1], 1.0 / (1.0 + std::exp(-0.1)), 0.03);
}

TEST(SamplerTopP, TinyTopPIsGreedy) {
  SamplerOptions o = plain(1.0f);
  o.top_p = 1e-6f;
  Sampler s = make(o);
  std::mt19937 rng(13);
  for (int i = 0; i < 200; ++i) {
    const std::vector<float> logits = random_logits(rng, 300);
    EXPECT_EQ(s.sample(logits), argmax(logits));
  }
}

TEST(SamplerTopP, KeepsTheSmallestSetReachingP) {
  SamplerOptions o = plain(1.0f);
  o.top_p = 0.7f;
  Sampler s = make(o);
  // Probabilities 0.5, 0.3, 0.2: 0.5 < 0.7 <= 0.8, so tokens 0 and 1 remain, renormalised to 5/8 and 3/8.
  const std::vector<double> f = frequencies(s, {std::log(0.5f), std::log(0.3f), std::log(0.2f)}, 20000);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_NEAR(f[0], 5.0 / 8.0, 0.02);
}

TEST(SamplerTemperature, ScalesTheDistributionAsSoftmaxOfLogitsOverT) {
  // Logits 0 and ln 2: p(1) = 2^(1/T) / (1 + 2^(1/T)).
  const std::vector<float> logits = {0.0f, std::log(2.0f)};
  for (float t : {0.5f, 1.0f, 2.0f}) {
    Sampler s = make(plain(t, 99));
    const double expected = std::pow(2.0, 1.0 / t) / (1.0 + std::pow(2.0, 1.0 / t));
    EXPECT_NEAR(frequencies(s, logits, 20000)[1], expected, 0.02) << "temperature " << t;
  }
}

TEST(SamplerRepeatPenalty, DemotesRecentlySeenTokens) {
  SamplerOptions o = plain(0.0f);
  o.repeat_penalty = 1.1f;
  o.repeat_last_n = 3;
  Sampler s = make(o);
  const std::vector<float> positive = {2.0f, 1.9f, 0.0f, 0.0f};       // 2.0 / 1.1 < 1.9
  const std::vector<float> negative = {-1.0f, -1.05f, -5.0f, -5.0f};  // -1.0 * 1.1 < -1.05
  EXPECT_EQ(s.sample(positive), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(positive), 1);
  EXPECT_EQ(s.sample(negative), 1);
  s.accept(0);  // seen twice: still penalised once
  EXPECT_EQ(s.sample(positive), 1);
  for (int32_t t : {2, 3, 2}) s.accept(t);  // token 0 leaves the window of 3
  EXPECT_EQ(s.sample(positive), 0);
  s.accept(0);
  s.reset_history();
  EXPECT_EQ(s.sample(positive), 0);
}

// OpenAI's definitions: logit - count * frequency_penalty - (count > 0) * presence_penalty,
// count being how many times the token was generated (prompt tokens do not count).
TEST(SamplerOpenAiPenalties, LowerGeneratedTokensByPresenceOnceAndFrequencyPerTime) {
  SamplerOptions o = plain(0.0f);
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.25f;
  Sampler s = make(o);
  const std::vector<float> logits = {2.0f, 1.3f, 1.0f, 0.0f};
  s.accept(0);  // a prompt token
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0, /*generated=*/true);  // 2.0 - 0.5 - 0.25 = 1.25 < 1.3
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(1, /*generated=*/true);  // token 1: 1.3 - 0.75 = 0.55; token 0 still 1.25
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0, /*generated=*/true);  // token 0: 2.0 - 0.5 - 0.5 = 1.0, a tie with token 2 (lowest id wins)
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0, /*generated=*/true);  // 0.75 < 1.0
  EXPECT_EQ(s.sample(logits), 2);
  s.reset_history();
  EXPECT_EQ(s.sample(logits), 0);
  o.presence_penalty = -2.0f;  // negative: favours what came
  o.frequency_penalty = 0.0f;
  Sampler eager = make(o);
  eager.accept(2, /*generated=*/true);
  EXPECT_EQ(eager.sample(logits), 2);  // 1.0 + 2 = 3.0
}

TEST(SamplerLogitBias, AddsToTheNamedTokensAndMinus100Bans) {
  SamplerOptions o = plain(0.0f);
  o.logit_bias = {{0, -100.0f}, {3, 1.5f}};
  Sampler s = make(o);
  EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.0f, 0.0f, 0.0f}), 3);  // 0 + 1.5 > 1.0; 2 - 100 < all
  o.logit_bias = {{1, 5.0f}};
  o.temperature = 1.0f;
  Sampler hot = make(o);
  std::vector<double> f = frequencies(hot, {0.0f, 0.0f, 0.0f}, 2000);
  EXPECT_GT(f[1], 0.97);  // e^5 / (e^5 + 2) = 0.987
}

TEST(SamplerNonFinite, NaNIsNeverChosenAndInfinityWins) {
  const std::vector<float> with_nan = {kNaN, 1.0f, kNaN, 0.5f};
  EXPECT_EQ(make(plain(0.0f)).sample(with_nan), 1);
  Sampler s = make(plain(1.0f));
  const std::vector<double> f = frequencies(s, with_nan, 2000);
  EXPECT_EQ(f[0] + f[2], 0.0);

  const std::vector<float> with_inf = {1.0f, kInf, -kInf, kInf};
  EXPECT_EQ(make(plain(0.0f)).sample(with_inf), 1);
  const std::vector<double> g = frequencies(s, with_inf, 2000);
  EXPECT_EQ(g[0] + g[2], 0.0);
  EXPECT_NEAR(g[1], 0.5, 0.05);
}

TEST(SamplerNonFinite, NoPossibleTokenGivesMinusOne) {
  for (float t : {0.0f, 1.0f}) {
    Sampler s = make(plain(t));
    EXPECT_EQ(s.sample(std::vector<float>{}), -1);
    EXPECT_EQ(s.sample(std::vector<float>{kNaN, -kInf, kNaN}), -1);
  }
}

TEST(SamplerOptions, InvalidOptionsAreRejected) {
  EXPECT_TRUE(SamplerOptions{}.validate().ok());
  const auto rejected = [](auto change) {
    SamplerOptions o;
    change(o);
    return !o.validate().ok() && Sampler::create(o).status().code() == StatusCode::invalid_argument;
  };
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.top_p = 0.0f; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.top_p = 1.5f; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.top_p = kNaN; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.temperature = -0.1f; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.temperature = kNaN; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.top_k = -1; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.repeat_penalty = 0.0f; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.repeat_last_n = -1; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.min_p = -0.1f; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.min_p = 1.5f; }));
  EXPECT_TRUE(rejected([](SamplerOptions& o) { o.min_p = kNaN; }));
}

TEST(SamplerMinP, DropsTokensLessLikelyThanAFractionOfTheBestAtTemperatureOne) {
  // Probabilities at temperature 1: 0.5, 0.3, 0.15, 0.05. min_p 0.25 keeps
  // p >= 0.125: the first three, in proportion at temperature 1.
  SamplerOptions o = plain(1.0f, 7);
  o.min_p = 0.25f;
  Sampler s = make(o);
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const std::vector<double> f = frequencies(s, logits, 20000);
  EXPECT_EQ(f[3], 0.0);
  EXPECT_NEAR(f[0], 0.5 / 0.95, 0.02);
  EXPECT_NEAR(f[1], 0.3 / 0.95, 0.02);
  EXPECT_NEAR(f[2], 0.15 / 0.95, 0.02);
  // The cut is on temperature-1 probabilities: a high temperature flattens
  // what is drawn, not what is kept.
  o.temperature = 100.0f;
  Sampler hot = make(o);
  const std::vector<double> g = frequencies(hot, logits, 20000);
  EXPECT_EQ(g[3], 0.0);
  EXPECT_NEAR(g[2], 1.0 / 3.0, 0.02);
  // min_p 1 keeps only the most likely token.
  o.min_p = 1.0f;
  Sampler only_best = make(o);
  EXPECT_NEAR(frequencies(only_best, logits, 200)[0], 1.0, 1e-12);
}

}  // namespace
}  // namespace tensorpc
