// Anthropic's Messages API (POST /v1/messages), as the JSON layer: the body
// a client such as the official `@anthropic-ai/sdk` sends, parsed into what
// the engine needs, and the message, stream events and errors it expects
// back. No HTTP, no model.
//
// Accepted: model, max_tokens (required, >= 1), messages (roles user and
// assistant, content a string or text blocks), system (a string or text
// blocks), stop_sequences (up to 16, none empty), temperature (0..1), top_p,
// top_k, stream, metadata (an object; user_id is informational). Refused by
// name with a 400: tools and tool_choice, content blocks other than text,
// anything of the wrong type. Sampling defaults to Anthropic's: temperature
// 1, no top-p or top-k, no penalty.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/runtime/sampler.h"
#include "model/text/chat_template.h"
#include "serve/openai_request.h"

namespace tensorpc::serve {

struct MessagesRequest {
  std::string model;                  // "" when absent
  std::vector<ChatMessage> messages;  // the system prompt first, when given
  int64_t max_tokens = 0;
  SamplerOptions sampler;
  std::vector<std::string> stop;
  bool stream = false;
};

std::variant<MessagesRequest, ApiError> parse_messages_request(std::string_view body, uint64_t seed);

// Why a message ended: "end_turn", "max_tokens" or "stop_sequence".
struct MessageEnd {
  std::string stop_reason = "end_turn";
  std::string stop_sequence;  // with stop_reason "stop_sequence"
};

// The whole message: {"id","type":"message","role":"assistant","model","content":[{"type":"text","text"}],
// "stop_reason","stop_sequence","usage":{"input_tokens","output_tokens"}}.
std::string message_json(std::string_view id, std::string_view model, std::string_view text, const MessageEnd& end,
                         int64_t input_tokens, int64_t output_tokens);

// The stream, each one whole "event: NAME\ndata: {...}\n\n": message_start
// and the text block's content_block_start; a content_block_delta per piece;
// then content_block_stop, message_delta (the end and the output tokens) and
// message_stop.
std::string message_start_events(std::string_view id, std::string_view model, int64_t input_tokens);
std::string text_delta_event(std::string_view text);
std::string message_end_events(const MessageEnd& end, int64_t output_tokens);

// {"type":"error","error":{"type","message"}} with Anthropic's error types
// for the HTTP status (invalid_request_error, authentication_error,
// not_found_error, overloaded_error, api_error); and the same as an event.
std::string anthropic_error_json(const ApiError& error);
std::string anthropic_error_event(const ApiError& error);

}  // namespace tensorpc::serve
