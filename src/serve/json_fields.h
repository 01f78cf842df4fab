// Reading typed fields out of a JSON request body, each problem an ApiError
// that names the field. Private to tensorpc_serve_api: it includes
// nlohmann/json, which the library links privately, so only the library's
// own .cpp files (and request_input.h, private too) may include it.
//
// Every reader takes the value (or the object holding it) and the field's
// name as the client knows it ("temperature", "messages[2].content"); JSON
// null counts as absent everywhere, as OpenAI treats it. Readers check the
// type before every get, so nothing here throws.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "serve/openai_request.h"

namespace tensorpc::serve {

using json = nlohmann::json;

// A problem with a request, or nullopt when there is none.
using Problem = std::optional<ApiError>;

// Returns the ApiError from the enclosing function (whose return type an
// ApiError converts to) when `expr`, a Problem, holds one.
#define TENSORPC_SERVE_RETURN_IF_PROBLEM(expr)                         \
  do {                                                                 \
    if (::tensorpc::serve::Problem p_ = (expr)) return *std::move(p_); \
  } while (0)

// The body as a JSON object: refused with invalid_json when it nests deeper
// than kMaxJsonDepth (checked before parsing), is not JSON (the message says
// where parsing stopped), or is JSON of another type.
std::variant<json, ApiError> parse_json_object(std::string_view body);

// Whether `body`'s arrays and objects nest at most `max_depth` deep; a
// linear scan that skips strings, so a hostile body cannot make the parser
// recurse. Says nothing about whether the rest is valid JSON.
bool nesting_within(std::string_view body, int max_depth);

// The value of `name` in `object`, or nullptr when it is absent or null.
const json* field(const json& object, std::string_view name);

// The JSON type of `value` in words, for messages: "a string", "an array".
std::string kind_of(const json& value);

// `value` as JSON text, cut short when long, for messages.
std::string shown(const json& value);

// The allowed values of a number: lo and hi, each inclusive or not, and the
// words that say so ("between 0 and 2").
struct NumberRange {
  double lo;
  double hi;
  bool lo_inclusive;
  bool hi_inclusive;
  const char* words;
};

// A finite number inside `range`. Integers count as numbers; booleans do not.
Problem read_number(const json& value, const std::string& param, const NumberRange& range, double* out);

// An integer in [lo, hi], `words` saying which (">= 1"). A number written
// with a fraction or exponent counts when its value is a whole one (2.0,
// 1e3), since JSON does not tell integers apart, up to 2^53 in magnitude:
// beyond that a double does not tell neighbouring integers apart either.
Problem read_integer(const json& value, const std::string& param, int64_t lo, int64_t hi, const char* words,
                     int64_t* out);

Problem read_bool(const json& value, const std::string& param, bool* out);
Problem read_string(const json& value, const std::string& param, std::string* out);

// The same readers for the field `name` of `object`, leaving *out as it is
// when the field is absent or null; *given (when not null) says whether it
// was there.
Problem read_number_field(const json& object, const char* name, const NumberRange& range, double* out,
                          bool* given = nullptr);
Problem read_integer_field(const json& object, const char* name, int64_t lo, int64_t hi, const char* words,
                           int64_t* out, bool* given = nullptr);
Problem read_bool_field(const json& object, const char* name, bool* out);
Problem read_string_field(const json& object, const char* name, std::string* out);

// Builders of the common errors, each naming `param`.
ApiError wrong_type(const std::string& param, const char* expected, const json& value);
ApiError missing_field(const std::string& param);

}  // namespace tensorpc::serve
