// Anthropic's Messages API (anthropic_api.h).
#include "serve/anthropic_api.h"

#include "serve/json_fields.h"
#include "serve/request_input.h"

namespace tensorpc::serve {
namespace {

using ojson = nlohmann::ordered_json;

std::string dumped(const ojson& value) { return value.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string named_event(std::string_view name, const ojson& data) {
  std::string out = "event: ";  // appended, not `"…" + …`: GCC 12 -O3 warns falsely (-Wrestrict) on that
  out += name;
  out += "\ndata: ";
  out += dumped(data);
  out += "\n\n";
  return out;
}

constexpr size_t kMaxStopSequences = 16;

Problem refuse_nonempty(const json& body, const char* name, const char* why) {
  const json* value = field(body, name);
  if (value == nullptr) return std::nullopt;
  const bool empty = (value->is_array() || value->is_object()) && value->empty();
  if (empty) return std::nullopt;
  std::string message = "'";
  message += name;
  message += "' is not supported: ";
  message += why;
  return invalid_request("unsupported_parameter", name, std::move(message));
}

}  // namespace

std::variant<MessagesRequest, ApiError> parse_messages_request(std::string_view body_text, uint64_t seed) {
  std::variant<json, ApiError> parsed = parse_json_object(body_text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& body = std::get<json>(parsed);
  MessagesRequest r;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "model", &r.model));
  if (field(body, "max_tokens") == nullptr) return missing_field("max_tokens");
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer_field(body, "max_tokens", 1, INT32_MAX, ">= 1", &r.max_tokens));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_nonempty(body, "tools", "this server has no tool calling here"));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(refuse_nonempty(body, "tool_choice", "this server has no tool calling here"));
  if (const json* system = field(body, "system")) {
    ChatMessage m{.role = "system", .content = {}};
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_content(*system, "system", &m.content));
    r.messages.push_back(std::move(m));
  }
  std::vector<ChatMessage> turns;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_messages(body, &turns));
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i].role == "system") {
      return invalid_request("invalid_value", "messages[" + std::to_string(i) + "].role",
                             "roles are \"user\" and \"assistant\": the system prompt goes in 'system'");
    }
    r.messages.push_back(std::move(turns[i]));
  }
  if (const json* stops = field(body, "stop_sequences")) {
    if (!stops->is_array()) return wrong_type("stop_sequences", "an array of strings", *stops);
    if (stops->size() > kMaxStopSequences) {
      return invalid_request("invalid_value", "stop_sequences", "'stop_sequences' holds more than 16 strings");
    }
    for (size_t i = 0; i < stops->size(); ++i) {
      const std::string param = "stop_sequences[" + std::to_string(i) + "]";
      std::string s;
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string((*stops)[i], param, &s));
      if (s.empty()) return invalid_request("invalid_value", param, "'" + param + "' is empty");
      r.stop.push_back(std::move(s));
    }
  }
  if (const json* metadata = field(body, "metadata"); metadata != nullptr && !metadata->is_object()) {
    return wrong_type("metadata", "an object", *metadata);
  }
  // Anthropic's defaults: the whole distribution at temperature 1.
  r.sampler.temperature = 1.0f;
  r.sampler.top_k = 0;
  r.sampler.top_p = 1.0f;
  r.sampler.min_p = 0.0f;
  r.sampler.repeat_penalty = 1.0f;
  r.sampler.seed = seed;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(
      read_number_field(body, "temperature", NumberRange{0.0, 1.0, true, true, "between 0 and 1"}, &temperature));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(
      read_number_field(body, "top_p", NumberRange{0.0, 1.0, false, true, "in (0, 1]"}, &top_p));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer_field(body, "top_k", 0, INT32_MAX, ">= 0", &top_k));
  r.sampler.temperature = static_cast<float>(temperature);
  r.sampler.top_p = static_cast<float>(top_p);
  r.sampler.top_k = static_cast<int>(top_k);
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(body, "stream", &r.stream));
  if (Status s = r.sampler.validate(); !s.ok()) return invalid_request("invalid_value", "", s.message());
  return r;
}

std::string message_json(std::string_view id, std::string_view model, std::string_view text, const MessageEnd& end,
                         int64_t input_tokens, int64_t output_tokens) {
  return dumped(ojson{
      {"id", std::string(id)},
      {"type", "message"},
      {"role", "assistant"},
      {"model", std::string(model)},
      {"content", ojson::array({ojson{{"type", "text"}, {"text", std::string(text)}}})},
      {"stop_reason", end.stop_reason},
      {"stop_sequence", end.stop_sequence.empty() ? ojson(nullptr) : ojson(end.stop_sequence)},
      {"usage", {{"input_tokens", input_tokens}, {"output_tokens", output_tokens}}},
  });
}

std::string message_start_events(std::string_view id, std::string_view model, int64_t input_tokens) {
  const ojson message{{"id", std::string(id)},     {"type", "message"},
                      {"role", "assistant"},       {"model", std::string(model)},
                      {"content", ojson::array()}, {"stop_reason", nullptr},
                      {"stop_sequence", nullptr},  {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}};
  return named_event("message_start", {{"type", "message_start"}, {"message", message}}) +
         named_event(
             "content_block_start",
             {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
}

std::string text_delta_event(std::string_view text) {
  return named_event("content_block_delta", {{"type", "content_block_delta"},
                                             {"index", 0},
                                             {"delta", {{"type", "text_delta"}, {"text", std::string(text)}}}});
}

std::string message_end_events(const MessageEnd& end, int64_t output_tokens) {
  const ojson delta{{"stop_reason", end.stop_reason},
                    {"stop_sequence", end.stop_sequence.empty() ? ojson(nullptr) : ojson(end.stop_sequence)}};
  return named_event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
         named_event("message_delta",
                     {{"type", "message_delta"}, {"delta", delta}, {"usage", {{"output_tokens", output_tokens}}}}) +
         named_event("message_stop", {{"type", "message_stop"}});
}

namespace {

ojson anthropic_error(const ApiError& e) {
  const char* type = e.status == 401   ? "authentication_error"
                     : e.status == 404 ? "not_found_error"
                     : e.status == 503 ? "overloaded_error"
                     : e.status >= 500 ? "api_error"
                                       : "invalid_request_error";
  return ojson{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

}  // namespace

std::string anthropic_error_json(const ApiError& error) { return dumped(anthropic_error(error)); }

std::string anthropic_error_event(const ApiError& error) { return named_event("error", anthropic_error(error)); }

}  // namespace tensorpc::serve
