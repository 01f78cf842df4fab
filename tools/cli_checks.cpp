#include "cli_checks.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace tensorpc::tools {

std::optional<int64_t> parse_whole_number(std::string_view text, int64_t lowest, int64_t highest) {
  int64_t x = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, x);
  if (text.empty() || ec != std::errc() || ptr != end || x < lowest || x > highest) return std::nullopt;
  return x;
}

std::string not_a_whole_number(std::string_view text, std::string_view lowest, int64_t highest) {
  std::string why = "'";
  why.append(text).append("' is not a whole number from ").append(lowest).append(" to ");
  return why.append(std::to_string(highest));
}

CliCheck whole_number(int64_t lowest, int64_t highest) {
  return [lowest, highest](const std::string& text) -> std::string {
    if (parse_whole_number(text, lowest, highest)) return {};
    return not_a_whole_number(text, std::to_string(lowest), highest);
  };
}

CliCheck finite_number(std::string what, bool (*ok)(double)) {
  return [what = std::move(what), ok](const std::string& text) -> std::string {
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(x) && ok(x)) return {};
    std::string why = "'";
    return why.append(text).append("' is not ").append(what);
  };
}

}  // namespace tensorpc::tools
