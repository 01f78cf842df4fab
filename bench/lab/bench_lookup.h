// The speculative-decoding figures of `tensorpc bench`: decode tokens/s with
// speculation against the same without it, measured in turns in one run, on
// two servers × two devices behind the emulated LAN link, greedy. Over a
// link a decode step costs its round trips whatever it computes, so each
// token a step's draft adds is nearly free.
//  - prompt lookup (GenerateOptions::lookup) on a prompt that says one
//    passage twice and starts it a third time — a text that repeats its
//    prompt, where lookup's drafts come true;
//  - a draft model (GenerateOptions::draft_model, on a local CPU thread) of
//    the bundled chat model, on a chat: a user's message and the reply.
#pragma once

#include <string>
#include <vector>

#include "lab/bench_model.h"
#include "lab/bench_report.h"

namespace tensorpc::tools {

// "lookup.<key>.decode.2x2_link" (target ≥ 1.5× the same without lookup) and
// "lookup.<key>.tokens_per_step.2x2_link"; options.n_predict tokens a
// generation, at least 64.
StatusOr<std::vector<Figure>> bench_lookup_decode(const BenchModel& model, const ModelBenchOptions& options);

// "draft.<key>.decode.2x2_link" (target ≥ 1.8× the same without a draft
// model) and "draft.<key>.tokens_per_step.2x2_link": `model` (a chat model
// with the Llama 3 template) drafted for by the GGUF at `draft_path`.
StatusOr<std::vector<Figure>> bench_draft_decode(const BenchModel& model, const std::string& draft_path,
                                                 const ModelBenchOptions& options);

}  // namespace tensorpc::tools
