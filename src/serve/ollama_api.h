// Ollama's API, as the JSON layer: POST /api/chat and /api/generate as the
// official `ollama` npm package (and apps built on Ollama) send them, their
// answers — NDJSON lines when streamed, which is Ollama's default — and
// GET /api/tags and POST /api/show, which such apps ask first.
//
// Accepted: model, messages (chat: roles system, user, assistant, content a
// string) or prompt and system (generate), stream (default true), raw
// (generate: the prompt as it is, no template), keep_alive, and options:
// temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
// presence_penalty, frequency_penalty, seed, stop, num_predict (-1: no
// limit) and num_ctx (at most the slot's context, which stays what it is).
// format: "json" (any JSON value) or a JSON Schema, which the reply then
// follows. tools (chat): OpenAI's list of functions, which the model may
// call; messages then may hold an assistant's tool_calls ({"function":
// {"name", "arguments": {...}}}) and "tool" messages (their results). Refused
// by name with a 400: images, think: true, and any other option. Sampling defaults are Ollama's: temperature 0.8, top_k
// 40, top_p 0.9, repeat_penalty 1.1 over 64 tokens.
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

struct OllamaRequest {
  bool chat = true;  // /api/chat, else /api/generate
  std::string model;
  std::vector<ChatMessage> messages;  // chat; generate: the system prompt and the prompt as a user turn
  std::string prompt;                 // generate
  bool raw = false;                   // generate: the prompt as it is
  bool stream = true;
  int64_t max_tokens = -1;  // num_predict; -1: until the end of the text or the context
  int64_t num_ctx = 0;      // 0: not given
  SamplerOptions sampler;
  std::vector<std::string> stop;
  std::string grammar;  // format "json" or a JSON Schema, as GBNF; empty: plain text
  std::vector<ToolFunction> tools;  // chat: the functions the model may call
};

std::variant<OllamaRequest, ApiError> parse_ollama_request(bool chat, std::string_view body, uint64_t seed);

// What a finished answer says: why it ended and Ollama's counts and durations.
struct OllamaDone {
  std::string done_reason = "stop";  // "stop" or "length"
  int64_t prompt_tokens = 0, eval_tokens = 0;
  double total_seconds = 0, prompt_seconds = 0, eval_seconds = 0;
};

// One NDJSON line (with its "\n") carrying `piece`, done false.
std::string ollama_piece_line(bool chat, std::string_view model, std::string_view piece);
// The last line, or the whole answer not streamed (`text` the whole text,
// `calls` the tool calls the reply made), done true.
std::string ollama_done_line(bool chat, std::string_view model, std::string_view text, const OllamaDone& done,
                             const std::vector<ToolCall>& calls = {});
// A line, done false, with the calls a streamed chat reply made:
// {"message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"name", "arguments": {...}}}]}}.
std::string ollama_tool_calls_line(std::string_view model, const std::vector<ToolCall>& calls);
// {"error": "message"}; as a line too.
std::string ollama_error_json(std::string_view message);

// GET /api/tags and POST /api/show of the one served model.
struct OllamaModelInfo {
  std::string name;
  std::string architecture;
  uint64_t parameters = 0;
  uint64_t file_bytes = 0;
  int64_t context = 0;
  std::string chat_template;  // the family, "" for none
};
std::string ollama_tags_json(const OllamaModelInfo& m);
// `body`: {"model"} or {"name"}; a name other than the served one is a 404.
std::variant<std::string, ApiError> ollama_show_json(const OllamaModelInfo& m, std::string_view body);

}  // namespace tensorpc::serve
