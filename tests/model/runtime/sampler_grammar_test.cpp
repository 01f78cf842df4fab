// Sampler with a grammar: whatever the logits, the tokens it picks keep the
// text a valid prefix of the grammar, the end of text comes only once the
// text is complete, greedy picks the most likely allowed token, and at
// temperature > 0 the odds are those of the masked distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "model/arch/llama_model.h"
#include "model/runtime/grammar_testing.h"
#include "model/runtime/sampler.h"

namespace tensorpc {
namespace {

class SamplerGrammar : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
    model = LlamaModel::open(path).value();
    vocab = std::make_shared<GrammarVocabulary>(model->tokenizer());
  }
  SamplerOptions with(const std::string& gbnf, float temperature, uint64_t seed) const {
    SamplerOptions o;
    o.temperature = temperature;
    o.top_k = 0;
    o.top_p = 1.0f;
    o.repeat_penalty = 1.0f;
    o.seed = seed;
    o.grammar = test::parse_or_fail(gbnf);
    o.grammar_vocabulary = vocab;
    return o;
  }
  std::unique_ptr<LlamaModel> model;
  std::shared_ptr<const GrammarVocabulary> vocab;
};

TEST_F(SamplerGrammar, RandomLogitsStillGiveTextTheGrammarAccepts) {
  const std::string gbnf = R"(root ::= "{\"book\": \"" ("Genesis" | "Exodus") "\", \"chapter\": " [1-9] [0-9]? "}")";
  const int32_t n_vocab = model->tokenizer().n_tokens();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Sampler s = Sampler::create(with(gbnf, seed % 2 == 0 ? 0.0f : 1.0f, seed)).value();
    GrammarState state(test::parse_or_fail(gbnf));
    std::string text;
    bool ended = false;
    for (int step = 0; step < 200 && !ended; ++step) {
      std::vector<float> logits(static_cast<size_t>(n_vocab));
      for (float& l : logits) l = normal(rng);
      const int32_t t = s.sample(logits);
      ASSERT_GE(t, 0) << "seed " << seed << " after " << text;
      if (vocab->is_end(t)) {
        EXPECT_TRUE(state.complete()) << "ended early: " << text;
        ended = true;
        break;
      }
      ASSERT_TRUE(vocab->advance(state, t)) << "seed " << seed << ": " << text << " + " << vocab->piece(t);
      text += vocab->piece(t);
      s.accept(t, /*generated=*/true);
    }
    EXPECT_TRUE(ended) << "seed " << seed << ": " << text;
    EXPECT_TRUE(text.starts_with("{\"book\": \"")) << text;
  }
}

TEST_F(SamplerGrammar, GreedyPicksTheMostLikelyAllowedToken) {
  const std::string gbnf = R"(root ::= "Amen")";
  Sampler s = Sampler::create(with(gbnf, 0.0f, 1)).value();
  const int32_t n_vocab = model->tokenizer().n_tokens();
  std::vector<float> logits(static_cast<size_t>(n_vocab), 0.0f);
  // The most likely token overall is refused; among the allowed ones, the likelier wins.
  const std::vector<int32_t> allowed = [&] {
    std::vector<uint8_t> mask;
    GrammarScratch scratch;
    vocab->mask(GrammarState(test::parse_or_fail(gbnf)), mask, scratch);
    std::vector<int32_t> out;
    for (int32_t t = 0; t < n_vocab; ++t) {
      if (mask[static_cast<size_t>(t)]) out.push_back(t);
    }
    return out;
  }();
  ASSERT_GE(allowed.size(), 2u);
  logits[static_cast<size_t>(allowed[0])] = 3.0f;
  logits[static_cast<size_t>(allowed[1])] = 5.0f;
  const int32_t refused = allowed[1] + 1 < n_vocab && allowed[1] + 1 != allowed[0] ? allowed[1] + 1 : 0;
  logits[static_cast<size_t>(refused)] = 9.0f;
  EXPECT_EQ(s.sample(logits), allowed[1]);
  EXPECT_EQ(s.candidates_needed(n_vocab), 0) << "a grammar needs every logit";
}

}  // namespace
}  // namespace tensorpc
