// The token endpoints (token_api.h).
#include "serve/token_api.h"

#include "serve/json_fields.h"
#include "serve/tool_reply.h"

namespace tensorpc::serve {
namespace {

std::string dumped(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::variant<std::string, ApiError> tokenize_json(const Tokenizer& tok, std::string_view body) {
  std::variant<json, ApiError> parsed = parse_json_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& request = std::get<json>(parsed);
  std::string content;
  if (field(request, "content") == nullptr) return missing_field("content");
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(request, "content", &content));
  bool add_special = false, parse_special = false, with_pieces = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(request, "add_special", &add_special));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(request, "parse_special", &parse_special));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(request, "with_pieces", &with_pieces));
  json tokens = json::array();
  for (int32_t id : tok.encode(content, add_special, parse_special)) {
    if (with_pieces) {
      tokens.push_back({{"id", id}, {"piece", tok.token_to_piece(id, /*special=*/true)}});
    } else {
      tokens.push_back(id);
    }
  }
  return dumped(json{{"tokens", std::move(tokens)}});
}

std::variant<std::string, ApiError> detokenize_json(const Tokenizer& tok, std::string_view body) {
  std::variant<json, ApiError> parsed = parse_json_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& request = std::get<json>(parsed);
  const json* list = field(request, "tokens");
  if (list == nullptr) return missing_field("tokens");
  if (!list->is_array()) return invalid_request("invalid_type", "tokens", "'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < list->size(); ++i) {
    int64_t id = 0;
    const std::string param = "tokens[" + std::to_string(i) + "]";
    TENSORPC_SERVE_RETURN_IF_PROBLEM(
        read_integer((*list)[i], param, 0, tok.n_tokens() - 1, "a token id of the vocabulary", &id));
    ids.push_back(static_cast<int32_t>(id));
  }
  bool special = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(request, "special", &special));
  return dumped(json{{"content", tok.decode(ids, special)}});
}

std::variant<std::string, ApiError> apply_template_json(const ChatTemplate* chat_template, std::string_view why_none,
                                                        std::string_view body) {
  auto parsed = parse_completion_request(Endpoint::chat, body, 0);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  if (chat_template == nullptr) {
    return invalid_request("no_chat_template", "messages",
                           "this model has no chat template tensorpc understands (" + std::string(why_none) + ")");
  }
  const CompletionRequest& r = std::get<CompletionRequest>(parsed);
  auto tools = plan_tools(*chat_template, r.tools, r.tool_choice, r.tool_choice_name, r.parallel_tool_calls);
  if (!tools.ok()) return invalid_request("invalid_value", "tools", tools.status().message());
  auto rendered = render_with_tools(*chat_template, r.messages, *tools);
  if (!rendered.ok()) return invalid_request("invalid_value", "messages", rendered.status().message());
  return dumped(json{{"prompt", rendered.value()}});
}

}  // namespace tensorpc::serve
