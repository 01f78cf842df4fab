// OpenAI response bodies; see openai_response.h.
#include "serve/openai_response.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace tensorpc::serve {
namespace {

// ordered_json: fields stay in the order written, which is OpenAI's.
using ojson = nlohmann::ordered_json;

// Never throws: bytes that are not UTF-8 become U+FFFD.
std::string dump(const ojson& value) { return value.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string event(const ojson& value) { return "data: " + dump(value) + "\n\n"; }

ojson string_json(std::string_view s) { return ojson(std::string(s)); }

ojson usage_json(Usage usage) {
  return ojson{{"prompt_tokens", usage.prompt_tokens},
               {"completion_tokens", usage.completion_tokens},
               {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

ojson finish_json(std::optional<FinishReason> finish) {
  return finish ? string_json(finish_reason_name(*finish)) : ojson(nullptr);
}

// The fields every response and chunk opens with.
ojson envelope(std::string_view id, std::string_view object, int64_t created, std::string_view model) {
  return ojson{
      {"id", string_json(id)}, {"object", string_json(object)}, {"created", created}, {"model", string_json(model)}};
}

std::string_view chunk_object(Endpoint endpoint) {
  return endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion";
}

// -inf has no JSON form: OpenAI's stand-in.
float shown_logprob(float lp) { return std::isfinite(lp) ? lp : -9999.0f; }

ojson bytes_json(const std::string& s) {
  ojson out = ojson::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

ojson chat_logprobs_json(Logprobs logprobs) {
  if (logprobs == nullptr) return nullptr;
  ojson content = ojson::array();
  for (const LogprobEntry& e : *logprobs) {
    ojson top = ojson::array();
    for (const auto& [token, lp] : e.top) {
      top.push_back({{"token", token}, {"logprob", shown_logprob(lp)}, {"bytes", bytes_json(token)}});
    }
    content.push_back({{"token", e.token},
                       {"logprob", shown_logprob(e.logprob)},
                       {"bytes", bytes_json(e.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return ojson{{"content", std::move(content)}};
}

ojson text_logprobs_json(Logprobs logprobs, size_t text_offset) {
  if (logprobs == nullptr) return nullptr;
  ojson tokens = ojson::array(), token_logprobs = ojson::array(), top_logprobs = ojson::array(),
        offsets = ojson::array();
  for (const LogprobEntry& e : *logprobs) {
    tokens.push_back(e.token);
    token_logprobs.push_back(shown_logprob(e.logprob));
    ojson top = ojson::object();
    for (const auto& [token, lp] : e.top) {
      if (!top.contains(token)) top[token] = shown_logprob(lp);  // two tokens of one text: the likelier
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += e.token.size();
  }
  return ojson{{"tokens", std::move(tokens)},
               {"token_logprobs", std::move(token_logprobs)},
               {"top_logprobs", std::move(top_logprobs)},
               {"text_offset", std::move(offsets)}};
}

ojson error_object(const ApiError& error) {
  ojson fields{{"message", error.message},
               {"type", error.type},
               {"param", error.param.empty() ? ojson(nullptr) : ojson(error.param)},
               {"code", error.code.empty() ? ojson(nullptr) : ojson(error.code)}};
  return ojson{{"error", std::move(fields)}};
}

// A chat choice's message: its content, and its tool calls when it made any.
ojson message_json(const Choice& choice) {
  const bool calls = choice.tool_calls != nullptr && !choice.tool_calls->empty();
  ojson message{{"role", "assistant"},
                {"content", calls && choice.text.empty() ? ojson(nullptr) : string_json(choice.text)}};
  if (!calls) return message;
  ojson list = ojson::array();
  for (const ToolCall& c : *choice.tool_calls) {
    list.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  message["tool_calls"] = std::move(list);
  return message;
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::tool_calls: return "tool_calls";
  }
  return "stop";
}

std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model,
                                 const std::vector<Choice>& choices, Usage usage) {
  ojson response = envelope(id, "chat.completion", created, model);
  ojson list = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    list.push_back({{"index", i},
                    {"message", message_json(choices[i])},
                    {"logprobs", chat_logprobs_json(choices[i].logprobs)},
                    {"finish_reason", string_json(finish_reason_name(choices[i].finish))}});
  }
  response["choices"] = std::move(list);
  response["usage"] = usage_json(usage);
  return dump(response);
}

std::string text_completion_json(std::string_view id, int64_t created, std::string_view model,
                                 const std::vector<Choice>& choices, Usage usage) {
  ojson response = envelope(id, "text_completion", created, model);
  ojson list = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    list.push_back({{"index", i},
                    {"text", string_json(choices[i].text)},
                    {"logprobs", text_logprobs_json(choices[i].logprobs, 0)},
                    {"finish_reason", string_json(finish_reason_name(choices[i].finish))}});
  }
  response["choices"] = std::move(list);
  response["usage"] = usage_json(usage);
  return dump(response);
}

std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                                 FinishReason finish, Usage usage, Logprobs logprobs) {
  return chat_completion_json(id, created, model, {Choice{text, finish, logprobs}}, usage);
}

std::string text_completion_json(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                                 FinishReason finish, Usage usage, Logprobs logprobs) {
  return text_completion_json(id, created, model, {Choice{text, finish, logprobs}}, usage);
}

std::string chat_chunk_event(std::string_view id, int64_t created, std::string_view model, std::string_view delta_text,
                             bool first, std::optional<FinishReason> finish, bool include_usage_null, Logprobs logprobs,
                             int index) {
  ojson chunk = envelope(id, chunk_object(Endpoint::chat), created, model);
  ojson delta = ojson::object();
  if (first) delta["role"] = "assistant";
  if (!finish || first || !delta_text.empty()) delta["content"] = string_json(delta_text);
  ojson choice{{"index", index},
               {"delta", std::move(delta)},
               {"logprobs", chat_logprobs_json(logprobs)},
               {"finish_reason", finish_json(finish)}};
  chunk["choices"] = ojson::array({std::move(choice)});
  if (include_usage_null) chunk["usage"] = nullptr;
  return event(chunk);
}

std::string text_chunk_event(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                             std::optional<FinishReason> finish, bool include_usage_null, Logprobs logprobs,
                             size_t text_offset, int index) {
  ojson chunk = envelope(id, chunk_object(Endpoint::completion), created, model);
  ojson choice{{"index", index},
               {"text", string_json(text)},
               {"logprobs", text_logprobs_json(logprobs, text_offset)},
               {"finish_reason", finish_json(finish)}};
  chunk["choices"] = ojson::array({std::move(choice)});
  if (include_usage_null) chunk["usage"] = nullptr;
  return event(chunk);
}

std::string tool_call_chunk_event(std::string_view id, int64_t created, std::string_view model, int index, int call,
                                  std::string_view call_id, std::string_view name, std::string_view arguments,
                                  bool include_usage_null) {
  ojson chunk = envelope(id, chunk_object(Endpoint::chat), created, model);
  ojson piece{{"index", call}};
  ojson function = ojson::object();
  if (!call_id.empty()) {
    piece["id"] = string_json(call_id);
    piece["type"] = "function";
    function["name"] = string_json(name);
  }
  function["arguments"] = string_json(arguments);
  piece["function"] = std::move(function);
  ojson choice{{"index", index},
               {"delta", {{"tool_calls", ojson::array({std::move(piece)})}}},
               {"logprobs", nullptr},
               {"finish_reason", nullptr}};
  chunk["choices"] = ojson::array({std::move(choice)});
  if (include_usage_null) chunk["usage"] = nullptr;
  return event(chunk);
}

std::string usage_chunk_event(Endpoint endpoint, std::string_view id, int64_t created, std::string_view model,
                              Usage usage) {
  ojson chunk = envelope(id, chunk_object(endpoint), created, model);
  chunk["choices"] = ojson::array();
  chunk["usage"] = usage_json(usage);
  return event(chunk);
}

std::string_view done_event() { return "data: [DONE]\n\n"; }

std::string error_json(const ApiError& error) { return dump(error_object(error)); }

std::string error_event(const ApiError& error) { return event(error_object(error)); }

std::string models_json(std::string_view model_id, int64_t created, std::string_view owned_by) {
  ojson model{
      {"id", string_json(model_id)}, {"object", "model"}, {"created", created}, {"owned_by", string_json(owned_by)}};
  return dump(ojson{{"object", "list"}, {"data", ojson::array({std::move(model)})}});
}

}  // namespace tensorpc::serve
