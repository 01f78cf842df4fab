// The shared sampling flags (sampling_flags.h).
#include "sampling_flags.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  cmd.add_option("--presence-penalty", o->presence_penalty,
                 "subtracted from the logit of every token generated so far (0: off)")
      ->check(finite_number("a number in [-2, 2]", [](double x) { return x >= -2 && x <= 2; }))
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", o->frequency_penalty,
                 "subtracted from a token's logit for every time it was generated so far (0: off)")
      ->check(finite_number("a number in [-2, 2]", [](double x) { return x >= -2 && x <= 2; }))
      ->capture_default_str();
  cmd.add_option_function<std::vector<std::string>>(
         "-l,--logit-bias",
         [o](const std::vector<std::string>& items) {
           for (const std::string& item : items) o->logit_bias.push_back(parse_logit_bias(item).value());  // checked
         },
         "TOKEN+BIAS or TOKEN-BIAS (repeatable): add BIAS (up to 100) to the token's logit; -100 all but bans it")
      ->check([](const std::string& item) {
        auto parsed = parse_logit_bias(item);
        return parsed.ok() ? std::string() : parsed.status().message();
      });
}

void add_lookup_flags(CLI::App& cmd, LookupFlags* o, ModelSetup* setup) {
  CLI::Option* lookup =
      cmd.add_flag("--lookup", o->lookup,
                   "speculative decoding by prompt lookup: each step also checks tokens drafted from where the "
                   "text's last tokens came before (the same text, fewer steps when it repeats itself)");
  CLI::Option* draft =
      cmd.add_option("--draft-model", setup->draft_model,
                     "speculative decoding with a draft model: a small GGUF model with the same vocabulary guesses "
                     "the next tokens and each step checks them (the same text, fewer steps)")
          ->excludes(lookup);
  cmd.add_option("--draft-device", setup->draft_device,
                 "where the draft model runs: cpu, vulkan:N, or a server's device HOST:PORT/NAME")
      ->needs(draft)
      ->capture_default_str();
  CLI::Option* draft_max =
      cmd.add_option("--draft-max", o->draft_max, "draft tokens a step checks at most (--lookup, --draft-model)")
          ->check(whole_number(1, 64))
          ->capture_default_str();
  // needs() wants every option it names; this one wants either.
  cmd.parse_complete_callback([lookup, draft, draft_max] {
    if (draft_max->count() > 0 && lookup->count() == 0 && draft->count() == 0) {
      throw CLI::ValidationError("--draft-max", "requires --lookup or --draft-model");
    }
  });
}

StatusOr<std::pair<int32_t, float>> parse_logit_bias(std::string_view text) {
  const auto bad = [&] {
    return invalid_argument("--logit-bias '" + std::string(text) +
                            "': expected TOKEN+BIAS or TOKEN-BIAS, a token id and a bias from -100 to 100 (15043-1)");
  };
  const size_t sign = text.find_first_of("+-");
  if (sign == 0 || sign == std::string_view::npos) return bad();
  const std::optional<int64_t> id = parse_whole_number(text.substr(0, sign), 0, INT32_MAX);
  if (!id) return bad();
  const std::string bias_text(text.substr(sign));
  size_t used = 0;
  double bias = 0;
  try {
    bias = std::stod(bias_text, &used);
  } catch (const std::exception&) {
    return bad();
  }
  if (used != bias_text.size() || !std::isfinite(bias) || bias < -100 || bias > 100) return bad();
  return std::pair<int32_t, float>{static_cast<int32_t>(*id), static_cast<float>(bias)};
}

}  // namespace tensorpc::tools
