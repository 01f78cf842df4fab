// Speculative decoding's step: the token after `last` and, in the same
// evaluation, as many of a draft's tokens as the sampler confirms.
//
// Exactness: one step evaluates [last, draft...] and returns the logits
// after each token (or, when the sampler needs only the largest, their top
// candidates: Sampler::candidates_needed); then the same Sampler that plain
// decoding uses picks the token after each position in turn, in plain
// decoding's order — each pick after the one before was accepted — so its
// random draws, its penalties' history and its grammar are exactly those of
// decoding one token at a time. While the token picked is the draft's next
// one, the draft's next position is already evaluated and picking goes on;
// the first token that differs is kept (plain decoding would have picked it
// there) and the rest of the draft dropped. A greedy text, and a sampled one
// under the same seed, is the one plain decoding gives, token for token —
// given that a device computes a token's logits in a step of several tokens
// bit for bit as in a step of one, as the CPU device does for every format
// (tests/model/runtime/lookup_test.cpp) and the Vulkan shaders did on llvmpipe.
//
// The positions of the dropped tokens stay in the KV cache until the next
// steps overwrite them; the generator is rewound past them, so the mask hides
// them meanwhile (Generator::rewind).
#pragma once

#include <functional>
#include <span>

#include "model/runtime/drafter.h"
#include "model/runtime/generator.h"
#include "model/runtime/sampler.h"

namespace tensorpc {

// Given each token picked, in order: accepts it (Sampler::accept and
// whatever the caller keeps) and returns whether decoding goes on.
using TakeToken = std::function<bool(int32_t token)>;

// The candidates a step verifying a draft of `draft_size` tokens asks for:
// enough for its last position (each token accepted before may add one to
// what the sampler needs); 0: every logit.
int64_t draft_candidates(const Sampler& sampler, int64_t n_vocab, size_t draft_size);

// The rows of a step that evaluated a token and its draft, one after each
// position: with k > 0 the k largest logits as top_k lays them out ([2k]),
// otherwise every logit ([n_vocab]); `logits` reads every logit after a
// position (asked only with k > 0, when its candidates cannot decide).
struct DraftRows {
  std::span<const float> rows;
  int64_t k = 0;
  std::function<StatusOr<std::span<const float>>(size_t position)> logits;
};

// What a walk over such rows did: the draft tokens the sampler picked, and
// those plain decoding would have fed before the last token taken (the
// sequence is to be rewound to the step's start + 1 + fed).
struct DraftWalk {
  size_t picked = 0;
  size_t fed = 0;
};

// Picks the token after each position in turn with `sampler` and gives it
// to `take`; stops after a token that is not the draft's next, or when
// take() says stop. An empty draft: the one token after `last`.
StatusOr<DraftWalk> walk_draft(Sampler& sampler, int64_t n_vocab, const DraftRows& rows, std::span<const int32_t> draft,
                               const TakeToken& take);

// Feeds `last` and `draft` to `gen` in one step and picks the token after
// each in turn with `sampler`, giving each to `take`; stops after a token
// that is not the draft's next, or when take() says stop. The generator is
// then where plain decoding would be: after `last` and the draft tokens
// picked before the last token given to take(). Returns how many draft
// tokens the sampler picked. The step must fit the context and n_batch.
StatusOr<size_t> verify_draft(Generator& gen, Sampler& sampler, int32_t last, std::span<const int32_t> draft,
                              const TakeToken& take);

// The next tokens after `last`, at most `room` of them, given to `take`:
// with `drafter` (may be null: no speculation) and a draft it makes, those
// verify_draft() confirms; otherwise next_token()'s one. `drafter` is given
// every token taken and learns how its draft fared.
Status decode_after(Generator& gen, Sampler& sampler, Drafter* drafter, int32_t last, size_t room,
                    const TakeToken& take);

}  // namespace tensorpc
