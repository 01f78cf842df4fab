// The quantized-model figures of `tensorpc bench`: a random ~250 M-parameter
// llama (n_embd 1024, 14 layers, n_ff 2816, vocabulary 32,000) quantized to
// the mixes users download, decoded and prefilled on the local CPU.
//
// - "quant.<mix>.decode": weight bytes read per second during decode (every
//   weight but the embedding is read once per token) against a memory-read
//   loop of as many threads, measured in the same run; target ≥ 0.6×.
// - "quant.<mix>.prefill": weight bytes processed per second in a 128-token
//   prefill (tokens/s × weight bytes) against q8_0's, measured in turns with
//   it; target ≥ 1×: a smaller format must not cost more per byte.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "lab/bench_model.h"
#include "lab/bench_report.h"

namespace tensorpc::tools {

// The figures above for each of `mixes` (names as `tensorpc quantize` takes
// them, e.g. "Q4_K_M"); q8_0 is measured as the prefill baseline.
StatusOr<std::vector<Figure>> bench_quantized_models(const std::vector<std::string>& mixes,
                                                     const ModelBenchOptions& options, std::FILE* progress);

// The random 250 M model quantized to `mix`, written under the system's
// temporary directory unless already there (the q8_0 source first). Returns
// its path.
StatusOr<std::string> random_250m_model(const std::string& mix, std::FILE* progress);

}  // namespace tensorpc::tools
