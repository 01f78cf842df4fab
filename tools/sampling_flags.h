// The sampling flags `tensorpc run` and `tensorpc chat` share, with the
// defaults and meanings of the common GGUF tools — the library's own
// (tensorpc::SamplingOptions): --temp 0.8, --top-k 40, --top-p 0.95,
// --min-p 0.05, --repeat-penalty 1 (off), -s/--seed.
#pragma once

#include "tensorpc/model.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

// Adds the flags to `cmd`, writing into `*o`, which must outlive the app.
void add_sampling_flags(CLI::App& cmd, SamplingOptions* o);

}  // namespace tensorpc::tools
