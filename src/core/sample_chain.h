// The sampling chain: picks a token from candidate logits. Shared by the
// client's Sampler (src/model/runtime/sampler.h, which documents the chain's steps)
// and the sample op (op.h), so that a server sampling at the end of a
// pipeline picks exactly the token the client would.
//
// The chain itself draws nothing: the caller gives it the uniform number in
// [0, 1) it uses when temperature > 0, as 53 random bits (kDrawBits). A
// client keeps the random engine and sends the next draw with the step; a
// server that samples uses it and the client's engine moves on only then.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensorpc/context.h"
#include "tensorpc/status.h"

namespace tensorpc {

// A draw is an integer of 53 random bits; the chain's uniform number is it / 2^53.
inline constexpr int kDrawBits = 53;

// The settings a sample node carries in its params (op.h, "sample's params").
SampleSettings sample_settings_of(const Tensor& node);

struct SampleToken {
  float logit;
  int32_t id;
};

class SampleChain {
 public:
  // Runs the chain over `pool` (distinct ids in increasing order; the
  // logits are changed in place): the repetition penalty on the ids in
  // `recent` (each distinct id once; negative ids ignored), then greedy or
  // top-k / top-p / min-p and the draw. kSampleNoToken when no candidate
  // is finite or +inf.
  int32_t choose(std::vector<SampleToken>& pool, const SampleSettings& s, std::span<const int32_t> recent,
                 uint64_t draw);

  // Fills `pool` from k candidates laid out as top_k lays them out (k
  // values, then their k ids as floats) for a vocabulary of n_vocab: an
  // error when an id is not a token of the vocabulary or comes twice.
  // Sets `undecided` when every candidate is +inf and k < n_vocab.
  static Status pool_from_candidates(std::span<const float> top, int64_t n_vocab, std::vector<SampleToken>& pool,
                                     bool& undecided);

 private:
  struct Candidate {
    float logit;
    int32_t id;
    double weight;  // unnormalised probability, exp((logit - max) / temperature)
  };
  std::vector<Candidate> candidates_;  // scratch, kept to avoid an allocation per token
  std::vector<int32_t> recent_;        // scratch: the distinct recent ids
};

}  // namespace tensorpc
