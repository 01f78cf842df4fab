// What `tensorpc run` and `tensorpc demo` share: the device list (local CPU
// and remote devices), loading a model onto it with a progress bar, and a
// generation loop that streams text and measures itself.
//
// Kept in the tools' library rather than in src/model because it prints and
// times things for a person at a terminal; the model layer stays quiet.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/generator.h"
#include "model/llama_model.h"
#include "model/placement.h"
#include "model/sampler.h"
#include "tensorpc/device.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/scheduler.h"

namespace tensorpc::tools {

// The devices a model is spread over, in placement order, and who owns them.
class DeviceSet {
 public:
  // The local CPU first (`local_threads`, 0: every core) when `use_local`,
  // then every device of every endpoint in order, connected with `options`
  // (their key). An unreachable server, or one that refuses the key, is an
  // error naming its endpoint.
  static StatusOr<DeviceSet> connect(bool use_local, int local_threads, const std::vector<std::string>& endpoints,
                                     const RemoteOptions& options = {});

  std::vector<Device*> devices() const;
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<std::string> endpoints_;
};

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

struct GenerateOptions {
  int n_predict = 64;           // tokens to generate at most
  bool stop_at_eos = true;      // stop at EOS or an end-of-turn token; false: run to n_predict (tests, benchmarks)
  bool special = false;         // the prompt may spell control tokens, and generated ones print (--special)
  SamplerOptions sampler;
  GeneratorOptions generator;
  std::function<void()> on_decode_start = {};  // called once prefill is done (profiles); may be empty
};

// Why generation ended.
enum class StopReason { n_predict, end_of_text, context_full };

struct GenerateResult {
  std::vector<int32_t> prompt;     // the prompt's tokens (BOS included)
  std::vector<int32_t> generated;  // the sampled tokens, EOS included when it ended the text
  std::string text;                // the generated text
  StopReason stop = StopReason::n_predict;
  double prompt_seconds = 0;       // prefill, through the first sampled token
  double decode_seconds = 0;       // every later step, sampling included
  int decode_steps = 0;            // single-token evaluations after the prefill
  SchedulerCounters decode;        // the scheduler's counters summed over those steps
  std::string schedule;            // the scheduler's description of the last step's plan
};

// Tokenizes `prompt`, prefills, and samples until n_predict tokens or the
// end of the text (EOS, or an end-of-turn token: Tokenizer::is_end_of_generation);
// `on_text` (may be empty) gets each piece of text as soon as it is complete.
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

// "12.3 MiB" and friends.
std::string human_bytes(double bytes);

}  // namespace tensorpc::tools
