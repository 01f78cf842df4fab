// Sampler: the sampling chain described in sampler.h, around the shared
// chain of src/core/sample_chain.h.
#include "model/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace tensorpc {

Status SamplerOptions::validate() const {
  TENSORPC_RETURN_IF_ERROR(chain_settings().validate("sampler"));
  if (repeat_last_n < 0)
    return invalid_argument("sampler: repeat_last_n must be >= 0 (0 = off), not " + std::to_string(repeat_last_n));
  const auto in = [](float x, float lo, float hi) { return std::isfinite(x) && x >= lo && x <= hi; };
  if (!in(presence_penalty, -2, 2)) return invalid_argument("sampler: presence_penalty must be in [-2, 2]");
  if (!in(frequency_penalty, -2, 2)) return invalid_argument("sampler: frequency_penalty must be in [-2, 2]");
  if ((grammar == nullptr) != (grammar_vocabulary == nullptr)) {
    return invalid_argument("sampler: a grammar needs its vocabulary, and a vocabulary its grammar");
  }
  std::set<int32_t> ids;
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) return invalid_argument("sampler: logit_bias names token " + std::to_string(id));
    if (!ids.insert(id).second)
      return invalid_argument("sampler: logit_bias names token " + std::to_string(id) + " twice");
    if (!in(bias, -100, 100)) {
      return invalid_argument("sampler: the logit_bias of token " + std::to_string(id) + " must be in [-100, 100]");
    }
  }
  return Status();
}

StatusOr<Sampler> Sampler::create(const SamplerOptions& options) {
  TENSORPC_RETURN_IF_ERROR(options.validate());
  return Sampler(options);
}

void Sampler::accept(int32_t token, bool generated) {
  if (token < 0) return;
  if (generated && grammar_state_ && token < options_.grammar_vocabulary->n_tokens()) {
    options_.grammar_vocabulary->advance(*grammar_state_, token);
  }
  if (generated && (options_.presence_penalty != 0.0f || options_.frequency_penalty != 0.0f)) ++generated_[token];
  if (options_.repeat_last_n == 0) return;
  history_.push_back(token);
  while (history_.size() > static_cast<size_t>(options_.repeat_last_n)) history_.pop_front();
}

uint64_t Sampler::peek_draw() {
  if (!pending_draw_) {
    draw_ = rng_() >> (64 - kDrawBits);  // the engine's top 53 bits
    pending_draw_ = true;
  }
  return draw_;
}

int64_t Sampler::recent_slots() const { return penalising() ? options_.repeat_last_n : 1; }

std::vector<int32_t> Sampler::recent() const {
  std::vector<int32_t> out(static_cast<size_t>(recent_slots()), -1);
  if (!penalising()) return out;
  std::copy(history_.begin(), history_.end(), out.begin());
  return out;
}

int64_t Sampler::candidates_needed(int64_t n_vocab) const {
  if (penalising() && options_.repeat_penalty < 1.0f) return 0;
  if (grammar_state_) return 0;  // the tokens it allows may be anywhere
  if (options_.presence_penalty < 0.0f || options_.frequency_penalty < 0.0f) return 0;
  // Tokens whose logits may have been lowered: the top-k after are among the top k + these before.
  int64_t penalised = penalising() ? options_.repeat_last_n : 0;
  penalised += static_cast<int64_t>(generated_.size());
  for (const auto& [id, bias] : options_.logit_bias) {
    if (bias > 0.0f) return 0;
    ++penalised;
  }
  int64_t kept = 1;  // greedy
  if (options_.temperature > 0.0f) {
    if (options_.top_k == 0) return 0;
    // One more than top-k can keep: if even that many are finite, so are
    // more than top_k of the whole vocabulary, and the chain sorts.
    kept = static_cast<int64_t>(options_.top_k) + 1;
  }
  return std::min(n_vocab, kept + penalised);
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (logits.empty() || logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) return -1;
  pool_.clear();
  for (size_t i = 0; i < logits.size(); ++i) pool_.push_back({logits[i], static_cast<int32_t>(i)});
  return choose();
}

StatusOr<int32_t> Sampler::sample_candidates(std::span<const float> top, int64_t n_vocab) {
  bool undecided = false;
  TENSORPC_RETURN_IF_ERROR(SampleChain::pool_from_candidates(top, n_vocab, pool_, undecided));
  if (undecided) return kUndecided;
  return choose();
}

void Sampler::adjust() {
  const auto find = [&](int32_t id) -> SampleToken* {
    const auto it = std::lower_bound(pool_.begin(), pool_.end(), id,
                                     [](const SampleToken& t, int32_t want) { return t.id < want; });
    return it != pool_.end() && it->id == id ? &*it : nullptr;
  };
  for (const auto& [id, count] : generated_) {
    if (SampleToken* t = find(id)) {
      t->logit -= options_.presence_penalty + static_cast<float>(count) * options_.frequency_penalty;
    }
  }
  for (const auto& [id, bias] : options_.logit_bias) {
    if (SampleToken* t = find(id)) t->logit += bias;
  }
}

int32_t Sampler::run_chain() {
  std::vector<int32_t> recent;
  if (options_.repeat_penalty != 1.0f) recent.assign(history_.begin(), history_.end());
  uint64_t draw = 0;
  if (options_.temperature > 0.0f) {
    draw = peek_draw();
    commit_draw();
  }
  return chain_.choose(pool_, options_, recent, draw);
}

int32_t Sampler::choose() {
  if (options_.adjusts_logits()) adjust();
  if (!grammar_state_) return run_chain();
  const GrammarVocabulary& vocab = *options_.grammar_vocabulary;
  unmasked_ = pool_;
  const int32_t first = run_chain();
  if (first >= 0 && first < vocab.n_tokens() && vocab.accepts(*grammar_state_, first, grammar_scratch_)) return first;
  vocab.mask(*grammar_state_, grammar_mask_, grammar_scratch_);
  pool_ = unmasked_;
  for (SampleToken& t : pool_) {
    if (t.id >= vocab.n_tokens() || grammar_mask_[static_cast<size_t>(t.id)] == 0) {
      t.logit = -std::numeric_limits<float>::infinity();
    }
  }
  return run_chain();
}

}  // namespace tensorpc
