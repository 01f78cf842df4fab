// OpenAI response bodies: whole chat and text completions, the server-sent
// events of a streamed one, errors and the model list, as the JSON text the
// server writes.
//
// Generated text goes in as it is: bytes that are not valid UTF-8 come out
// as U+FFFD, so formatting never fails and always gives valid JSON. Fields
// come in OpenAI's order; ones we never fill (system_fingerprint) are left
// out, and logprobs is null unless the request asked for them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serve/openai_request.h"

namespace tensorpc::serve {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// "stop": the model ended (end of sequence, end of turn) or a stop string
// appeared; "length": max_tokens ran out or the context is full;
// "tool_calls": the reply called tools (and ended).
enum class FinishReason { stop, length, tool_calls };
std::string_view finish_reason_name(FinishReason reason);

// One generated token's log probabilities as a response shows them: its
// text (the token's bytes), its log probability, and the most likely
// tokens' (most likely first). A log probability of -inf shows as -9999.
struct LogprobEntry {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};
// The tokens' log probabilities of a response or chunk; null: not asked for.
using Logprobs = const std::vector<LogprobEntry>*;

// Whole (non-streamed) responses. One choice each, or several (`n`).
struct Choice {
  std::string_view text;
  FinishReason finish = FinishReason::stop;
  Logprobs logprobs = nullptr;
  // The calls the reply made (chat): the message's "tool_calls", its content
  // null when empty. Null or empty: none.
  const std::vector<ToolCall>* tool_calls = nullptr;
};
std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model,
                                 const std::vector<Choice>& choices, Usage usage);
std::string text_completion_json(std::string_view id, int64_t created, std::string_view model,
                                 const std::vector<Choice>& choices, Usage usage);
// {"id","object":"chat.completion","created","model","choices":[{"index":0,"message":{"role":"assistant",
//  "content":text},"logprobs":null,"finish_reason":...}],"usage":{"prompt_tokens","completion_tokens","total_tokens"}}
// With `logprobs`: "logprobs": {"content": [{"token","logprob","bytes","top_logprobs":
// [{"token","logprob","bytes"}]}]}.
std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                                 FinishReason finish, Usage usage, Logprobs logprobs = nullptr);
// {"id","object":"text_completion","created","model","choices":[{"index":0,"text":...,"logprobs":null,
//  "finish_reason":...}],"usage":{...}}
// With `logprobs`: "logprobs": {"tokens","token_logprobs","top_logprobs": [{token: logprob}],"text_offset"},
// the offsets counted from the start of the completion's text.
std::string text_completion_json(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                                 FinishReason finish, Usage usage, Logprobs logprobs = nullptr);

// Streaming: each returns one whole event, "data: {...}\n\n".
//
// A chat chunk's delta holds role "assistant" when `first`, and the content
// `delta_text`; a chunk with `finish` (the last one with a choice) holds no
// content unless `delta_text` is not empty, so it is usually {}. With
// `include_usage_null` (the request's stream_options.include_usage) the
// chunk carries "usage": null, as OpenAI's do before the usage chunk.
// `logprobs`, when given, are those of the tokens since the last chunk, as
// the whole response has them; a text chunk's offsets start at `text_offset`.
// `index` is the choice's (n > 1).
std::string chat_chunk_event(std::string_view id, int64_t created, std::string_view model, std::string_view delta_text,
                             bool first, std::optional<FinishReason> finish, bool include_usage_null,
                             Logprobs logprobs = nullptr, int index = 0);
std::string text_chunk_event(std::string_view id, int64_t created, std::string_view model, std::string_view text,
                             std::optional<FinishReason> finish, bool include_usage_null, Logprobs logprobs = nullptr,
                             size_t text_offset = 0, int index = 0);
// A chat chunk with a piece of tool call `call` of choice `index`: the
// call's first chunk carries its id, type and name with `arguments` (often
// ""), later ones only more of the arguments, as OpenAI streams them:
// {"delta": {"tool_calls": [{"index", "id", "type": "function", "function":
// {"name", "arguments"}}]}}.
std::string tool_call_chunk_event(std::string_view id, int64_t created, std::string_view model, int index, int call,
                                  std::string_view call_id, std::string_view name, std::string_view arguments,
                                  bool include_usage_null);
// The last chunk when stream_options.include_usage: "choices": [] and the usage.
std::string usage_chunk_event(Endpoint endpoint, std::string_view id, int64_t created, std::string_view model,
                              Usage usage);
// "data: [DONE]\n\n", the end of every stream.
std::string_view done_event();

// {"error":{"message","type","param":(string or null),"code":(string or null)}}
std::string error_json(const ApiError& error);
// An error met after a stream began, as an event: "data: {"error":{...}}\n\n".
std::string error_event(const ApiError& error);

// {"object":"list","data":[{"id","object":"model","created","owned_by"}]}
std::string models_json(std::string_view model_id, int64_t created, std::string_view owned_by);

}  // namespace tensorpc::serve
