// Typed fields of a JSON request body; see json_fields.h.
#include "serve/json_fields.h"

#include <cmath>
#include <limits>
#include <utility>

namespace tensorpc::serve {
namespace {

// Where nlohmann's parser gave up on a body: a SAX handler that accepts
// every event and keeps the parse error's message. Used only after a parse
// failed, to say where, since the non-throwing parse returns no reason.
class ParseErrorFinder final : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const json::exception& ex) override {
    message_ = ex.what();
    return false;  // stop: no exception is thrown
  }

  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// "parse error at line 1, column 5: ...": nlohmann's message without its
// "[json.exception.parse_error.101] " tag, and cut short, since its "last
// read" part quotes the body.
std::string where_parsing_stopped(std::string_view body) {
  ParseErrorFinder finder;
  json::sax_parse(body.begin(), body.end(), &finder);
  std::string message = finder.message();
  if (message.empty()) return "it could not be parsed";
  if (message.front() == '[') {
    const size_t tag_end = message.find("] ");
    if (tag_end != std::string::npos) message.erase(0, tag_end + 2);
  }
  constexpr size_t kMaxLength = 200;
  if (message.size() > kMaxLength) message = message.substr(0, kMaxLength) + "...";
  return message;
}

// Whether the whole double d stands for one integer: |d| <= 2^53, beyond
// which doubles skip integers (an integer literal too long for int64, such
// as -9223372036854775809, arrives as a double that rounded to -2^63).
bool exact_integer(double d) { return d >= -0x1p53 && d <= 0x1p53; }

}  // namespace

bool nesting_within(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;  // an unbalanced close is for the parser to refuse
    }
  }
  return true;
}

std::variant<json, ApiError> parse_json_object(std::string_view body) {
  if (!nesting_within(body, kMaxJsonDepth)) {
    return invalid_request(
        "invalid_json", "",
        "the body nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  json value = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return invalid_request("invalid_json", "", "the body is not valid JSON: " + where_parsing_stopped(body));
  }
  if (!value.is_object()) {
    return invalid_request("invalid_json", "", "the body must be a JSON object, not " + kind_of(value));
  }
  return value;
}

const json* field(const json& object, std::string_view name) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string kind_of(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::binary: return "binary data";
    case json::value_t::discarded: break;
  }
  return "nothing";
}

std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMaxLength = 40;
  if (text.size() > kMaxLength) text = text.substr(0, kMaxLength - 3) + "...";
  return text;
}

ApiError wrong_type(const std::string& param, const char* expected, const json& value) {
  return invalid_request("invalid_type", param, "'" + param + "' must be " + expected + ", not " + kind_of(value));
}

ApiError missing_field(const std::string& param) {
  return invalid_request("missing_field", param, "'" + param + "' is required");
}

Problem read_number(const json& value, const std::string& param, const NumberRange& range, double* out) {
  if (!value.is_number()) return wrong_type(param, "a number", value);
  const double d = value.get<double>();
  const bool above_lo = range.lo_inclusive ? d >= range.lo : d > range.lo;
  const bool below_hi = range.hi_inclusive ? d <= range.hi : d < range.hi;
  // Written so that NaN and infinities (which a parser should never give) fail too.
  if (!(std::isfinite(d) && above_lo && below_hi)) {
    return invalid_request("invalid_value", param,
                           "'" + param + "' must be a number " + range.words + ", not " + shown(value));
  }
  *out = d;
  return std::nullopt;
}

Problem read_integer(const json& value, const std::string& param, int64_t lo, int64_t hi, const char* words,
                     int64_t* out) {
  if (!value.is_number()) return wrong_type(param, "an integer", value);
  bool representable = true;
  int64_t n = 0;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    n = value.get<int64_t>();
  } else if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    representable = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (representable) n = static_cast<int64_t>(u);
  } else {
    const double d = value.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) {
      return invalid_request("invalid_type", param, "'" + param + "' must be an integer, not " + shown(value));
    }
    representable = exact_integer(d);
    if (representable) n = static_cast<int64_t>(d);
  }
  if (!representable || n < lo || n > hi) {
    return invalid_request("invalid_value", param,
                           "'" + param + "' must be an integer " + words + ", not " + shown(value));
  }
  *out = n;
  return std::nullopt;
}

Problem read_bool(const json& value, const std::string& param, bool* out) {
  if (!value.is_boolean()) return wrong_type(param, "a boolean", value);
  *out = value.get<bool>();
  return std::nullopt;
}

Problem read_string(const json& value, const std::string& param, std::string* out) {
  if (!value.is_string()) return wrong_type(param, "a string", value);
  *out = value.get_ref<const std::string&>();
  return std::nullopt;
}

Problem read_number_field(const json& object, const char* name, const NumberRange& range, double* out, bool* given) {
  const json* value = field(object, name);
  if (given != nullptr) *given = value != nullptr;
  if (value == nullptr) return std::nullopt;
  return read_number(*value, name, range, out);
}

Problem read_integer_field(const json& object, const char* name, int64_t lo, int64_t hi, const char* words,
                           int64_t* out, bool* given) {
  const json* value = field(object, name);
  if (given != nullptr) *given = value != nullptr;
  if (value == nullptr) return std::nullopt;
  return read_integer(*value, name, lo, hi, words, out);
}

Problem read_bool_field(const json& object, const char* name, bool* out) {
  const json* value = field(object, name);
  if (value == nullptr) return std::nullopt;
  return read_bool(*value, name, out);
}

Problem read_string_field(const json& object, const char* name, std::string* out) {
  const json* value = field(object, name);
  if (value == nullptr) return std::nullopt;
  return read_string(*value, name, out);
}

}  // namespace tensorpc::serve
