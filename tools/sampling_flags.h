// The sampling flags `tensorpc run` and `tensorpc chat` share, with the
// defaults and meanings of the common GGUF tools — the library's own
// (tensorpc::SamplingOptions): --temp 0.8, --top-k 40, --top-p 0.95,
// --min-p 0.05, --repeat-penalty 1 (off), -s/--seed, and OpenAI's
// --presence-penalty, --frequency-penalty (0, off) and -l/--logit-bias;
// and the flags of speculative decoding.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "model_setup.h"
#include "tensorpc/model.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

// Adds the flags to `cmd`, writing into `*o`, which must outlive the app.
void add_sampling_flags(CLI::App& cmd, SamplingOptions* o);

// Speculative decoding, which `run`, `chat` and `serve` (each slot) share:
// by prompt lookup (--lookup) or by a draft model (--draft-model FILE on
// --draft-device), and --draft-max N (1 to 64) for the draft tokens a step
// checks at most. The text is the same with it as without.
struct LookupFlags {
  bool lookup = false;
  int draft_max = 8;
};
// --draft-model and --draft-device go into `setup` (the draft model is
// opened with the model); both must outlive the app.
void add_lookup_flags(CLI::App& cmd, LookupFlags* o, ModelSetup* setup);

// "15043+1.5", "15043-100": a --logit-bias item (token id, bias in
// [-100, 100]); anything else is invalid_argument quoting it.
StatusOr<std::pair<int32_t, float>> parse_logit_bias(std::string_view text);

}  // namespace tensorpc::tools
