// The sample op (op.h): top_k's candidates and the sample node on a device
// pick, draw for draw, the token a client's Sampler picks from every logit —
// the same chain on both sides — and say what they cannot decide.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "core/validate.h"
#include "model/runtime/sampler.h"
#include "model/runtime/sampler_testing.h"
#include "tensorpc/cpu_device.h"
#include "test_util.h"

namespace tensorpc::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(SampleOp, PicksTheTokenTheSamplerPicksFromEveryLogitDrawForDraw) {
  CpuDevice dev(CpuDeviceOptions{.threads = 2});
  std::mt19937 rng(5);
  for (const Chain& chain : chains()) {
    if (chain.options.adjusts_logits()) continue;  // the op runs the chain alone; such samplers pick on the client
    for (int vocab : {3, 64, 257, 2048}) {
      SCOPED_TRACE(std::string(chain.name) + ", vocabulary " + std::to_string(vocab));
      SamplerOptions o = chain.options;
      o.seed = 1234;
      Sampler full = Sampler::create(o).value();
      Sampler device_side = Sampler::create(o).value();
      const int64_t k = device_side.candidates_needed(vocab);
      ASSERT_GT(k, 0);
      Context ctx;
      Tensor* logits = input(ctx, DType::f32, {vocab}, "logits");
      Tensor* recent = input(ctx, DType::i32, {device_side.recent_slots()}, "recent");
      Tensor* draw = input(ctx, DType::i32, {2}, "draw");
      Tensor* token = ctx.sample(ctx.top_k(logits, static_cast<int>(k)), recent, draw, o.chain_settings(), vocab);
      ASSERT_EQ(token->type, DType::i32);
      ASSERT_EQ(token->nelements(), 1);
      GraphRun run(dev, {token});
      for (int step = 0; step < 100; ++step) {
        const std::vector<float> l = rough_logits(rng, vocab);
        const int32_t want = full.sample(l);
        const uint64_t bits = o.temperature > 0 ? device_side.peek_draw() : 0;
        run.write(logits, l);
        run.write_i32(recent, device_side.recent());
        run.write_i32(draw, {static_cast<int32_t>(bits & 0xffffffffu), static_cast<int32_t>(bits >> 32)});
        run.compute();
        const int32_t got = run.read_i32(token)[0];
        ASSERT_NE(got, kSampleBadCandidates);
        ASSERT_NE(got, kSampleUndecided);  // rough logits are never all +inf
        if (o.temperature > 0) device_side.commit_draw();
        ASSERT_EQ(got, want) << "step " << step;
        const int32_t accepted = want >= 0 ? want : step % vocab;
        full.accept(accepted);
        device_side.accept(accepted);
      }
    }
  }
}

// Candidates written by hand: what the op answers when no token, or no token
// from these alone, can be picked, and when they are not top_k's.
TEST(SampleOp, SaysWhenItCannotDecideAndRefusesCandidatesThatAreNotTokens) {
  CpuDevice dev(CpuDeviceOptions{.threads = 1});
  const auto pick = [&](const std::vector<float>& top, int64_t vocab, float temperature) {
    Context ctx;
    const int64_t k = static_cast<int64_t>(top.size() / 2);
    Tensor* candidates = input(ctx, DType::f32, {k, 2}, "candidates");
    Tensor* recent = input(ctx, DType::i32, {1}, "recent");
    Tensor* draw = input(ctx, DType::i32, {2}, "draw");
    SampleSettings s;
    s.temperature = temperature;
    Tensor* token = ctx.sample(candidates, recent, draw, s, vocab);
    GraphRun run(dev, {token});
    run.write(candidates, top);
    run.write_i32(recent, {-1});
    run.write_i32(draw, {0, 0});
    run.compute();
    return run.read_i32(token)[0];
  };
  for (float t : {0.0f, 0.8f}) {
    SCOPED_TRACE("temperature " + std::to_string(t));
    EXPECT_EQ(pick({kInf, 4.0f}, 100, t), kSampleUndecided);         // more +inf may be outside
    EXPECT_EQ(pick({kInf, kInf, 1.0f, 0.0f}, 2, t), 0);              // the whole vocabulary decides
    EXPECT_EQ(pick({kInf, 1.0f, 9.0f, 4.0f}, 100, t), 9);            // a finite one among them
    EXPECT_EQ(pick({-kInf, kNaN, 3.0f, 5.0f}, 10, t), kSampleNoToken);
    EXPECT_EQ(pick({1.0f, 0.5f, 3.0f, 10.0f}, 10, t), kSampleBadCandidates);  // token 10 of 10
    EXPECT_EQ(pick({1.0f, 0.5f, 4.0f, 4.0f}, 10, t), kSampleBadCandidates);   // token 4 twice
    EXPECT_EQ(pick({1.0f, 0.5f, 2.5f, 4.0f}, 10, t), kSampleBadCandidates);   // not a whole id
  }
  // A draw of 0 picks the most likely token, the largest draw the least
  // likely one kept (top-p below 1 orders them by likelihood).
  Context ctx;
  Tensor* candidates = input(ctx, DType::f32, {3, 2}, "candidates");
  Tensor* recent = input(ctx, DType::i32, {1}, "recent");
  Tensor* draw = input(ctx, DType::i32, {2}, "draw");
  SampleSettings s{.temperature = 1.0f, .top_k = 0, .top_p = 0.999f, .min_p = 0.0f, .repeat_penalty = 1.0f};
  Tensor* token = ctx.sample(candidates, recent, draw, s, 50);
  GraphRun run(dev, {token});
  run.write(candidates, {2.0f, 1.0f, 0.0f, 7.0f, 3.0f, 40.0f});
  run.write_i32(recent, {-1});
  for (const auto& [lo, hi, want] : {std::tuple{0, 0, 7}, std::tuple{-1, (1 << 21) - 1, 40}}) {
    run.write_i32(draw, {lo, hi});
    run.compute();
    EXPECT_EQ(run.read_i32(token)[0], want);
  }
}

TEST(SampleOp, ItsRuleRefusesBadShapesAndSettingsInTheBuilderAndOnTheWire) {
  const auto refused = [](auto&& build, const char* needle) {
    Context ctx;
    try {
      build(ctx);
    } catch (const Error& e) {
      if (e.status().message().find(needle) != std::string::npos) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << e.status().to_string();
    }
    return ::testing::AssertionFailure() << "built";
  };
  // One argument at a time made wrong.
  struct Args {
    std::array<int64_t, 4> candidates{8, 2, 1, 1};
    DType recent_type = DType::i32;
    int64_t draw = 2;
    SampleSettings settings;
    int64_t n_vocab = 100;
  };
  const auto build = [](const Args& a) {
    return [a](Context& c) {
      c.sample(c.new_tensor(DType::f32, a.candidates.data(), 4), c.new_tensor(a.recent_type, {4}),
               c.new_tensor(DType::i32, {a.draw}), a.settings, a.n_vocab);
    };
  };
  Args a;
  a.candidates = {8, 3, 1, 1};
  EXPECT_TRUE(refused(build(a), "must be [k, 2]"));
  a = Args{};
  a.recent_type = DType::f32;
  EXPECT_TRUE(refused(build(a), "recent"));
  a = Args{};
  a.draw = 3;
  EXPECT_TRUE(refused(build(a), "draw"));
  a = Args{};
  a.n_vocab = 7;
  EXPECT_TRUE(refused(build(a), "vocabulary of 7"));
  a = Args{};
  a.settings.temperature = kNaN;
  EXPECT_TRUE(refused(build(a), "temperature"));
  const SampleSettings ok;

  // A node from the wire is checked by the same rule, its params included.
  Context ctx;
  Tensor* node = ctx.sample(ctx.new_tensor(DType::f32, {8, 2}), ctx.new_tensor(DType::i32, {4}),
                            ctx.new_tensor(DType::i32, {2}), ok, 100);
  EXPECT_TRUE(validate_node(*node).ok());
  node->set_param(kSampleParamTopP, 0.0f);
  EXPECT_NE(validate_node(*node).message().find("top_p"), std::string::npos);
  node->set_param(kSampleParamTopP, 0.5f);
  node->set_param(kSampleParamNVocab, int32_t{4});
  EXPECT_NE(validate_node(*node).message().find("vocabulary of 4"), std::string::npos);
  node->set_param(kSampleParamNVocab, int32_t{100});
  node->src[2] = nullptr;
  EXPECT_NE(validate_node(*node).message().find("source 2 is missing"), std::string::npos);
}

}  // namespace
}  // namespace tensorpc::test
