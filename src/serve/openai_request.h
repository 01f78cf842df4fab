// OpenAI request bodies: the JSON a client POSTs to /v1/chat/completions or
// /v1/completions, parsed into a CompletionRequest whose every field has
// been checked, or an ApiError saying (in OpenAI's error shape) which field
// is wrong and why.
//
// This is the JSON layer only: no HTTP, no model. The server hands the body
// over and gets back values it can use as they are; the engine still checks
// what only the model knows (token ids against the vocabulary, the prompt
// against the context). The JSON library stays inside tensorpc_serve_api
// (json_fields.h, private): nothing here depends on it.
//
// Fields are read the way OpenAI documents them, with null meaning "not
// given" everywhere; a field of the wrong type or out of range is a 400
// naming it; a field OpenAI defines whose requested behaviour we cannot give
// (tools, ...) is a 400 naming it
// rather than an answer that silently ignores it; fields nobody defines are
// ignored, since clients send extras. Parsing never throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/runtime/sampler.h"
#include "model/text/chat_template.h"

namespace tensorpc::serve {

// An error reply: the HTTP status and OpenAI's {"error": {...}} fields
// (error_json() in openai_response.h writes it).
struct ApiError {
  int status = 400;  // HTTP status
  // "invalid_request_error", "authentication_error", "not_found_error", "server_error", ...
  std::string type;
  // Says what is wrong, naming the field: "'temperature' must be a number between 0 and 2".
  std::string message;
  // "invalid_json", "invalid_type", "invalid_value", "missing_field", "unsupported_value",
  // "unsupported_parameter", "model_not_found", ...; may be empty.
  std::string code;
  std::string param;  // the offending field ("messages[1].role"); may be empty
};

// A 400 invalid_request_error: what every problem with a request body is.
ApiError invalid_request(std::string code, std::string param, std::string message);

enum class Endpoint { chat, completion };

// Whether the reply may or must call tools: none (the tools are not shown to
// the model), automatic (it may), required (it must call one of them),
// function (it must call tool_choice_name).
enum class ToolChoice { none, automatic, required, function };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::completion;
  std::string model;  // "" when absent (allowed)
  // Chat: roles system, user, assistant or tool; text content parts joined
  // by "\n"; an assistant's tool_calls, a tool message's tool_call_id.
  std::vector<ChatMessage> messages;
  // Completions: the prompt as text (a string, or a list of one string), or
  // as token ids (ids >= 0; the engine checks them against the vocabulary).
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // max_tokens, or max_completion_tokens when both are given; >= 1 when
  // given, -1 when neither is.
  int64_t max_tokens = -1;
  SamplerOptions sampler;  // OpenAI's defaults where the request says nothing (see below)
  bool seed_given = false;
  std::vector<std::string> stop;  // at most 4, none empty
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage, and only when streaming
  bool echo = false;           // completions' "echo": only false is accepted
  // Log probabilities: -1 none; else the chosen tokens' and this many most
  // likely alternatives' (chat: logprobs true and top_logprobs; completions:
  // logprobs N).
  int top_logprobs = -1;
  // Choices generated together, each with its own draws (seed, seed + 1, …);
  // the server allows at most its --parallel.
  int64_t n = 1;
  // response_format json_object or json_schema: the grammar (GBNF) the reply
  // must follow; empty for plain text.
  std::string grammar;
  // Chat: the functions the model may call ("tools"), whether it may or must
  // (tool_choice: automatic when tools are given, else none), and whether a
  // reply may hold several calls (parallel_tool_calls; false: the first only).
  std::vector<ToolFunction> tools;
  ToolChoice tool_choice = ToolChoice::none;
  std::string tool_choice_name;  // tool_choice function
  bool parallel_tool_calls = true;
  std::string user;            // ignored, but must be a string if present
};

// Parses and validates a request body for `endpoint`. `default_seed` is the
// sampler's seed when the request gives none (seed_given is then false).
//
// Sampling, where the request says nothing: temperature 1 (in [0, 2]),
// top_p 1 (in (0, 1]), top_k 0 = off (an integer >= 0), min_p 0 (in [0, 1]),
// repeat_penalty 1 (> 0; "repetition_penalty" is the same field, and if both
// are given they must agree), repeat_last_n as SamplerOptions has it. seed is
// any int64, kept as its uint64 bit pattern. frequency_penalty and
// presence_penalty are numbers in [-2, 2] (OpenAI's penalties over the
// tokens generated so far); logit_bias an object of token ids (decimal
// strings) to numbers in [-100, 100] (the engine checks the ids against the
// vocabulary).
//
// logprobs: chat "logprobs" a boolean with "top_logprobs" 0..20 (which
// needs logprobs true); completions "logprobs" an integer 0..5.
//
// n: 1 to kMaxChoices. response_format: "text", "json_object", or
// "json_schema" with its schema, turned into `grammar` (json_schema.h says
// which keywords; any other is a 400 naming it).
//
// tools (chat): tool_input.h says how they are read; a tools list (with
// tool_choice not "none") and a response_format other than text together
// are refused (the grammar would forbid the calls).
//
// Refused with the field named: best_of other than 1; a non-empty
// functions list (the older form of tools); tools in a completion request;
// echo: true; a non-empty suffix.
//
// Chat: "messages" is required and not empty; each message is an object
// with "role" system, user, assistant or tool and "content" a string or an
// array of {"type": "text", "text": ...} parts (joined by "\n"); an
// assistant's content may be null or absent (empty), and it may carry
// "tool_calls"; a tool message needs "tool_call_id". Completions: "prompt" is required,
// a non-empty string, a list of exactly one string, or a non-empty list of
// token ids (integers in [0, 2^31 - 1]).
//
// A body that is not a JSON object (bad syntax, with its position; another
// JSON type; nested deeper than kMaxJsonDepth) is 400 invalid_json.
std::variant<CompletionRequest, ApiError> parse_completion_request(Endpoint endpoint, std::string_view body,
                                                                   uint64_t default_seed);

// The most choices one request may ask for ("n").
inline constexpr int64_t kMaxChoices = 16;

// The most alternatives top_logprobs may ask for (OpenAI's limit).
inline constexpr int kMaxTopLogprobs = 20;

// How deeply arrays and objects may nest in a body; deeper ones are refused
// before they are parsed.
inline constexpr int kMaxJsonDepth = 64;

}  // namespace tensorpc::serve
