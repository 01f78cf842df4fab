// The serving figures of `tensorpc bench`: the random 250 M-parameter llama
// (Q8_0, bench_quant.h) over two servers on loopback, served by the engine
// of `tensorpc serve` (src/serve/engine.h) with 8 slots, greedy, every
// request the same length.
//
// - "serve.batched": decode tokens/s of 8 requests at once (each one's
//   tokens after its first over the time after it, summed), against one
//   request alone, measured in turns; target ≥ 3×.
// - "serve.batched_ceiling": what the kernels give a decode step of 8
//   sequences against a step of one on the local CPU, no server, no
//   sampling: the most batching can give on this machine.
// - "serve.late_first_token": the first token of a request that arrives
//   while 7 others decode, against 2 of their decode steps plus its own
//   first token when it is alone (its prefill); target ≤ 1×.
// - "serve.first_token": that first token alone, for scale.
#pragma once

#include <cstdio>
#include <vector>

#include "lab/bench_model.h"
#include "lab/bench_report.h"

namespace tensorpc::tools {

StatusOr<std::vector<Figure>> bench_serving(const ModelBenchOptions& options, std::FILE* progress);

}  // namespace tensorpc::tools
