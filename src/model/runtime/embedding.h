// Embeddings: a text's tokens turned into one vector — the model's final
// hidden state of each token (Generator::eval_hidden: after the output
// norm, before the output projection), pooled as the model's file says
// (LlamaHparams::pooling: the mean of the tokens', the first token's (cls)
// or the last token's) and scaled to unit length, as OpenAI's embeddings
// are.
//
// embed() runs inputs through sequences of a generator that it is lent: it
// starts each of them over (position 0), evaluates up to one input per
// sequence together, in steps of at most n_batch tokens across them (as a
// server's prefill does), and leaves them at position 0 again, success or
// failure. The generator's other sequences are untouched — their cells,
// positions and histories — so a caller may lend the free sequences of a
// generator whose others are mid-generation. More inputs than sequences go
// through in turns.
//
// Ownership: embed() borrows the generator for the call; one thread uses a
// generator at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/runtime/generator.h"

namespace tensorpc {

struct EmbedOptions {
  Pooling pooling = Pooling::mean;  // none pools as mean: one vector per input
  bool normalize = true;            // each vector scaled to unit length (L2)
  int64_t n_batch = 512;            // tokens of one step at most
};

// The pooled vector of one sequence's hidden states `rows` ([n][n_embd], n ≥ 1).
std::vector<float> pool_hidden(std::span<const float> rows, int64_t n_embd, Pooling pooling);

// `v` divided by its Euclidean length (left as it is when that is 0 or not finite).
void normalize_l2(std::span<float> v);

// One vector ([n_embd]) per input, in order, each input evaluated on one of
// `seqs` (distinct sequences of `gen`). Refused before any step: no input,
// no sequence, an empty input, one longer than a sequence holds
// (Generator::seq_ctx), a sequence named twice or not in the generator; a
// token outside the vocabulary is the step's error.
StatusOr<std::vector<std::vector<float>>> embed(Generator& gen, std::span<const std::vector<int32_t>> inputs,
                                                std::span<const int64_t> seqs, const EmbedOptions& options);

}  // namespace tensorpc
