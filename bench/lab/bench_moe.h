// The mixture-of-experts figures of `tensorpc bench`: a random Mixtral-shaped
// model (llama with 8 experts, 2 used a token; n_embd 1024, 8 layers, experts
// 1408 wide, q8_0) against a dense model of the same active parameters (its
// feed-forward 2 × 1408 wide), both on the local CPU.
//
// - "moe.decode": weight bytes read per second during decode, counted over
//   the active parameters (attention, router, 2 of 8 experts, output) against
//   a memory-read loop of as many threads measured in the same run; target
//   ≥ 0.6×, as for dense models: a step reads the chosen experts only.
// - "moe.prefill": prompt tokens per second (128 tokens) against the dense
//   model's, measured in turns with it; target ≥ 0.7×: the batch's tokens are
//   grouped by expert, one matrix product per expert.
#pragma once

#include <cstdio>
#include <vector>

#include "lab/bench_model.h"
#include "lab/bench_report.h"

namespace tensorpc::tools {

StatusOr<std::vector<Figure>> bench_moe_model(const ModelBenchOptions& options, std::FILE* progress);

}  // namespace tensorpc::tools
