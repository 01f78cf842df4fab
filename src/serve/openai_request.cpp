// OpenAI request bodies; see openai_request.h. This file reads the fields
// that shape the answer (length, sampling, stop strings, streaming) and
// refuses the features we do not have; request_input.cpp reads what the
// model is given (messages or prompt).
#include "serve/openai_request.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "model/runtime/json_schema.h"
#include "serve/json_fields.h"
#include "serve/request_input.h"
#include "serve/tool_input.h"

namespace tensorpc::serve {
namespace {

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr double kInfinity = std::numeric_limits<double>::infinity();

constexpr NumberRange kTemperature{0.0, 2.0, true, true, "between 0 and 2"};
constexpr NumberRange kTopP{0.0, 1.0, false, true, "greater than 0 and at most 1"};
constexpr NumberRange kMinP{0.0, 1.0, true, true, "between 0 and 1"};
constexpr NumberRange kRepeatPenalty{0.0, kInfinity, false, false, "greater than 0"};
constexpr NumberRange kOpenAiPenalty{-2.0, 2.0, true, true, "between -2 and 2"};

constexpr size_t kMaxStopStrings = 4;

// max_tokens, or max_completion_tokens (OpenAI's newer name) when both are given.
Problem read_max_tokens(const json& body, int64_t* out) {
  int64_t max_tokens = -1;
  int64_t max_completion_tokens = -1;
  bool completion_given = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer_field(body, "max_tokens", 1, kInt64Max, ">= 1", &max_tokens));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer_field(body, "max_completion_tokens", 1, kInt64Max, ">= 1",
                                                      &max_completion_tokens, &completion_given));
  *out = completion_given ? max_completion_tokens : max_tokens;
  return std::nullopt;
}

// The sampler's options: OpenAI's defaults, then what the request sets.
// "logit_bias": {"token id": bias in [-100, 100], ...}; ids as decimal strings.
Problem read_logit_bias(const json& body, std::vector<std::pair<int32_t, float>>* out) {
  const json* bias = field(body, "logit_bias");
  if (bias == nullptr) return std::nullopt;
  if (!bias->is_object()) return wrong_type("logit_bias", "an object", *bias);
  constexpr NumberRange kBias{-100.0, 100.0, true, true, "between -100 and 100"};
  for (const auto& [key, value] : bias->items()) {
    const std::string param = "logit_bias." + key;
    const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoll(key) > INT32_MAX) {
      return invalid_request("invalid_value", "logit_bias",
                             "'logit_bias' keys must be token ids (decimal integers), not " + json(key).dump());
    }
    double v = 0;
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number(value, param, kBias, &v));
    out->emplace_back(static_cast<int32_t>(std::stoll(key)), static_cast<float>(v));
  }
  return std::nullopt;
}

Problem read_sampling(const json& body, uint64_t default_seed, CompletionRequest* request) {
  SamplerOptions& sampler = request->sampler;
  double temperature = 1.0;
  double top_p = 1.0;
  double min_p = 0.0;
  int64_t top_k = 0;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number_field(body, "temperature", kTemperature, &temperature));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number_field(body, "top_p", kTopP, &top_p));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer_field(body, "top_k", 0, kInt32Max, ">= 0", &top_k));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number_field(body, "min_p", kMinP, &min_p));
  sampler.temperature = static_cast<float>(temperature);
  sampler.top_p = static_cast<float>(top_p);
  sampler.top_k = static_cast<int>(top_k);
  sampler.min_p = static_cast<float>(min_p);

  // llama.cpp calls it repeat_penalty, vLLM and transformers repetition_penalty.
  double repeat_penalty = 1.0;
  double repetition_penalty = 1.0;
  bool repeat_given = false;
  bool repetition_given = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(
      read_number_field(body, "repeat_penalty", kRepeatPenalty, &repeat_penalty, &repeat_given));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(
      read_number_field(body, "repetition_penalty", kRepeatPenalty, &repetition_penalty, &repetition_given));
  if (repeat_given && repetition_given && repeat_penalty != repetition_penalty) {
    return invalid_request("invalid_value", "repetition_penalty",
                           "'repeat_penalty' and 'repetition_penalty' are one setting: give one of them, or the "
                           "same value in both");
  }
  sampler.repeat_penalty = static_cast<float>(repetition_given ? repetition_penalty : repeat_penalty);

  int64_t seed = 0;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer_field(body, "seed", kInt64Min, kInt64Max, "between -2^63 and 2^63 - 1",
                                                      &seed, &request->seed_given));
  sampler.seed = request->seed_given ? static_cast<uint64_t>(seed) : default_seed;

  double frequency = 0.0, presence = 0.0;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number_field(body, "frequency_penalty", kOpenAiPenalty, &frequency));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number_field(body, "presence_penalty", kOpenAiPenalty, &presence));
  sampler.frequency_penalty = static_cast<float>(frequency);
  sampler.presence_penalty = static_cast<float>(presence);
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_logit_bias(body, &sampler.logit_bias));

  // Whatever got past the checks above but not the sampler's own (a top_p
  // too small for a float, say) is still the client's mistake.
  if (Status status = sampler.validate(); !status.ok()) {
    return invalid_request("invalid_value", "", status.message());
  }
  return std::nullopt;
}

Problem read_stop_string(const json& value, const std::string& param, std::vector<std::string>* out) {
  std::string stop;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(value, param, &stop));
  if (stop.empty()) return invalid_request("invalid_value", param, "'" + param + "' must not be an empty string");
  out->push_back(std::move(stop));
  return std::nullopt;
}

// "stop": one string, or an array of up to four.
Problem read_stop(const json& body, std::vector<std::string>* out) {
  const json* stop = field(body, "stop");
  if (stop == nullptr) return std::nullopt;
  if (stop->is_string()) return read_stop_string(*stop, "stop", out);
  if (!stop->is_array()) return wrong_type("stop", "a string or an array of strings", *stop);
  if (stop->size() > kMaxStopStrings) {
    return invalid_request(
        "invalid_value", "stop",
        "'stop' may hold at most " + std::to_string(kMaxStopStrings) + " strings, not " + std::to_string(stop->size()));
  }
  for (size_t i = 0; i < stop->size(); ++i) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_stop_string((*stop)[i], "stop[" + std::to_string(i) + "]", out));
  }
  return std::nullopt;
}

// "stream" and "stream_options": include_usage is kept only when streaming,
// the one case where it means anything.
Problem read_streaming(const json& body, CompletionRequest* request) {
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(body, "stream", &request->stream));
  const json* options = field(body, "stream_options");
  if (options == nullptr) return std::nullopt;
  if (!options->is_object()) return wrong_type("stream_options", "an object", *options);
  bool include_usage = false;
  if (const json* value = field(*options, "include_usage")) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool(*value, "stream_options.include_usage", &include_usage));
  }
  request->include_usage = request->stream && include_usage;
  return std::nullopt;
}

// A field whose only supported value is `one` (n, best_of).
Problem require_one(const json& body, const char* name) {
  int64_t value = 1;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer_field(body, name, kInt64Min, kInt64Max, "of 64 bits", &value));
  if (value != 1) {
    const std::string param = name;
    return invalid_request("unsupported_value", param,
                           "'" + param + "' is " + std::to_string(value) + ": only " + param + " = 1 is supported");
  }
  return std::nullopt;
}

// "functions", the older form of tools: only an empty list.
Problem refuse_functions(const json& body) {
  const json* list = field(body, "functions");
  if (list == nullptr) return std::nullopt;
  if (!list->is_array()) return wrong_type("functions", "an array", *list);
  if (!list->empty()) {
    return invalid_request("unsupported_parameter", "functions",
                           "'functions' is not supported: give the functions as 'tools'");
  }
  return std::nullopt;
}

// Chat: "logprobs" a boolean and "top_logprobs" 0..20 (only with logprobs
// true). Completions: "logprobs" an integer 0..5, the alternatives to give
// (0: the chosen tokens' log probabilities alone).
Problem read_logprobs(const json& body, CompletionRequest* request) {
  const json* logprobs = field(body, "logprobs");
  if (request->endpoint == Endpoint::completion) {
    if (field(body, "top_logprobs") != nullptr) {
      return invalid_request("unsupported_parameter", "top_logprobs",
                             "'top_logprobs' is a chat field: completions give the count in 'logprobs'");
    }
    if (logprobs == nullptr) return std::nullopt;
    int64_t count = 0;
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer(*logprobs, "logprobs", 0, 5, "from 0 to 5", &count));
    request->top_logprobs = static_cast<int>(count);
    return std::nullopt;
  }
  bool wanted = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(body, "logprobs", &wanted));
  int64_t top = 0;
  bool top_given = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(
      read_integer_field(body, "top_logprobs", 0, kMaxTopLogprobs, "from 0 to 20", &top, &top_given));
  if (top_given && top > 0 && !wanted) {
    return invalid_request("invalid_value", "top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  if (wanted) request->top_logprobs = static_cast<int>(top);
  return std::nullopt;
}

// response_format: only {"type": "text"}, the default.
// "response_format": {"type": "text"}, {"type": "json_object"} (a JSON
// object), or {"type": "json_schema", "json_schema": {"name", "schema",
// "strict"}}: the grammar the reply must follow, in GBNF.
Problem read_response_format(const json& body, std::string* grammar) {
  const json* format = field(body, "response_format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) return wrong_type("response_format", "an object", *format);
  const json* type = field(*format, "type");
  if (type == nullptr) return missing_field("response_format.type");
  if (!type->is_string()) return wrong_type("response_format.type", "a string", *type);
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") {
    *grammar = json_gbnf(/*object_root=*/true);
    return std::nullopt;
  }
  if (*type != "json_schema") {
    return invalid_request(
        "unsupported_value", "response_format.type",
        "'response_format.type' is " + shown(*type) + ": expected \"text\", \"json_object\" or \"json_schema\"");
  }
  const json* spec = field(*format, "json_schema");
  if (spec == nullptr) return missing_field("response_format.json_schema");
  if (!spec->is_object()) return wrong_type("response_format.json_schema", "an object", *spec);
  const json* schema = field(*spec, "schema");
  if (schema == nullptr) return missing_field("response_format.json_schema.schema");
  if (!schema->is_object() && !schema->is_boolean()) {
    return wrong_type("response_format.json_schema.schema", "an object", *schema);
  }
  auto gbnf = json_schema_to_gbnf(schema->dump());
  if (!gbnf.ok())
    return invalid_request("invalid_value", "response_format.json_schema.schema", gbnf.status().message());
  *grammar = std::move(gbnf).value();
  return std::nullopt;
}

// Completions' echo (only false) and suffix (only empty).
Problem refuse_completion_extras(const json& body, CompletionRequest* request) {
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(body, "echo", &request->echo));
  if (request->echo) {
    return invalid_request("unsupported_value", "echo", "'echo' is not supported: give false or leave it out");
  }
  std::string suffix;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "suffix", &suffix));
  if (!suffix.empty()) return invalid_request("unsupported_parameter", "suffix", "'suffix' is not supported");
  return require_one(body, "best_of");
}

// What OpenAI defines and we cannot give: refused by name, never ignored.
Problem refuse_unsupported(const json& body, std::string_view body_text, CompletionRequest* request) {
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer_field(body, "n", 1, kMaxChoices, "from 1 to 16", &request->n));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_functions(body));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_response_format(body, &request->grammar));
  if (request->endpoint == Endpoint::chat) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_openai_tools(body, body_text, request));
    if (request->tool_choice != ToolChoice::none && !request->grammar.empty()) {
      return invalid_request("unsupported_parameter", "response_format",
                             "'response_format' cannot be combined with 'tools' (unless tool_choice is \"none\")");
    }
  } else if (const json* tools = field(body, "tools"); tools != nullptr && !tools->is_null()) {
    return invalid_request("unsupported_parameter", "tools", "'tools' is a chat field: use /v1/chat/completions");
  }
  if (request->endpoint == Endpoint::completion) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_completion_extras(body, request));
  }
  return std::nullopt;
}

}  // namespace

ApiError invalid_request(std::string code, std::string param, std::string message) {
  ApiError error;
  error.status = 400;
  error.type = "invalid_request_error";
  error.message = std::move(message);
  error.code = std::move(code);
  error.param = std::move(param);
  return error;
}

std::variant<CompletionRequest, ApiError> parse_completion_request(Endpoint endpoint, std::string_view body_text,
                                                                   uint64_t default_seed) {
  std::variant<json, ApiError> parsed = parse_json_object(body_text);
  if (ApiError* error = std::get_if<ApiError>(&parsed)) return std::move(*error);
  const json& body = std::get<json>(parsed);

  CompletionRequest request;
  request.endpoint = endpoint;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "model", &request.model));
  if (endpoint == Endpoint::chat) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_messages(body, &request.messages));
  } else {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_prompt(body, &request));
  }
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_max_tokens(body, &request.max_tokens));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_sampling(body, default_seed, &request));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_stop(body, &request.stop));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_streaming(body, &request));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_logprobs(body, &request));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_unsupported(body, body_text, &request));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "user", &request.user));
  return request;
}

}  // namespace tensorpc::serve
