// Anthropic's Messages API as JSON (serve/anthropic_api.h): requests parse
// into messages (the system prompt first), limits and sampling, with every
// problem a 400 naming the field; the message, its stream events and errors
// have Anthropic's shapes.
#include "serve/anthropic_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <variant>

namespace tensorpc::serve {
namespace {

using json = nlohmann::ordered_json;

MessagesRequest accepted(const std::string& body) {
  auto r = parse_messages_request(body, 42);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << e->message;
  return std::holds_alternative<MessagesRequest>(r) ? std::get<MessagesRequest>(r) : MessagesRequest{};
}

ApiError refused(const std::string& body) {
  auto r = parse_messages_request(body, 42);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

const std::string kTurn = R"("messages": [{"role": "user", "content": "Who made the heaven?"}])";

TEST(AnthropicRequest, MessagesSystemAndLimits) {
  const MessagesRequest r = accepted(R"({"model": "m", "max_tokens": 64, "system": "Answer with a verse.", )" + kTurn +
                                     R"(, "stop_sequences": ["Amen"], "stream": true})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.max_tokens, 64);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Answer with a verse.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.stop, std::vector<std::string>{"Amen"});
  EXPECT_TRUE(r.stream);
  EXPECT_FLOAT_EQ(r.sampler.temperature, 1.0f);  // Anthropic's default
  EXPECT_EQ(r.sampler.seed, 42u);

  const MessagesRequest blocks = accepted(
      R"({"max_tokens": 8, "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
          "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "temperature": 0, "top_k": 5})");
  EXPECT_EQ(blocks.messages[0].content, "A\nB");
  EXPECT_EQ(blocks.messages[1].content, "hi");
  EXPECT_FLOAT_EQ(blocks.sampler.temperature, 0.0f);
  EXPECT_EQ(blocks.sampler.top_k, 5);
}

TEST(AnthropicRequest, ProblemsNameTheField) {
  EXPECT_EQ(refused("{" + kTurn + "}").param, "max_tokens");
  EXPECT_EQ(refused(R"({"max_tokens": 0, )" + kTurn + "}").param, "max_tokens");
  EXPECT_EQ(refused(R"({"max_tokens": 8})").param, "messages");
  EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]})").param,
            "messages[0].role");
  EXPECT_EQ(refused(R"({"max_tokens": 8, "temperature": 1.5, )" + kTurn + "}").param, "temperature");
  EXPECT_EQ(refused(R"({"max_tokens": 8, "tools": [{"name": "f"}], )" + kTurn + "}").param, "tools[0].input_schema");
  EXPECT_EQ(
      refused(R"({"max_tokens": 8, "tools": [{"type": "web_search_20250305", "name": "web_search"}], )" + kTurn + "}")
          .param,
      "tools[0].type");
  EXPECT_EQ(refused(R"({"max_tokens": 8, "tool_choice": {"type": "any"}, )" + kTurn + "}").param, "tool_choice");
  EXPECT_EQ(refused(R"({"max_tokens": 8, "stop_sequences": [""], )" + kTurn + "}").param, "stop_sequences[0]");
  EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]})").param,
            "messages[0].content[0].type");
  EXPECT_EQ(refused("[]").code, "invalid_json");
}

TEST(AnthropicRequest, ToolsToolChoiceAndToolBlocks) {
  const MessagesRequest r = accepted(
      R"({"max_tokens": 8, "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object",
          "properties": {"zone": {"type": "string"}, "city": {"type": "string"}}}}],
          "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
          "messages": [{"role": "user", "content": "Weather?"},
                       {"role": "assistant", "content": [{"type": "text", "text": "Let me see."},
                           {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21"},
                           {"type": "text", "text": "And Rome?"}]}]})");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_LT(r.tools[0].parameters.find("zone"), r.tools[0].parameters.find("city"));  // the request's order
  EXPECT_NE(r.tools[0].tool_json.find(R"("type":"function")"), std::string::npos) << r.tools[0].tool_json;
  EXPECT_EQ(r.tool_choice, ToolChoice::function);
  EXPECT_EQ(r.tool_choice_name, "get_weather");
  EXPECT_FALSE(r.parallel_tool_calls);
  ASSERT_EQ(r.messages.size(), 4u);  // user, assistant with a call, the tool's result, user
  EXPECT_EQ(r.messages[1].content, "Let me see.");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "toolu_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(r.messages[2].content, "21");
  EXPECT_EQ(r.messages[3].content, "And Rome?");
  EXPECT_EQ(
      accepted(R"({"max_tokens": 8, "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "any"}, )" +
               kTurn + "}")
          .tool_choice,
      ToolChoice::required);
  EXPECT_EQ(accepted(R"({"max_tokens": 8, "tools": [{"name": "f", "input_schema": {}}], )" + kTurn + "}").tool_choice,
            ToolChoice::automatic);
  EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a",
                       "name": "f", "input": {}}]}]})")
                .param,
            "messages[0].content[0].type");
}

TEST(AnthropicResponse, ToolUseBlocksAndTheirStream) {
  const std::vector<ToolCall> calls = {{.id = "call_abc123", .name = "f", .arguments = R"({"x": 1})"}};
  const json m =
      json::parse(message_json("msg_1", "kjv", "", {.stop_reason = "tool_use", .stop_sequence = {}}, 1, 2, calls));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["content"],
            json::parse(R"([{"type": "tool_use", "id": "toolu_abc123", "name": "f", "input": {"x": 1}}])"));
  const std::string events = block_switch_events(0, 1, "call_abc123", "f") + input_json_delta_event(1, R"({"x":)");
  EXPECT_NE(events.find(R"("content_block":{"type":"tool_use","id":"toolu_abc123","name":"f","input":{}})"),
            std::string::npos)
      << events;
  EXPECT_NE(events.find(R"({"type":"content_block_stop","index":0})"), std::string::npos) << events;
  EXPECT_NE(events.find(R"("delta":{"type":"input_json_delta","partial_json":"{\"x\":"})"), std::string::npos)
      << events;
  EXPECT_NE(message_end_events({}, 2, 1).find(R"({"type":"content_block_stop","index":1})"), std::string::npos);
}

TEST(AnthropicResponse, MessageAndStreamHaveAnthropicsShapes) {
  const json m = json::parse(message_json("msg_1", "kjv", "In the beginning",
                                          {.stop_reason = "stop_sequence", .stop_sequence = "Amen"}, 12, 4));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "text", "text": "In the beginning"}])"));
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "Amen");
  EXPECT_EQ(m["usage"], json::parse(R"({"input_tokens": 12, "output_tokens": 4})"));
  EXPECT_TRUE(json::parse(message_json("m", "k", "", {}, 1, 1))["stop_sequence"].is_null());

  // Each event: "event: NAME\ndata: JSON\n\n", the JSON's type the name.
  const auto names = [](const std::string& events) {
    std::vector<std::string> out;
    for (size_t at = 0; (at = events.find("event: ", at)) != std::string::npos;) {
      const size_t eol = events.find('\n', at);
      const std::string name = events.substr(at + 7, eol - at - 7);
      const size_t data_end = events.find("\n\n", eol);
      const json data = json::parse(events.substr(eol + 7, data_end - eol - 7));
      EXPECT_EQ(data["type"], name);
      out.push_back(name);
      at = data_end;
    }
    return out;
  };
  EXPECT_EQ(names(message_start_events("msg_1", "kjv", 12)),
            (std::vector<std::string>{"message_start", "content_block_start"}));
  EXPECT_EQ(names(text_delta_event(" God")), std::vector<std::string>{"content_block_delta"});
  EXPECT_EQ(names(message_end_events({}, 4)),
            (std::vector<std::string>{"content_block_stop", "message_delta", "message_stop"}));
  const json e =
      json::parse(anthropic_error_json({.status = 401, .type = {}, .message = "no key", .code = {}, .param = {}}));
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "authentication_error");
}

}  // namespace
}  // namespace tensorpc::serve
