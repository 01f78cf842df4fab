// What a request gives the model: a chat's messages or a completion's
// prompt, read out of the parsed body (see openai_request.h for the shapes
// accepted). Private to tensorpc_serve_api, like json_fields.h.
#pragma once

#include <string>
#include <vector>

#include "serve/json_fields.h"

namespace tensorpc::serve {

// "param[i]": the name of an array's element in messages.
std::string indexed(const std::string& param, size_t i);

// A list of token ids (an array, checked by the caller), each in [0, 2^31 - 1].
Problem read_tokens(const json& tokens, const std::string& param, std::vector<int32_t>* out);

// A message's content: a string, or an array of {"type": "text", "text"}
// parts joined by "\n" (OpenAI's content parts and Anthropic's text blocks).
Problem read_content(const json& content, const std::string& param, std::string* out);

// "messages": required, not empty; each message's role and text content,
// an assistant's tool_calls, a tool message's tool_call_id (required unless
// `tool_ids_optional`: Ollama's tool messages have none).
Problem read_messages(const json& body, std::vector<ChatMessage>* out, bool tool_ids_optional = false);

// "prompt": required; sets prompt, or prompt_tokens and prompt_is_tokens.
Problem read_prompt(const json& body, CompletionRequest* request);

}  // namespace tensorpc::serve
