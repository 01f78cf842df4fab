// What a request body says about tools: OpenAI's "tools", "tool_choice" and
// "parallel_tool_calls", and the calls an assistant message made. Private to
// tensorpc_serve_api, like json_fields.h; Anthropic's and Ollama's tools are
// read with the same pieces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "serve/json_fields.h"

namespace tensorpc::serve {

// One function the model may call, checked: `param` names where it is. Its
// name 1 to 64 letters, digits, '_' or '-', unique among `seen`; its
// description a string; its parameters (`parameters_key`: "parameters", or
// Anthropic's "input_schema") a JSON Schema object. `ordered` is the same
// function read keeping the request's key order, for the templates that
// print it (ToolFunction::tool_json).
Problem read_function(const json& function, const nlohmann::ordered_json& ordered, const std::string& param,
                      const char* parameters_key, const std::vector<ToolFunction>& seen, ToolFunction* out);

// "tools": a list of {"type": "function", "function": {...}} (OpenAI's and
// Ollama's), into *out.
Problem read_tool_list(const json& body, std::string_view body_text, std::vector<ToolFunction>* out);

// "tools" (a list of {"type": "function", "function": {...}}),
// "tool_choice" ("none", "auto", "required" or {"type": "function",
// "function": {"name"}}) and "parallel_tool_calls" (a boolean), as OpenAI
// defines them; `body_text` is the body again, read in order for tool_json.
Problem read_openai_tools(const json& body, std::string_view body_text, CompletionRequest* request);

// An assistant message's "tool_calls": [{"id", "type": "function",
// "function": {"name", "arguments"}}], arguments a JSON string (or an object,
// written back as one).
Problem read_tool_calls(const json& calls, const std::string& param, std::vector<ToolCall>* out);

// The body read again keeping its keys' order (nlohmann::json sorts them),
// for the tools' JSON; null when it does not parse (it did once already).
nlohmann::ordered_json ordered_body(std::string_view body_text);
// Its member `key`, or its item `i`: null when there is none.
const nlohmann::ordered_json& ordered_at(const nlohmann::ordered_json& v, std::string_view key);
const nlohmann::ordered_json& ordered_at(const nlohmann::ordered_json& v, size_t i);

}  // namespace tensorpc::serve
