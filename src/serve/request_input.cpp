// Messages and prompts of a request body; see request_input.h.
#include "serve/request_input.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "serve/tool_input.h"

namespace tensorpc::serve {

std::string indexed(const std::string& param, size_t i) { return param + "[" + std::to_string(i) + "]"; }

Problem read_tokens(const json& tokens, const std::string& param, std::vector<int32_t>* out) {
  out->reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    int64_t id = 0;
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_integer(tokens[i], indexed(param, i), 0, std::numeric_limits<int32_t>::max(),
                                                  "between 0 and 2^31 - 1", &id));
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

namespace {

Problem read_message(const json& message, const std::string& param, bool tool_ids_optional, ChatMessage* out) {
  if (!message.is_object()) return wrong_type(param, "an object", message);
  const json* role = field(message, "role");
  if (role == nullptr) return missing_field(param + ".role");
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(*role, param + ".role", &out->role));
  if (out->role != "system" && out->role != "user" && out->role != "assistant" && out->role != "tool") {
    return invalid_request(
        "invalid_value", param + ".role",
        "'" + param + ".role' must be \"system\", \"user\", \"assistant\" or \"tool\", not " + shown(*role));
  }
  if (out->role == "assistant") {
    if (const json* calls = field(message, "tool_calls"); calls != nullptr) {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_tool_calls(*calls, param + ".tool_calls", &out->tool_calls));
    }
  }
  if (out->role == "tool") {
    const json* id = field(message, "tool_call_id");
    if (id == nullptr && !tool_ids_optional) return missing_field(param + ".tool_call_id");
    if (id != nullptr) TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(*id, param + ".tool_call_id", &out->tool_call_id));
  }
  const json* content = field(message, "content");
  if (content == nullptr) {
    // An assistant turn may come without content (OpenAI writes null for one
    // that only called tools); it is then empty.
    if (out->role == "assistant") return std::nullopt;
    return missing_field(param + ".content");
  }
  return read_content(*content, param + ".content", &out->content);
}

// A prompt: a string or a list of token ids; at the top level also a list
// holding exactly one of those (OpenAI's batch form, with a batch of one).
Problem read_prompt_value(const json& prompt, const std::string& param, bool top_level, CompletionRequest* request) {
  if (prompt.is_string()) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(prompt, param, &request->prompt));
    if (request->prompt.empty()) return invalid_request("invalid_value", param, "'" + param + "' is empty");
    return std::nullopt;
  }
  if (!prompt.is_array()) return wrong_type(param, "a string or an array of token ids", prompt);
  if (prompt.empty()) return invalid_request("invalid_value", param, "'" + param + "' is empty");
  if (top_level && (prompt[0].is_string() || prompt[0].is_array())) {
    if (prompt.size() != 1) {
      return invalid_request("unsupported_value", param,
                             "'" + param + "' holds " + std::to_string(prompt.size()) +
                                 " prompts: only one prompt per request is supported");
    }
    return read_prompt_value(prompt[0], indexed(param, 0), false, request);
  }
  request->prompt_is_tokens = true;
  return read_tokens(prompt, param, &request->prompt_tokens);
}

}  // namespace

// Parts joined by "\n", as llama.cpp and vLLM join them for templates that take plain text.
Problem read_content(const json& content, const std::string& param, std::string* out) {
  if (content.is_string()) return read_string(content, param, out);
  if (!content.is_array()) return wrong_type(param, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_param = indexed(param, i);
    if (!part.is_object()) return wrong_type(part_param, "an object", part);
    const json* type = field(part, "type");
    if (type == nullptr) return missing_field(part_param + ".type");
    if (!type->is_string()) return wrong_type(part_param + ".type", "a string", *type);
    if (*type != "text") {
      return invalid_request("unsupported_value", part_param + ".type",
                             "content parts of type " + shown(*type) + " are not supported: only \"text\" is");
    }
    const json* part_text = field(part, "text");
    if (part_text == nullptr) return missing_field(part_param + ".text");
    std::string piece;
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(*part_text, part_param + ".text", &piece));
    if (i > 0) text += '\n';
    text += piece;
  }
  *out = std::move(text);
  return std::nullopt;
}

Problem read_messages(const json& body, std::vector<ChatMessage>* out, bool tool_ids_optional) {
  const json* messages = field(body, "messages");
  if (messages == nullptr) return missing_field("messages");
  if (!messages->is_array()) return wrong_type("messages", "an array", *messages);
  if (messages->empty()) return invalid_request("invalid_value", "messages", "'messages' is empty");
  out->resize(messages->size());
  for (size_t i = 0; i < messages->size(); ++i) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(
        read_message((*messages)[i], indexed("messages", i), tool_ids_optional, &(*out)[i]));
  }
  return std::nullopt;
}

Problem read_prompt(const json& body, CompletionRequest* request) {
  const json* prompt = field(body, "prompt");
  if (prompt == nullptr) return missing_field("prompt");
  return read_prompt_value(*prompt, "prompt", true, request);
}

}  // namespace tensorpc::serve
