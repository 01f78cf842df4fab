// The lookup figure of `tensorpc bench`: decode tokens/s with speculative
// decoding by prompt lookup (GenerateOptions::lookup) against the same
// without it, measured in turns in one run, on two servers × two devices
// behind the emulated LAN link, greedy, on a prompt that says one passage
// twice and starts it a third time — a text that repeats its prompt, where
// lookup's drafts come true. Over a link a decode step costs its round trips
// whatever it computes, so each token a step's draft adds is nearly free.
#pragma once

#include <vector>

#include "lab/bench_model.h"
#include "lab/bench_report.h"

namespace tensorpc::tools {

// "lookup.<key>.decode.2x2_link" (target ≥ 1.5× the same without lookup) and
// "lookup.<key>.tokens_per_step.2x2_link"; options.n_predict tokens a
// generation, at least 64.
StatusOr<std::vector<Figure>> bench_lookup_decode(const BenchModel& model, const ModelBenchOptions& options);

}  // namespace tensorpc::tools
