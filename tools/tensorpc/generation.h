// What `tensorpc run` and `tensorpc demo` share: loading a model onto its
// devices with a progress bar, the generation loop (src/model/runtime/generate.h)
// with a callback for text alone, and its speeds printed.
//
// Kept in the tools' library rather than in src/model because it prints
// things for a person at a terminal; the model layer stays quiet.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/device_set.h"
#include "core/format.h"
#include "model/runtime/generate.h"
#include "model/runtime/generator.h"
#include "model/arch/llama_model.h"
#include "model/runtime/placement.h"
#include "model/runtime/sampler.h"
#include "tensorpc/device.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/scheduler.h"

namespace tensorpc::tools {

// The devices a model is spread over (src/api/device_set.h), under the name
// the tools have always used.
using tensorpc::DeviceSet;

// "1,1,2": one ratio per device, each finite and ≥ 0, not all 0. Anything
// else is an invalid_argument quoting the text.
StatusOr<std::vector<double>> parse_split(std::string_view text);

// Places `model` on `devices` (ratios empty: by free memory), printing a
// progress bar to `err` (nullptr: silent) and, when some devices are remote,
// how many bytes went to the servers against the weight bytes they hold —
// the difference is what their weights caches spared.
StatusOr<std::unique_ptr<ModelPlacement>> load_model(const LlamaModel& model, const std::vector<Device*>& devices,
                                                     const std::vector<std::string>& endpoints,
                                                     std::vector<double> ratios, int64_t n_ctx, std::FILE* err);

// The generation loop and what it returns live in the model layer
// (src/model/runtime/generate.h); the tools name them as they always have.
using tensorpc::GenerateOptions;
using tensorpc::GenerateResult;
using tensorpc::StopReason;

// Tokenizes `prompt`, prefills, and samples until n_predict tokens or the
// end of the text (EOS, or an end-of-turn token: Tokenizer::is_end_of_generation);
// `on_text` (may be empty) gets each piece of text as soon as it is complete.
// Both overloads are generate_text() (src/model/runtime/generate.h) with a text-only callback.
StatusOr<GenerateResult> generate(const LlamaModel& model, ModelPlacement& placement, std::string_view prompt,
                                  const GenerateOptions& options,
                                  const std::function<void(std::string_view)>& on_text = {});
// The same on a generator of the caller's, which starts over first
// (Generator::reset): a caller that generates again and again on one
// placement keeps its plans from one generation to the next — graphs
// planned, plans stored on the servers — instead of making them anew each
// time, as a serving process would (tensorpc bench measures decode so).
// options.generator is not used: the generator has its own.
StatusOr<GenerateResult> generate(Generator& gen, std::string_view prompt, const GenerateOptions& options,
                                  const std::function<void(std::string_view)>& on_text = {});

// Prompt and generation speed, and the client traffic per generated token.
void print_speed(const GenerateResult& r, std::FILE* out);


}  // namespace tensorpc::tools
