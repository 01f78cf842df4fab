// Ollama's API as JSON (serve/ollama_api.h): chat and generate requests with
// Ollama's defaults and options, every problem a 400 naming the field; the
// NDJSON lines, the last one's counts, /api/tags and /api/show.
#include "serve/ollama_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <variant>

namespace tensorpc::serve {
namespace {

using json = nlohmann::json;

OllamaRequest accepted(bool chat, const std::string& body) {
  auto r = parse_ollama_request(chat, body, 7);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << e->message;
  return std::holds_alternative<OllamaRequest>(r) ? std::get<OllamaRequest>(r) : OllamaRequest{};
}

ApiError refused(bool chat, const std::string& body) {
  auto r = parse_ollama_request(chat, body, 7);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(OllamaRequest, ToolsAndToolMessages) {
  const OllamaRequest r = accepted(true, R"({"messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "21", "tool_name": "get_weather"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].content, "21");
}

TEST(OllamaResponse, ToolCallsAsOllamaWritesThem) {
  const std::vector<ToolCall> calls = {{.id = "call_x", .name = "f", .arguments = R"({"a": [1, 2]})"}};
  const json line = json::parse(ollama_tool_calls_line("m", calls));
  EXPECT_EQ(line["done"], false);
  EXPECT_EQ(line["message"]["tool_calls"], json::parse(R"([{"function": {"name": "f", "arguments": {"a": [1, 2]}}}])"));
  const json done = json::parse(ollama_done_line(true, "m", "", {}, calls));
  EXPECT_EQ(done["done"], true);
  EXPECT_EQ(done["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_FALSE(json::parse(ollama_done_line(true, "m", "hi", {}))["message"].contains("tool_calls"));
}

TEST(OllamaRequest, DefaultsOptionsAndBothEndpoints) {
  const OllamaRequest chat = accepted(true, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_TRUE(chat.stream);  // Ollama's default
  EXPECT_FLOAT_EQ(chat.sampler.temperature, 0.8f);
  EXPECT_EQ(chat.sampler.top_k, 40);
  EXPECT_FLOAT_EQ(chat.sampler.top_p, 0.9f);
  EXPECT_FLOAT_EQ(chat.sampler.repeat_penalty, 1.1f);
  EXPECT_EQ(chat.sampler.seed, 7u);
  EXPECT_EQ(chat.max_tokens, -1);

  const OllamaRequest tuned = accepted(true, R"({"messages": [{"role": "user", "content": "hi"}], "stream": false,
      "options": {"temperature": 0, "num_predict": 12, "seed": 3, "stop": ["Amen"], "top_k": 5,
                  "presence_penalty": 0.5, "num_ctx": 256}, "keep_alive": "5m"})");
  EXPECT_FALSE(tuned.stream);
  EXPECT_FLOAT_EQ(tuned.sampler.temperature, 0.0f);
  EXPECT_EQ(tuned.max_tokens, 12);
  EXPECT_EQ(tuned.sampler.seed, 3u);
  EXPECT_EQ(tuned.stop, std::vector<std::string>{"Amen"});
  EXPECT_FLOAT_EQ(tuned.sampler.presence_penalty, 0.5f);
  EXPECT_EQ(tuned.num_ctx, 256);

  const OllamaRequest gen = accepted(false, R"({"prompt": "And God said", "system": "Be brief.", "raw": true})");
  EXPECT_FALSE(gen.chat);
  EXPECT_TRUE(gen.raw);
  EXPECT_EQ(gen.prompt, "And God said");
  ASSERT_EQ(gen.messages.size(), 2u);
  EXPECT_EQ(gen.messages[0].role, "system");
  EXPECT_EQ(gen.messages[1].content, "And God said");
}

TEST(OllamaRequest, ProblemsNameTheField) {
  const std::string turn = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(refused(true, "{" + turn + R"(, "options": {"mirostat": 2}})").param, "options.mirostat");
  EXPECT_EQ(refused(true, "{" + turn + R"(, "options": {"temperature": "hot"}})").param, "options.temperature");
  EXPECT_FALSE(accepted(true, "{" + turn + R"(, "format": "json"})").grammar.empty());
  EXPECT_FALSE(accepted(true, "{" + turn + R"(, "format": {"type": "object"}})").grammar.empty());
  EXPECT_EQ(refused(true, "{" + turn + R"(, "format": "xml"})").param, "format");
  EXPECT_EQ(refused(true, "{" + turn + R"(, "format": {"type": "object", "patternProperties": {}}})").param, "format");
  EXPECT_EQ(refused(true, "{" + turn + R"(, "tools": [{"type": "function"}]})").param, "tools[0].function");
  EXPECT_EQ(refused(false, R"({"prompt": "a", "tools": [{"type": "function"}]})").param, "tools");
  EXPECT_EQ(refused(true, "{" + turn + R"(, "think": true})").param, "think");
  EXPECT_EQ(refused(true, R"({"messages": [{"role": "user", "content": "x", "images": ["AAAA"]}]})").param, "images");
  EXPECT_EQ(refused(true, "{}").param, "messages");
  EXPECT_EQ(refused(false, "{}").param, "prompt");
  EXPECT_EQ(refused(true, "{" + turn + R"(, "stream": "yes"})").param, "stream");
}

TEST(OllamaResponse, LinesTagsAndShow) {
  const std::string piece = ollama_piece_line(true, "kjv", " God");
  ASSERT_EQ(piece.back(), '\n');
  const json p = json::parse(piece);
  EXPECT_EQ(p["message"]["content"], " God");
  EXPECT_EQ(p["done"], false);
  const json g = json::parse(ollama_piece_line(false, "kjv", " God"));
  EXPECT_EQ(g["response"], " God");
  const json last = json::parse(ollama_done_line(true, "kjv", "",
                                                 {.done_reason = "length",
                                                  .prompt_tokens = 9,
                                                  .eval_tokens = 4,
                                                  .total_seconds = 0.5,
                                                  .prompt_seconds = 0.1,
                                                  .eval_seconds = 0.4}));
  EXPECT_EQ(last["done"], true);
  EXPECT_EQ(last["done_reason"], "length");
  EXPECT_EQ(last["eval_count"], 4);
  EXPECT_EQ(last["prompt_eval_count"], 9);
  EXPECT_EQ(last["total_duration"], 500000000);

  const OllamaModelInfo m{.name = "kjv",
                          .architecture = "llama",
                          .parameters = 1500000,
                          .file_bytes = 6000000,
                          .context = 256,
                          .chat_template = "chatml"};
  const json tags = json::parse(ollama_tags_json(m));
  ASSERT_EQ(tags["models"].size(), 1u);
  EXPECT_EQ(tags["models"][0]["name"], "kjv");
  EXPECT_EQ(tags["models"][0]["details"]["family"], "llama");
  const auto shown = ollama_show_json(m, R"({"model": "kjv:latest"})");
  ASSERT_TRUE(std::holds_alternative<std::string>(shown));
  EXPECT_EQ(json::parse(std::get<std::string>(shown))["model_info"]["llama.context_length"], 256);
  const auto other = ollama_show_json(m, R"({"model": "other"})");
  ASSERT_TRUE(std::holds_alternative<ApiError>(other));
  EXPECT_EQ(std::get<ApiError>(other).status, 404);
}

}  // namespace
}  // namespace tensorpc::serve
