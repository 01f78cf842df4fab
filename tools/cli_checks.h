// Checks of command-line values, for CLI11's `->check(...)`: each returns ""
// when the text is acceptable, else what is wrong with it, quoting it.
//
// CLI11's own PositiveNumber and Range let "nan" through and print DBL_MAX's
// 309 digits as a bound; these say the bounds a user can act on.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace tensorpc::tools {

using CliCheck = std::function<std::string(const std::string&)>;

// A whole number in decimal from `lowest` to `highest`, nothing else (no
// sign on a positive number's behalf, no fraction, no spaces).
CliCheck whole_number(int64_t lowest, int64_t highest);

// The parse and the message behind whole_number, for checks that name their
// lower bound in words ("0 (every core)"): the number, or nothing; and
// "'TEXT' is not a whole number from LOWEST to HIGHEST".
std::optional<int64_t> parse_whole_number(std::string_view text, int64_t lowest, int64_t highest);
std::string not_a_whole_number(std::string_view text, std::string_view lowest, int64_t highest);

// A finite number that `ok` accepts; the message says it is not `what`
// ("a number > 0").
CliCheck finite_number(std::string what, bool (*ok)(double));

}  // namespace tensorpc::tools
