// Anthropic's Messages API (anthropic_api.h).
#include "serve/anthropic_api.h"

#include "serve/json_fields.h"
#include "serve/request_input.h"
#include "serve/tool_input.h"

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

// A tool_result block's content: a string or text blocks.
Problem read_tool_result(const json& block, const std::string& param, ChatMessage* out) {
  out->role = "tool";
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(block, "tool_use_id", &out->tool_call_id));
  if (out->tool_call_id.empty()) return missing_field(param + ".tool_use_id");
  if (const json* content = field(block, "content")) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_content(*content, param + ".content", &out->content));
  }
  bool is_error = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(block, "is_error", &is_error));
  if (is_error) out->content.insert(0, "Error: ");
  return std::nullopt;
}

// One message of "messages": its text, an assistant's tool_use blocks as
// calls, a user's tool_result blocks as tool messages before its text.
Problem read_message(const json& message, const std::string& param, std::vector<ChatMessage>* out) {
  if (!message.is_object()) return wrong_type(param, "an object", message);
  ChatMessage m;
  const json* role = field(message, "role");
  if (role == nullptr) return missing_field(param + ".role");
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(*role, param + ".role", &m.role));
  if (m.role != "user" && m.role != "assistant") {
    return invalid_request("invalid_value", param + ".role",
                           m.role == "system"
                               ? "roles are \"user\" and \"assistant\": the system prompt goes in 'system'"
                               : "roles are \"user\" and \"assistant\", not " + shown(*role));
  }
  const json* content = field(message, "content");
  if (content == nullptr) return missing_field(param + ".content");
  if (!content->is_array()) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_content(*content, param + ".content", &m.content));
    out->push_back(std::move(m));
    return std::nullopt;
  }
  std::vector<std::string> texts;
  for (size_t j = 0; j < content->size(); ++j) {
    const std::string at = indexed(param + ".content", j);
    const json& block = (*content)[j];
    if (!block.is_object()) return wrong_type(at, "an object", block);
    std::string type;
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(block, "type", &type));
    if (type == "text") {
      std::string text;
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_content(json::array({block}), at, &text));
      texts.push_back(std::move(text));
    } else if (type == "tool_use" && m.role == "assistant") {
      ToolCall call;
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(block, "id", &call.id));
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(block, "name", &call.name));
      if (call.name.empty()) return missing_field(at + ".name");
      const json* input = field(block, "input");
      if (input == nullptr || !input->is_object())
        return wrong_type(at + ".input", "an object", input ? *input : json());
      call.arguments = input->dump(-1, ' ', false, json::error_handler_t::replace);
      m.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result" && m.role == "user") {
      ChatMessage result;
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_tool_result(block, at, &result));
      out->push_back(std::move(result));
    } else {
      return invalid_request("unsupported_value", at + ".type",
                             "content blocks of type \"" + type + "\" are not supported in " + m.role +
                                 " messages: text" + (m.role == "assistant" ? ", tool_use" : ", tool_result") + " are");
    }
  }
  for (size_t k = 0; k < texts.size(); ++k) {
    if (k > 0) m.content += '\n';
    m.content += texts[k];
  }
  if (m.role == "assistant" || !m.content.empty() || texts.size() > 0) out->push_back(std::move(m));
  return std::nullopt;
}

Problem read_tools(const json& body, std::string_view body_text, MessagesRequest* r) {
  const json* tools = field(body, "tools");
  if (tools != nullptr) {
    if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
    const nlohmann::ordered_json ordered = tools->empty() ? nlohmann::ordered_json() : ordered_body(body_text);
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string param = indexed("tools", i);
      const json& tool = (*tools)[i];
      if (!tool.is_object()) return wrong_type(param, "an object", tool);
      std::string type;
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(tool, "type", &type));
      if (!type.empty() && type != "custom") {
        return invalid_request("unsupported_value", param + ".type",
                               "server tools (\"" + type + "\") are not supported: only tools with an input_schema");
      }
      if (field(tool, "input_schema") == nullptr) return missing_field(param + ".input_schema");
      ToolFunction f;
      TENSORPC_SERVE_RETURN_IF_PROBLEM(
          read_function(tool, ordered_at(ordered_at(ordered, "tools"), i), param, "input_schema", r->tools, &f));
      r->tools.push_back(std::move(f));
    }
  }
  r->tool_choice = r->tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  const json* choice = field(body, "tool_choice");
  if (choice == nullptr) return std::nullopt;
  if (!choice->is_object()) return wrong_type("tool_choice", "an object", *choice);
  std::string type;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(*choice, "type", &type));
  bool disable_parallel = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(*choice, "disable_parallel_tool_use", &disable_parallel));
  r->parallel_tool_calls = !disable_parallel;
  if (type == "none") {
    r->tool_choice = ToolChoice::none;
  } else if (type == "auto") {
  } else if (type == "any" || type == "tool") {
    if (r->tools.empty()) return invalid_request("invalid_value", "tool_choice", "'tool_choice' needs 'tools'");
    r->tool_choice = type == "any" ? ToolChoice::required : ToolChoice::function;
    if (type == "tool") {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(*choice, "name", &r->tool_choice_name));
      bool known = false;
      for (const ToolFunction& t : r->tools) known = known || t.name == r->tool_choice_name;
      if (!known) {
        return invalid_request("invalid_value", "tool_choice.name",
                               "'tool_choice.name' is \"" + r->tool_choice_name + "\", which is not one of 'tools'");
      }
    }
  } else {
    return invalid_request("invalid_value", "tool_choice.type",
                           "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
  }
  return std::nullopt;
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
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_tools(body, body_text, &r));
  if (const json* system = field(body, "system")) {
    ChatMessage m{.role = "system", .content = {}};
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_content(*system, "system", &m.content));
    r.messages.push_back(std::move(m));
  }
  const json* messages = field(body, "messages");
  if (messages == nullptr) return missing_field("messages");
  if (!messages->is_array()) return wrong_type("messages", "an array", *messages);
  if (messages->empty()) return invalid_request("invalid_value", "messages", "'messages' is empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_message((*messages)[i], indexed("messages", i), &r.messages));
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

std::string tool_use_id(std::string_view call_id) {
  std::string id = "toolu_";
  for (const char c : call_id.starts_with("call_") ? call_id.substr(5) : call_id) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) id += c;
  }
  return id;
}

std::string message_json(std::string_view id, std::string_view model, std::string_view text, const MessageEnd& end,
                         int64_t input_tokens, int64_t output_tokens, const std::vector<ToolCall>& calls) {
  ojson content = ojson::array();
  if (!text.empty() || calls.empty()) content.push_back(ojson{{"type", "text"}, {"text", std::string(text)}});
  for (const ToolCall& c : calls) {
    ojson input = ojson::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (!input.is_object()) input = ojson::object();  // cut short (max_tokens): nothing whole to give
    content.push_back(ojson{{"type", "tool_use"}, {"id", tool_use_id(c.id)}, {"name", c.name}, {"input", input}});
  }
  return dumped(ojson{
      {"id", std::string(id)},
      {"type", "message"},
      {"role", "assistant"},
      {"model", std::string(model)},
      {"content", std::move(content)},
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

std::string text_delta_event(std::string_view text) { return text_delta_event(0, text); }

std::string text_delta_event(int index, std::string_view text) {
  return named_event("content_block_delta", {{"type", "content_block_delta"},
                                             {"index", index},
                                             {"delta", {{"type", "text_delta"}, {"text", std::string(text)}}}});
}

std::string input_json_delta_event(int index, std::string_view partial_json) {
  return named_event("content_block_delta",
                     {{"type", "content_block_delta"},
                      {"index", index},
                      {"delta", {{"type", "input_json_delta"}, {"partial_json", std::string(partial_json)}}}});
}

std::string block_switch_events(int closing, int opening, std::string_view tool_id, std::string_view tool_name) {
  const ojson block = tool_id.empty() ? ojson{{"type", "text"}, {"text", ""}}
                                      : ojson{{"type", "tool_use"},
                                              {"id", tool_use_id(tool_id)},
                                              {"name", std::string(tool_name)},
                                              {"input", ojson::object()}};
  return named_event("content_block_stop", {{"type", "content_block_stop"}, {"index", closing}}) +
         named_event("content_block_start",
                     {{"type", "content_block_start"}, {"index", opening}, {"content_block", block}});
}

std::string message_end_events(const MessageEnd& end, int64_t output_tokens, int block) {
  const ojson delta{{"stop_reason", end.stop_reason},
                    {"stop_sequence", end.stop_sequence.empty() ? ojson(nullptr) : ojson(end.stop_sequence)}};
  return named_event("content_block_stop", {{"type", "content_block_stop"}, {"index", block}}) +
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
