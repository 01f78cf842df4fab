// Anthropic's Messages API (POST /v1/messages), as the JSON layer: the body
// a client such as the official `@anthropic-ai/sdk` sends, parsed into what
// the engine needs, and the message, stream events and errors it expects
// back. No HTTP, no model.
//
// Accepted: model, max_tokens (required, >= 1), messages (roles user and
// assistant, content a string or blocks: text; an assistant's tool_use
// {id, name, input}; a user's tool_result {tool_use_id, content (a string or
// text blocks), is_error}), system (a string or text blocks), stop_sequences
// (up to 16, none empty), temperature (0..1), top_p, top_k, stream, metadata
// (an object; user_id is informational), tools ({name, description,
// input_schema}; client tools only) and tool_choice ({"type": "auto", "any",
// "tool" with "name", or "none"}, and disable_parallel_tool_use). Refused by
// name with a 400: other content blocks (images, documents), server tools,
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
  // tools and tool_choice, as OpenAI's are kept (auto: automatic, any: required, tool: function).
  std::vector<ToolFunction> tools;
  ToolChoice tool_choice = ToolChoice::none;
  std::string tool_choice_name;
  bool parallel_tool_calls = true;  // !tool_choice.disable_parallel_tool_use
};

std::variant<MessagesRequest, ApiError> parse_messages_request(std::string_view body, uint64_t seed);

// Why a message ended: "end_turn", "max_tokens", "stop_sequence" or "tool_use".
struct MessageEnd {
  std::string stop_reason = "end_turn";
  std::string stop_sequence;  // with stop_reason "stop_sequence"
};

// The whole message: {"id","type":"message","role":"assistant","model","content":[{"type":"text","text"}],
// "stop_reason","stop_sequence","usage":{"input_tokens","output_tokens"}}.
// With `calls`, a tool_use block {"type": "tool_use", "id", "name", "input"}
// after the text for each (the text block left out when empty); ids
// "toolu_…".
std::string message_json(std::string_view id, std::string_view model, std::string_view text, const MessageEnd& end,
                         int64_t input_tokens, int64_t output_tokens, const std::vector<ToolCall>& calls = {});

// The stream, each one whole "event: NAME\ndata: {...}\n\n": message_start
// and the text block's content_block_start; a content_block_delta per piece;
// then content_block_stop, message_delta (the end and the output tokens) and
// message_stop.
std::string message_start_events(std::string_view id, std::string_view model, int64_t input_tokens);
std::string text_delta_event(std::string_view text);
// `block` is the index of the block still open (0: the text block).
std::string message_end_events(const MessageEnd& end, int64_t output_tokens, int block = 0);
// Blocks after the first: one opening (a text block, or a tool_use block
// with its id and name and an empty input) after the block before it
// closes; a text delta and a tool_use block's input_json_delta in block
// `index`.
std::string block_switch_events(int closing, int opening, std::string_view tool_id = {},
                                std::string_view tool_name = {});
std::string text_delta_event(int index, std::string_view text);
std::string input_json_delta_event(int index, std::string_view partial_json);
// A call's id as Anthropic writes them: "toolu_" and the id's letters and digits.
std::string tool_use_id(std::string_view call_id);

// {"type":"error","error":{"type","message"}} with Anthropic's error types
// for the HTTP status (invalid_request_error, authentication_error,
// not_found_error, overloaded_error, api_error); and the same as an event.
std::string anthropic_error_json(const ApiError& error);
std::string anthropic_error_event(const ApiError& error);

}  // namespace tensorpc::serve
