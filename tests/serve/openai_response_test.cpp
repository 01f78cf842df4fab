// OpenAI response bodies (serve/openai_response.h): each one parses back as
// JSON with OpenAI's fields, in its order, and text that is not valid UTF-8
// still gives valid JSON.
#include "serve/openai_response.h"

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

namespace tensorpc::serve {
namespace {

using json = nlohmann::ordered_json;

json parsed(std::string_view text) {
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(value.is_discarded()) << text;
  return value;
}

// The JSON of one server-sent event, checking its framing.
json event_json(std::string_view event) {
  EXPECT_TRUE(event.starts_with("data: ")) << event;
  EXPECT_TRUE(event.ends_with("\n\n")) << event;
  if (event.size() < 8) return json();
  const std::string_view payload = event.substr(6, event.size() - 8);
  EXPECT_EQ(payload.find('\n'), std::string_view::npos) << "one line per event: " << event;
  return parsed(payload);
}

std::vector<std::string> keys(const json& object) {
  std::vector<std::string> names;
  for (const auto& [key, value] : object.items()) names.push_back(key);
  return names;
}

using Keys = std::vector<std::string>;

TEST(OpenaiResponse, FinishReasonsHaveOpenAiNames) {
  EXPECT_EQ(finish_reason_name(FinishReason::stop), "stop");
  EXPECT_EQ(finish_reason_name(FinishReason::length), "length");
  EXPECT_EQ(finish_reason_name(FinishReason::tool_calls), "tool_calls");
}

TEST(OpenaiResponse, ToolCallsGoInTheMessageWithNullContent) {
  const std::vector<ToolCall> calls = {{.id = "call_a", .name = "f", .arguments = "{\"x\": 1}"}};
  const json r =
      parsed(chat_completion_json("chatcmpl-1", 1, "m", {Choice{"", FinishReason::tool_calls, nullptr, &calls}},
                                  {.prompt_tokens = 1, .completion_tokens = 2}));
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(keys(choice["message"]), (Keys{"role", "content", "tool_calls"}));
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["tool_calls"],
            json::parse(R"([{"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}])"));
  // Content beside the calls stays; no calls, no tool_calls field.
  const json both =
      parsed(chat_completion_json("c", 1, "m", {Choice{"Let me see.", FinishReason::tool_calls, nullptr, &calls}}, {}));
  EXPECT_EQ(both["choices"][0]["message"]["content"], "Let me see.");
  const std::vector<ToolCall> none;
  const json plain = parsed(chat_completion_json("c", 1, "m", {Choice{"", FinishReason::stop, nullptr, &none}}, {}));
  EXPECT_EQ(plain["choices"][0]["message"], json({{"role", "assistant"}, {"content", ""}}));
}

TEST(OpenaiResponse, ToolCallChunksStreamAsOpenAiDoes) {
  const json first = event_json(tool_call_chunk_event("c", 1, "m", 2, 0, "call_a", "f", "", true));
  const json& choice = first["choices"][0];
  EXPECT_EQ(choice["index"], 2);
  EXPECT_TRUE(choice["finish_reason"].is_null());
  EXPECT_EQ(
      choice["delta"],
      json::parse(
          R"({"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]})"));
  EXPECT_TRUE(first["usage"].is_null());
  const json more = event_json(tool_call_chunk_event("c", 1, "m", 0, 1, "", "", "{\"x", false));
  EXPECT_EQ(more["choices"][0]["delta"],
            json::parse(R"({"tool_calls":[{"index":1,"function":{"arguments":"{\"x"}}]})"));
  EXPECT_FALSE(more.contains("usage"));
}

TEST(OpenaiResponse, ChatCompletionHasOpenAiShape) {
  const json r = parsed(chat_completion_json("chatcmpl-1", 1700000000, "kjv-tiny", "In the beginning",
                                             FinishReason::stop, {.prompt_tokens = 12, .completion_tokens = 4}));
  EXPECT_EQ(keys(r), (Keys{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_EQ(r["id"], "chatcmpl-1");
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["created"], 1700000000);
  EXPECT_EQ(r["model"], "kjv-tiny");
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& choice = r["choices"][0];
  EXPECT_EQ(keys(choice), (Keys{"index", "message", "logprobs", "finish_reason"}));
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["message"], json({{"role", "assistant"}, {"content", "In the beginning"}}));
  EXPECT_TRUE(choice["logprobs"].is_null());
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(r["usage"], json({{"prompt_tokens", 12}, {"completion_tokens", 4}, {"total_tokens", 16}}));
}

TEST(OpenaiResponse, TextCompletionHasOpenAiShape) {
  const json r = parsed(text_completion_json("cmpl-9", 5, "m", " God created", FinishReason::length,
                                             {.prompt_tokens = 3, .completion_tokens = 2}));
  EXPECT_EQ(keys(r), (Keys{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_EQ(r["object"], "text_completion");
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& choice = r["choices"][0];
  EXPECT_EQ(keys(choice), (Keys{"index", "text", "logprobs", "finish_reason"}));
  EXPECT_EQ(choice["text"], " God created");
  EXPECT_TRUE(choice["logprobs"].is_null());
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
}

// Log probabilities as OpenAI lays them out: chat's content list with bytes
// and alternatives, completions' parallel arrays with text offsets; -inf as -9999.
TEST(OpenaiResponse, LogprobsHaveOpenAisShapes) {
  const std::vector<LogprobEntry> lp = {
      {.token = " God", .logprob = -0.25f, .top = {{" God", -0.25f}, {" the", -2.0f}}},
      {.token = " cre", .logprob = -std::numeric_limits<float>::infinity(), .top = {}},
  };
  const json chat = parsed(chat_completion_json("c", 1, "m", " God cre", FinishReason::stop, {}, &lp));
  const json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(keys(content[0]), (Keys{"token", "logprob", "bytes", "top_logprobs"}));
  EXPECT_EQ(content[0]["token"], " God");
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(content[0]["bytes"], json({32, 71, 111, 100}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], " the");
  EXPECT_EQ(keys(content[0]["top_logprobs"][1]), (Keys{"token", "logprob", "bytes"}));
  EXPECT_FLOAT_EQ(content[1]["logprob"].get<float>(), -9999.0f);
  EXPECT_TRUE(content[1]["top_logprobs"].empty());

  const json text = parsed(text_completion_json("t", 1, "m", " God cre", FinishReason::stop, {}, &lp));
  const json& l = text["choices"][0]["logprobs"];
  EXPECT_EQ(keys(l), (Keys{"tokens", "token_logprobs", "top_logprobs", "text_offset"}));
  EXPECT_EQ(l["tokens"], json({" God", " cre"}));
  EXPECT_EQ(l["text_offset"], json({0, 4}));
  EXPECT_FLOAT_EQ(l["top_logprobs"][0][" the"].get<float>(), -2.0f);

  // A chunk carries its tokens' log probabilities; a text chunk's offsets go on from where the last ended.
  const json chunk = event_json(text_chunk_event("t", 1, "m", " cre", std::nullopt, false, &lp, 10));
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["text_offset"], json({10, 14}));
  const json delta = event_json(chat_chunk_event("c", 1, "m", " God", false, std::nullopt, false, &lp));
  EXPECT_EQ(delta["choices"][0]["logprobs"]["content"].size(), 2u);
}

TEST(OpenaiResponse, SeveralChoicesAreIndexedInOrder) {
  const std::vector<Choice> choices = {{"a", FinishReason::stop, nullptr}, {"b", FinishReason::length, nullptr}};
  const json chat = parsed(chat_completion_json("c", 1, "m", choices, {.prompt_tokens = 2, .completion_tokens = 5}));
  ASSERT_EQ(chat["choices"].size(), 2u);
  EXPECT_EQ(chat["choices"][1]["index"], 1);
  EXPECT_EQ(chat["choices"][1]["message"]["content"], "b");
  EXPECT_EQ(chat["choices"][1]["finish_reason"], "length");
  const json text = parsed(text_completion_json("t", 1, "m", choices, {}));
  EXPECT_EQ(text["choices"][0]["text"], "a");
  EXPECT_EQ(text["choices"][1]["index"], 1);
  EXPECT_EQ(
      event_json(chat_chunk_event("c", 1, "m", "x", false, std::nullopt, false, nullptr, 2))["choices"][0]["index"], 2);
  EXPECT_EQ(event_json(text_chunk_event("t", 1, "m", "x", std::nullopt, false, nullptr, 0, 3))["choices"][0]["index"],
            3);
}

TEST(OpenaiResponse, QuotesControlCharactersAndUnicodeRoundTrip) {
  const std::string text = "say \"hi\"\\\n\t\x01 h\xc3\xa9llo \xf0\x9f\x99\x82";
  const json r = parsed(chat_completion_json("id", 0, "m", text, FinishReason::stop, {}));
  EXPECT_EQ(r["choices"][0]["message"]["content"], text);
}

TEST(OpenaiResponse, InvalidUtf8BecomesReplacementCharacters) {
  const std::string text = "ab\xff\x63\xc3";  // a stray byte, 'c', and a character cut short
  const std::string body = text_completion_json("id", 0, "m\xfe", text, FinishReason::stop, {});
  const json r = parsed(body);
  EXPECT_EQ(r["choices"][0]["text"], "ab\xef\xbf\xbd\x63\xef\xbf\xbd");
  EXPECT_EQ(r["model"], "m\xef\xbf\xbd");
  const json chunk = event_json(chat_chunk_event("id", 0, "m", "\x80", false, std::nullopt, false));
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "\xef\xbf\xbd");
}

TEST(OpenaiResponse, FirstChatChunkCarriesTheRole) {
  const json c = event_json(chat_chunk_event("chatcmpl-1", 7, "m", "Hel", true, std::nullopt, false));
  EXPECT_EQ(keys(c), (Keys{"id", "object", "created", "model", "choices"}));
  EXPECT_EQ(c["id"], "chatcmpl-1");
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["created"], 7);
  ASSERT_EQ(c["choices"].size(), 1u);
  const json& choice = c["choices"][0];
  EXPECT_EQ(keys(choice), (Keys{"index", "delta", "logprobs", "finish_reason"}));
  EXPECT_EQ(choice["delta"], json({{"role", "assistant"}, {"content", "Hel"}}));
  EXPECT_TRUE(choice["finish_reason"].is_null());
}

TEST(OpenaiResponse, LaterChatChunksCarryOnlyContent) {
  const json c = event_json(chat_chunk_event("id", 7, "m", "lo", false, std::nullopt, false));
  EXPECT_EQ(c["choices"][0]["delta"], json({{"content", "lo"}}));
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(c.contains("usage"));
}

TEST(OpenaiResponse, FinalChatChunkHasEmptyDeltaAndFinishReason) {
  const json c = event_json(chat_chunk_event("id", 7, "m", "", false, FinishReason::length, false));
  EXPECT_EQ(c["choices"][0]["delta"], json::object());
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
}

TEST(OpenaiResponse, FinalChatChunkKeepsTextItIsGiven) {
  const json c = event_json(chat_chunk_event("id", 7, "m", "end", false, FinishReason::stop, false));
  EXPECT_EQ(c["choices"][0]["delta"], json({{"content", "end"}}));
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
}

TEST(OpenaiResponse, ChunksCarryNullUsageWhenUsageWillFollow) {
  const json chat = event_json(chat_chunk_event("id", 7, "m", "x", false, std::nullopt, true));
  EXPECT_EQ(keys(chat), (Keys{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_TRUE(chat["usage"].is_null());
  const json text = event_json(text_chunk_event("id", 7, "m", "x", std::nullopt, true));
  ASSERT_TRUE(text.contains("usage"));
  EXPECT_TRUE(text["usage"].is_null());
}

TEST(OpenaiResponse, TextChunkHasOpenAiShape) {
  const json c = event_json(text_chunk_event("cmpl-2", 8, "m", " and", std::nullopt, false));
  EXPECT_EQ(keys(c), (Keys{"id", "object", "created", "model", "choices"}));
  EXPECT_EQ(c["object"], "text_completion");
  const json& choice = c["choices"][0];
  EXPECT_EQ(keys(choice), (Keys{"index", "text", "logprobs", "finish_reason"}));
  EXPECT_EQ(choice["text"], " and");
  EXPECT_TRUE(choice["finish_reason"].is_null());
  const json last = event_json(text_chunk_event("cmpl-2", 8, "m", "", FinishReason::stop, false));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["text"], "");
}

TEST(OpenaiResponse, UsageChunkHasNoChoicesAndTheTotals) {
  const Usage usage{.prompt_tokens = 10, .completion_tokens = 20};
  const json chat = event_json(usage_chunk_event(Endpoint::chat, "id", 3, "m", usage));
  EXPECT_EQ(chat["object"], "chat.completion.chunk");
  EXPECT_EQ(chat["choices"], json::array());
  EXPECT_EQ(chat["usage"], json({{"prompt_tokens", 10}, {"completion_tokens", 20}, {"total_tokens", 30}}));
  const json text = event_json(usage_chunk_event(Endpoint::completion, "id", 3, "m", usage));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"], json::array());
  EXPECT_EQ(text["usage"]["total_tokens"], 30);
}

TEST(OpenaiResponse, DoneEventEndsTheStream) { EXPECT_EQ(done_event(), "data: [DONE]\n\n"); }

TEST(OpenaiResponse, ErrorJsonHasOpenAiShape) {
  ApiError error = invalid_request("invalid_value", "temperature", "'temperature' must be a number between 0 and 2");
  const json e = parsed(error_json(error));
  EXPECT_EQ(keys(e), (Keys{"error"}));
  EXPECT_EQ(keys(e["error"]), (Keys{"message", "type", "param", "code"}));
  EXPECT_EQ(e["error"]["message"], "'temperature' must be a number between 0 and 2");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "temperature");
  EXPECT_EQ(e["error"]["code"], "invalid_value");
}

TEST(OpenaiResponse, EmptyParamAndCodeAreNull) {
  const ApiError error{.status = 500, .type = "server_error", .message = "the engine stopped", .code = "", .param = ""};
  const json e = parsed(error_json(error));
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_TRUE(e["error"]["code"].is_null());
  EXPECT_EQ(e["error"]["type"], "server_error");
}

TEST(OpenaiResponse, ErrorEventCarriesTheErrorJson) {
  const ApiError error{.status = 500, .type = "server_error", .message = "lost a server", .code = "", .param = ""};
  EXPECT_EQ(event_json(error_event(error)), parsed(error_json(error)));
}

TEST(OpenaiResponse, ParserErrorsFormatAsValidJson) {
  // A parse error quotes the body, which may hold bytes that are not UTF-8.
  auto result = parse_completion_request(Endpoint::chat, "{\"messages\":\xff\xfe", 0);
  ASSERT_TRUE(std::holds_alternative<ApiError>(result));
  const json e = parsed(error_json(std::get<ApiError>(result)));
  EXPECT_EQ(e["error"]["code"], "invalid_json");
  EXPECT_TRUE(e["error"]["param"].is_null());
}

TEST(OpenaiResponse, ModelsJsonListsTheModel) {
  const json m = parsed(models_json("kjv-tiny", 1700000000, "tensorpc"));
  EXPECT_EQ(keys(m), (Keys{"object", "data"}));
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0],
            json({{"id", "kjv-tiny"}, {"object", "model"}, {"created", 1700000000}, {"owned_by", "tensorpc"}}));
}

}  // namespace
}  // namespace tensorpc::serve
