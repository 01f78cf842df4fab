// Drafting with a draft model: a small model of the same vocabulary as the
// one generating (trained on its outputs, ideally) guesses the next tokens
// greedily, one cheap step each, and the large model verifies them in one
// step (speculative_step.h). Over a network, where the large model's step
// costs round trips whatever it carries, each token the draft gets right
// saves one.
//
// The draft model runs on a Generator of its own — the local CPU, say, or
// any device — one of whose sequences the drafter owns. Before each draft it
// brings that sequence to the text: what the sequence holds of the text's
// start is kept (the previous draft's tokens that were accepted, a
// conversation's earlier turns), the rest fed in one step, then the draft
// continues one token a step.
//
// Ownership: the generator (and its model and placement) must outlive the
// drafter; no other caller uses its sequence meanwhile.
#pragma once

#include <memory>

#include "model/runtime/drafter.h"
#include "model/runtime/generator.h"
#include "model/text/tokenizer.h"

namespace tensorpc {

class ModelDrafter : public Drafter {
 public:
  ModelDrafter(Generator& draft_model, int64_t seq, int draft_max);

  void push(std::span<const int32_t> tokens) override { text_.insert(text_.end(), tokens.begin(), tokens.end()); }
  using Drafter::push;
  void clear() override { text_.clear(); }
  // The draft model's greedy continuation of the text, as far as its
  // sequence's context allows. Errors are the draft model's steps'.
  StatusOr<std::vector<int32_t>> draft(size_t limit) override;

 private:
  // Feeds `tokens` to the sequence; the draft model's most likely next token.
  StatusOr<int32_t> feed(std::span<const int32_t> tokens);

  Generator& gen_;
  int64_t seq_;
  std::vector<int32_t> text_;
};

// Speculation's options: prompt lookup and a draft model both at once, or
// draft_max < 1 with either, is invalid_argument.
Status check_speculation(bool lookup, bool draft_model, int draft_max);

// The drafter a generation's options ask for (checked as above): the draft
// model's (on `draft_model`'s sequence 0) when there is one, prompt
// lookup's with `lookup`, else none (null).
StatusOr<std::unique_ptr<Drafter>> make_drafter(bool lookup, Generator* draft_model, int draft_max);

// OK when `draft` tokenizes as `model` does: the same tokens with the same
// texts and the same BOS and EOS. Otherwise invalid_argument naming the first
// difference, in the draft's words: "… has 2048 tokens, the model 4096".
Status check_draft_vocabulary(const Tokenizer& model, const Tokenizer& draft);

}  // namespace tensorpc
