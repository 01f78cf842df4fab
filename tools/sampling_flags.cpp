// The shared sampling flags (sampling_flags.h).
#include "sampling_flags.h"

#include <CLI/CLI.hpp>
#include <cstdint>

#include "cli_checks.h"

namespace tensorpc::tools {

void add_sampling_flags(CLI::App& cmd, SamplingOptions* o) {
  cmd.add_option("--temp", o->temperature, "temperature; 0: greedy")
      ->check(finite_number("a finite number ≥ 0", [](double x) { return x >= 0; }))
      ->capture_default_str();
  cmd.add_option("--top-k", o->top_k, "keep the k most likely tokens (0: off)")
      ->check(whole_number(0, INT32_MAX))
      ->capture_default_str();
  cmd.add_option("--top-p", o->top_p, "keep the most likely tokens up to this probability")
      ->check(finite_number("a number in (0, 1]", [](double x) { return x > 0 && x <= 1; }))
      ->capture_default_str();
  cmd.add_option("--min-p", o->min_p, "drop tokens less likely than this fraction of the most likely (0: off)")
      ->check(finite_number("a number in [0, 1]", [](double x) { return x >= 0 && x <= 1; }))
      ->capture_default_str();
  cmd.add_option("--repeat-penalty", o->repeat_penalty, "penalty of recently seen tokens (1: off)")
      ->check(finite_number("a finite number > 0", [](double x) { return x > 0; }))
      ->capture_default_str();
  cmd.add_option("-s,--seed", o->seed, "random seed")->check(whole_number(0, INT64_MAX))->capture_default_str();
}

}  // namespace tensorpc::tools
