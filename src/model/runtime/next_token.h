// One step of generation: feed tokens, sample the token after them.
//
// When the sampler needs only the largest logits (Sampler::candidates_needed)
// and the device of the output projection can pick them, the step ends in a
// top_k node there and only those few values come back; otherwise every
// logit does. A device that also computes the sample op picks the token
// itself and only its id comes back. Either way the token is the one
// sampling from every logit gives.
#pragma once

#include <span>

#include "model/runtime/generator.h"
#include "model/runtime/sampler.h"

namespace tensorpc {

// Feeds `tokens` to `gen` and samples the next token with `sampler` (which
// does not accept it: the caller does, with the token it keeps). An error
// when no token can be sampled (every logit NaN or -inf).
StatusOr<int32_t> next_token(Generator& gen, Sampler& sampler, std::span<const int32_t> tokens);

}  // namespace tensorpc
