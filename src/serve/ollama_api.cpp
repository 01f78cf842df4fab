// Ollama's API (ollama_api.h).
#include "serve/ollama_api.h"

#include <cstdio>
#include <ctime>

#include "model/runtime/json_schema.h"
#include "serve/json_fields.h"
#include "serve/request_input.h"
#include "serve/tool_input.h"

namespace tensorpc::serve {
namespace {

using ojson = nlohmann::ordered_json;

std::string dumped(const ojson& value) { return value.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// Now, as Ollama writes it: RFC 3339 in UTC.
std::string created_at() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

int64_t nanoseconds(double seconds) { return static_cast<int64_t>(seconds * 1e9); }

Problem refuse_given(const json& body, const char* name, const char* why) {
  const json* value = field(body, name);
  if (value == nullptr || (value->is_boolean() && !value->get<bool>()) ||
      ((value->is_array() || value->is_object() || value->is_string()) && value->empty())) {
    return std::nullopt;
  }
  std::string message = "'";
  message += name;
  message += "' is not supported: ";
  message += why;
  return invalid_request("unsupported_parameter", name, std::move(message));
}

Problem read_options(const json& body, OllamaRequest* r) {
  const json* options = field(body, "options");
  if (options == nullptr) return std::nullopt;
  if (!options->is_object()) return wrong_type("options", "an object", *options);
  SamplerOptions& s = r->sampler;
  for (const auto& [name, value] : options->items()) {
    const std::string param = "options." + name;
    if (value.is_null()) continue;
    double x = 0;
    int64_t n = 0;
    if (name == "temperature") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number(value, param, {0.0, 2.0, true, true, "between 0 and 2"}, &x));
      s.temperature = static_cast<float>(x);
    } else if (name == "top_p") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number(value, param, {0.0, 1.0, false, true, "in (0, 1]"}, &x));
      s.top_p = static_cast<float>(x);
    } else if (name == "min_p") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number(value, param, {0.0, 1.0, true, true, "in [0, 1]"}, &x));
      s.min_p = static_cast<float>(x);
    } else if (name == "repeat_penalty") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number(value, param, {0.0, 1e6, false, true, "> 0"}, &x));
      s.repeat_penalty = static_cast<float>(x);
    } else if (name == "presence_penalty" || name == "frequency_penalty") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_number(value, param, {-2.0, 2.0, true, true, "between -2 and 2"}, &x));
      (name == "presence_penalty" ? s.presence_penalty : s.frequency_penalty) = static_cast<float>(x);
    } else if (name == "top_k") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer(value, param, 0, INT32_MAX, ">= 0", &n));
      s.top_k = static_cast<int>(n);
    } else if (name == "repeat_last_n") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer(value, param, 0, INT32_MAX, ">= 0", &n));
      s.repeat_last_n = static_cast<int>(n);
    } else if (name == "seed") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer(value, param, INT64_MIN, INT64_MAX, "of 64 bits", &n));
      s.seed = static_cast<uint64_t>(n);
    } else if (name == "num_predict") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer(value, param, -2, INT32_MAX, ">= -2", &n));
      r->max_tokens = n > 0 ? n : -1;  // -1: no limit; -2: until the context is full
    } else if (name == "num_ctx") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer(value, param, 1, INT32_MAX, ">= 1", &n));
      r->num_ctx = n;
    } else if (name == "stop") {
      if (!value.is_array()) return wrong_type(param, "an array of strings", value);
      for (size_t i = 0; i < value.size(); ++i) {
        std::string stop;
        TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(value[i], param + "[" + std::to_string(i) + "]", &stop));
        if (!stop.empty()) r->stop.push_back(std::move(stop));
      }
    } else {
      return invalid_request("unsupported_parameter", param, "the option '" + name + "' is not supported");
    }
  }
  return std::nullopt;
}

}  // namespace

std::variant<OllamaRequest, ApiError> parse_ollama_request(bool chat, std::string_view body_text, uint64_t seed) {
  std::variant<json, ApiError> parsed = parse_json_object(body_text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& body = std::get<json>(parsed);
  OllamaRequest r;
  r.chat = chat;
  // Ollama's defaults.
  r.sampler.temperature = 0.8f;
  r.sampler.top_k = 40;
  r.sampler.top_p = 0.9f;
  r.sampler.min_p = 0.0f;
  r.sampler.repeat_penalty = 1.1f;
  r.sampler.repeat_last_n = 64;
  r.sampler.seed = seed;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "model", &r.model));
  if (field(body, "stream") != nullptr) TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(body, "stream", &r.stream));
  if (const json* format = field(body, "format")) {
    // "json", or a JSON Schema.
    if (format->is_string() && *format == "json") {
      r.grammar = json_gbnf();
    } else if (format->is_object()) {
      auto gbnf = json_schema_to_gbnf(format->dump());
      if (!gbnf.ok()) return invalid_request("invalid_value", "format", gbnf.status().message());
      r.grammar = std::move(gbnf).value();
    } else if (!(format->is_string() && format->get<std::string>().empty())) {
      return invalid_request("invalid_value", "format", "'format' must be \"json\" or a JSON Schema");
    }
  }
  if (chat) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_tool_list(body, body_text, &r.tools));
  } else {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_given(body, "tools", "tools are for /api/chat"));
  }
  TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_given(body, "images", "this server runs text models"));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_given(body, "think", "this server has no thinking mode"));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_options(body, &r));
  if (chat) {
    if (const json* messages = field(body, "messages"); messages != nullptr && messages->is_array()) {
      for (size_t i = 0; i < messages->size(); ++i) {
        TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_given((*messages)[i], "images", "this server runs text models"));
      }
    }
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_messages(body, &r.messages, /*tool_ids_optional=*/true));
  } else {
    if (field(body, "prompt") == nullptr) return missing_field("prompt");
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "prompt", &r.prompt));
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(body, "raw", &r.raw));
    std::string system;
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "system", &system));
    if (!system.empty()) r.messages.push_back({.role = "system", .content = std::move(system)});
    r.messages.push_back({.role = "user", .content = r.prompt});
  }
  if (Status s = r.sampler.validate(); !s.ok()) return invalid_request("invalid_value", "options", s.message());
  return r;
}

std::string ollama_piece_line(bool chat, std::string_view model, std::string_view piece) {
  ojson line{{"model", std::string(model)}, {"created_at", created_at()}};
  if (chat) {
    line["message"] = {{"role", "assistant"}, {"content", std::string(piece)}};
  } else {
    line["response"] = std::string(piece);
  }
  line["done"] = false;
  return dumped(line) + "\n";
}

namespace {

ojson tool_calls_json(const std::vector<ToolCall>& calls) {
  ojson list = ojson::array();
  for (const ToolCall& c : calls) {
    ojson arguments = ojson::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (!arguments.is_object()) arguments = ojson::object();  // cut short (num_predict): nothing whole to give
    list.push_back({{"function", {{"name", c.name}, {"arguments", std::move(arguments)}}}});
  }
  return list;
}

}  // namespace

std::string ollama_tool_calls_line(std::string_view model, const std::vector<ToolCall>& calls) {
  ojson line{{"model", std::string(model)}, {"created_at", created_at()}};
  line["message"] = {{"role", "assistant"}, {"content", ""}, {"tool_calls", tool_calls_json(calls)}};
  line["done"] = false;
  return dumped(line) + "\n";
}

std::string ollama_done_line(bool chat, std::string_view model, std::string_view text, const OllamaDone& done,
                             const std::vector<ToolCall>& calls) {
  ojson line{{"model", std::string(model)}, {"created_at", created_at()}};
  if (chat) {
    line["message"] = {{"role", "assistant"}, {"content", std::string(text)}};
    if (!calls.empty()) line["message"]["tool_calls"] = tool_calls_json(calls);
  } else {
    line["response"] = std::string(text);
  }
  line["done"] = true;
  line["done_reason"] = done.done_reason;
  line["total_duration"] = nanoseconds(done.total_seconds);
  line["load_duration"] = 0;
  line["prompt_eval_count"] = done.prompt_tokens;
  line["prompt_eval_duration"] = nanoseconds(done.prompt_seconds);
  line["eval_count"] = done.eval_tokens;
  line["eval_duration"] = nanoseconds(done.eval_seconds);
  return dumped(line) + "\n";
}

std::string ollama_error_json(std::string_view message) { return dumped(ojson{{"error", std::string(message)}}); }

namespace {

ojson details(const OllamaModelInfo& m) {
  char size[32];
  std::snprintf(size, sizeof size, "%.1fM", static_cast<double>(m.parameters) / 1e6);
  return ojson{{"parent_model", ""},       {"format", "gguf"},
               {"family", m.architecture}, {"families", ojson::array({m.architecture})},
               {"parameter_size", size},   {"quantization_level", ""}};
}

}  // namespace

std::string ollama_tags_json(const OllamaModelInfo& m) {
  const ojson model{{"name", m.name},       {"model", m.name}, {"modified_at", created_at()},
                    {"size", m.file_bytes}, {"digest", ""},    {"details", details(m)}};
  return dumped(ojson{{"models", ojson::array({model})}});
}

std::variant<std::string, ApiError> ollama_show_json(const OllamaModelInfo& m, std::string_view body_text) {
  std::variant<json, ApiError> parsed = parse_json_object(body_text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& body = std::get<json>(parsed);
  std::string name;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "model", &name));
  if (name.empty()) TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "name", &name));
  if (name.empty()) return missing_field("model");
  if (name != m.name && name != m.name + ":latest") {
    return ApiError{.status = 404,
                    .type = "not_found_error",
                    .message = "model '" + name + "' not found; this server serves '" + m.name + "'",
                    .code = "model_not_found",
                    .param = "model"};
  }
  const ojson info{{"general.architecture", m.architecture},
                   {"general.parameter_count", m.parameters},
                   {m.architecture + ".context_length", m.context}};
  return dumped(ojson{{"modelfile", ""},
                      {"parameters", ""},
                      {"template", m.chat_template},
                      {"details", details(m)},
                      {"model_info", info},
                      {"modified_at", created_at()}});
}

}  // namespace tensorpc::serve
