// Sampler: picks the next token from a model's logits.
//
// The chain, in order:
//   0. OpenAI's adjustments, when asked: each token generated so far
//      (accept(token, /*generated=*/true)) loses presence_penalty once and
//      frequency_penalty for every time it came; logit_bias is added to the
//      tokens it names;
//   1. non-finite logits: NaN counts as -inf; if any logit is +inf, only the
//      +inf tokens remain, equally likely;
//   2. repetition penalty over the last repeat_last_n accepted tokens (each
//      distinct token once): a positive logit is divided by the penalty, a
//      negative one multiplied, so the token always becomes less likely;
//   3. temperature <= 0: greedy, the argmax (ties: the lowest id); else
//   4. top-k (0 = off), softmax of logit / temperature, top-p (the smallest
//      set of most likely tokens whose probability reaches top_p, at least
//      one token), min-p (tokens whose probability at temperature 1 is below
//      min_p times the most likely one's are dropped), and a draw from what
//      remains.
// The penalty applies to greedy decoding too: that is where repetition loops
// are most common.
//
// With a grammar, the chain's token is checked first (a few bytes matched);
// when the grammar refuses it, the tokens it refuses are set to -inf and the
// chain runs again with a new draw. Over the two, each allowed token comes
// with its probability under the masked distribution, so checking first
// changes no odds and spares the whole mask on most steps.
//
// Draws come from std::mt19937_64 seeded with `seed`, turned into a uniform
// number by our own code (the standard distributions are not portable), and
// candidates are ordered by a total order (logit, then id); so one seed gives
// the same tokens on every platform whose exp() agrees. The chain itself is
// src/core/sample_chain.h, which the sample op runs too: a device that
// samples (Generator::eval_sample) is given the settings, the recent tokens
// and the next draw (peek_draw), and picks the token this sampler would; the
// caller then moves the engine on (commit_draw).
//
// The chain needs only the largest logits when it keeps few tokens: the
// top_k after the penalty are among the top_k + (penalised tokens) largest
// before it (the penalty only lowers logits). candidates_needed() says how
// many, and sample_candidates() picks from just those (a device's top_k op:
// the generator then reads a few hundred bytes per token, not the whole
// vocabulary) exactly the token sample() would pick from all logits, with
// the same draws from the engine.
//
// A Sampler is not thread-safe: it holds the random engine and the history.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "core/sample_chain.h"
#include "model/runtime/grammar_vocabulary.h"
#include "tensorpc/status.h"

namespace tensorpc {

// The chain's settings (SampleSettings, tensorpc/context.h: temperature 0.8,
// top-k 40, top-p 0.95, min-p 0, repeat penalty 1) and the sampler's own.
struct SamplerOptions : SampleSettings {
  int repeat_last_n = 64;  // >= 0; 0 = off
  uint64_t seed = 0;       // used as is: the same seed gives the same tokens
  // OpenAI's penalties over the tokens generated so far, each in [-2, 2]
  // (0 = off; a negative one favours repeating).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to the logits of the tokens named (id, bias in [-100, 100]; -100
  // all but bans a token, 100 all but forces it), ids distinct and >= 0.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // A grammar the generated text must follow (grammar.h), with the model's
  // vocabulary as grammar_vocabulary.h lays it out: the sampler picks among
  // the tokens that keep the text a valid prefix, and an end-of-text token
  // only once the text is complete. Both or neither.
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const GrammarVocabulary> grammar_vocabulary;

  // invalid_argument naming the first option out of range (NaN included).
  Status validate() const;
  // The options the chain reads (all but the history's length and the seed).
  const SampleSettings& chain_settings() const { return *this; }
  // Whether step 0 changes anything: then a device's sample op, which runs
  // the chain alone, cannot pick the token for this sampler.
  bool adjusts_logits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty() || grammar != nullptr;
  }
};

class Sampler {
 public:
  static StatusOr<Sampler> create(const SamplerOptions& options);

  // The next token, in [0, logits.size()); -1 when `logits` is empty or no
  // token is possible (every logit NaN or -inf). Does not add it to the
  // history: call accept() with the token actually used.
  int32_t sample(std::span<const float> logits);

  // How many of the largest logits sample_candidates() needs to decide: 0
  // when it needs all of them (temperature > 0 without top-k, or anything
  // that raises logits: a repeat penalty below 1, a negative presence or
  // frequency penalty, a positive bias). At most n_vocab.
  int64_t candidates_needed(int64_t n_vocab) const;

  // What sample() would give for a vocabulary of n_vocab tokens, from its
  // `candidates_needed(n_vocab)` largest logits as the top_k op lays them
  // out: k values, largest first, then their k token ids (as floats).
  // kUndecided when they cannot decide (all are +inf: more may be outside);
  // the caller then samples from all logits. Ids that are not distinct
  // tokens of the vocabulary are invalid_argument.
  static constexpr int32_t kUndecided = kSampleUndecided;
  StatusOr<int32_t> sample_candidates(std::span<const float> top, int64_t n_vocab);

  // Records `token` (a prompt or generated token) for the repetition
  // penalty, and a generated one for the presence and frequency penalties.
  // Negative ids are ignored.
  void accept(int32_t token, bool generated = false);

  // Forgets the history (a new conversation); the random engine continues.
  void reset_history() {
    history_.clear();
    generated_.clear();
  }

  const SamplerOptions& options() const { return options_; }

  // For a device that samples: the recent tokens the penalty looks at, as
  // recent_slots() ids (oldest first, -1 where the history is shorter), and
  // the next draw, which stays the next until commit_draw() (the device's
  // token used it) or a sample() here uses it.
  int64_t recent_slots() const;
  std::vector<int32_t> recent() const;
  uint64_t peek_draw();
  void commit_draw() { pending_draw_ = false; }

 private:
  explicit Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
    if (options.grammar) grammar_state_.emplace(options.grammar);
  }

  // Whether the repetition penalty applies (not 1, over some tokens).
  bool penalising() const { return options_.repeat_penalty != 1.0f && options_.repeat_last_n > 0; }
  // The chain over pool_ (tokens in id order: all of the vocabulary, or the
  // candidates that decide it), after step 0; takes a draw when temperature > 0.
  int32_t choose();
  // Step 0 on pool_'s logits.
  void adjust();
  // The chain over pool_ with one draw (taken when temperature > 0).
  int32_t run_chain();

  SamplerOptions options_;
  std::mt19937_64 rng_;
  uint64_t draw_ = 0;  // the next draw, when pending_draw_
  bool pending_draw_ = false;
  std::deque<int32_t> history_;  // the last repeat_last_n accepted tokens, oldest first
  std::map<int32_t, int64_t> generated_;  // generated tokens: how many times each came (with penalties only)
  SampleChain chain_;
  std::vector<SampleToken> pool_;  // scratch: the tokens the chain chooses among
  // With a grammar: the text generated so far matched, and the scratch of its checks.
  std::optional<GrammarState> grammar_state_;
  GrammarScratch grammar_scratch_;
  std::vector<uint8_t> grammar_mask_;
  std::vector<SampleToken> unmasked_;  // pool_ before the chain, for a second choice under the mask
};

}  // namespace tensorpc
