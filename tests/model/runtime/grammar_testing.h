// Random walks under a grammar: tokens drawn uniformly from those the grammar
// allows next, with a seeded engine, until an end token; one draw in three is
// among the allowed tokens that close something (a quote, bracket, brace or
// parenthesis), so that walks under JSON grammars end in a few hundred tokens.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "model/runtime/grammar.h"
#include "model/runtime/grammar_vocabulary.h"

namespace tensorpc::test {

inline std::string read_test_file(const std::string& relative) {
  std::ifstream in(std::string(TENSORPC_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::shared_ptr<const Grammar> parse_or_fail(const std::string& gbnf) {
  auto grammar = Grammar::parse(gbnf);
  EXPECT_TRUE(grammar.ok()) << grammar.status().to_string();
  return grammar.ok() ? grammar.value() : nullptr;
}

// The text of a walk of at most `max_tokens` tokens: at each step the mask
// is computed, the sampled token must also pass accepts(), and an end token,
// when allowed, is taken with probability 1/2 (one step in three favours closing tokens). nullopt when the walk did not
// end in time. Fails the test if mask and accepts disagree on a probe token.
inline std::optional<std::string> random_walk(const GrammarVocabulary& vocab, std::shared_ptr<const Grammar> grammar,
                                              uint64_t seed, int max_tokens) {
  std::mt19937_64 rng(seed);
  GrammarState state(std::move(grammar));
  GrammarScratch scratch;
  std::vector<uint8_t> mask;
  std::string text;
  for (int step = 0; step < max_tokens; ++step) {
    const int32_t n_allowed = vocab.mask(state, mask, scratch);
    EXPECT_GT(n_allowed, 0) << "no token allowed after '" << text << "'";
    if (n_allowed == 0) return std::nullopt;
    std::vector<int32_t> allowed, ends;
    for (int32_t t = 0; t < vocab.n_tokens(); ++t) {
      if (!mask[t]) continue;
      (vocab.is_end(t) ? ends : allowed).push_back(t);
    }
    EXPECT_EQ(static_cast<int32_t>(allowed.size() + ends.size()), n_allowed);
    // A few probes: the fast path agrees with the mask, allowed or not.
    for (int k = 0; k < 4; ++k) {
      const auto probe = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab.n_tokens()));
      EXPECT_EQ(vocab.accepts(state, probe, scratch), mask[probe] != 0)
          << "token " << probe << " '" << vocab.piece(probe) << "' after '" << text << "'";
    }
    if (!ends.empty() && (allowed.empty() || rng() % 2 == 0)) {
      EXPECT_TRUE(state.complete());
      return text;
    }
    // One step in three, a token that closes something, if one is allowed, so that walks end.
    std::vector<int32_t> closing;
    for (const int32_t t : allowed) {
      if (vocab.piece(t).find_first_of("\"}])") != std::string::npos) closing.push_back(t);
    }
    const auto& pool = !closing.empty() && rng() % 3 == 0 ? closing : allowed;
    const int32_t token = pool[rng() % pool.size()];
    EXPECT_TRUE(vocab.accepts(state, token, scratch));
    EXPECT_TRUE(vocab.advance(state, token)) << "'" << vocab.piece(token) << "' after '" << text << "'";
    text += vocab.piece(token);
  }
  return std::nullopt;
}

}  // namespace tensorpc::test
