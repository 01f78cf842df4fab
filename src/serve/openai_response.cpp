// OpenAI response bodies; see openai_response.h.
#include "serve/openai_response.h"

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

ojson error_object(const ApiError& error) {
  ojson fields{{"message", error.message},
               {"type", error.type},
               {"param", error.param.empty() ? ojson(nullptr) : ojson(error.param)},
               {"code", error.code.empty() ? ojson(nullptr) : ojson(error.code)}};
  return ojson{{"error", std::move(fields)}};
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
  }
  return "stop";
}

std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                                 FinishReason finish, Usage usage) {
  ojson response = envelope(id, "chat.completion", created, model);
  ojson choice{{"index", 0},
               {"message", {{"role", "assistant"}, {"content", string_json(text)}}},
               {"logprobs", nullptr},
               {"finish_reason", string_json(finish_reason_name(finish))}};
  response["choices"] = ojson::array({std::move(choice)});
  response["usage"] = usage_json(usage);
  return dump(response);
}

std::string text_completion_json(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                                 FinishReason finish, Usage usage) {
  ojson response = envelope(id, "text_completion", created, model);
  ojson choice{{"index", 0},
               {"text", string_json(text)},
               {"logprobs", nullptr},
               {"finish_reason", string_json(finish_reason_name(finish))}};
  response["choices"] = ojson::array({std::move(choice)});
  response["usage"] = usage_json(usage);
  return dump(response);
}

std::string chat_chunk_event(std::string_view id, int64_t created, std::string_view model, std::string_view delta_text,
                             bool first, std::optional<FinishReason> finish, bool include_usage_null) {
  ojson chunk = envelope(id, chunk_object(Endpoint::chat), created, model);
  ojson delta = ojson::object();
  if (first) delta["role"] = "assistant";
  if (!finish || first || !delta_text.empty()) delta["content"] = string_json(delta_text);
  ojson choice{
      {"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish_json(finish)}};
  chunk["choices"] = ojson::array({std::move(choice)});
  if (include_usage_null) chunk["usage"] = nullptr;
  return event(chunk);
}

std::string text_chunk_event(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                             std::optional<FinishReason> finish, bool include_usage_null) {
  ojson chunk = envelope(id, chunk_object(Endpoint::completion), created, model);
  ojson choice{
      {"index", 0}, {"text", string_json(text)}, {"logprobs", nullptr}, {"finish_reason", finish_json(finish)}};
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
