// Chat templates with tools (chat_template.h, chat_template_tools.cpp):
// each family with tool syntax renders a conversation with a tool call and
// its result, with and without the tools listed, to exactly what jinja2 makes
// of the published template (tests/data/chat_templates; Qwen 2.5's is
// qwen2.5.jinja). The expected texts were printed by
// tools/chat_template_reference.py (its "with tools" part), which renders the
// templates the way transformers does, its tojson filter included.
#include <gtest/gtest.h>

#include <cctype>
#include <span>
#include <string>
#include <vector>

#include "model/text/chat_template.h"
#include "model/text/chat_templates_testing.h"

namespace tensorpc {
namespace {

using test::read_template;

// The conversation and tool of tools/chat_template_reference.py.
const ToolFunction kWeather = {
    .name = "get_weather",
    .description = "The weather in a city, \"now\"",
    .parameters = R"({"type": "object", "properties": {"city": {"type": "string"},)"
                  R"( "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]})",
    .tool_json =
        R"({"type":"function","function":{"name":"get_weather","description":"The weather in a city, \"now\"",)"
        R"("parameters":{"type":"object","properties":{"city":{"type":"string"},)"
        R"("unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}})",
};

std::vector<ChatMessage> with_tools() {
  return {
      {"system", "You are a terse assistant."},
      {"user", "Weather in Paris?"},
      {.role = "assistant",
       .content = "",
       .tool_calls = {{.id = "abcDEF123", .name = "get_weather", .arguments = R"({"city":"Paris","unit":"c"})"}}},
      {.role = "tool", .content = R"({"temp": 21})", .tool_calls = {}, .tool_call_id = "abcDEF123"},
  };
}

struct Expected {
  const char* file;
  const char* bos;
  const char* eos;
  const char* call_and_result;  // the whole conversation, the tools listed
  const char* first_turn;       // system and user only, the tools listed
  const char* no_tools;         // the whole conversation, no tools listed
};

const Expected kExpected[] = {
    {"qwen2.5.jinja", "<|endoftext|>", "<|im_end|>",
     "<|im_start|>system\nYou are a terse assistant.\n\n# Tools\n\nYou may call one or more functions to assist with "
     "the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
     "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The "
     "weather in a city, \\\"now\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
     "\"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": "
     "[\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
     "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
     "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in "
     "Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": "
     "21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>system\nYou are a terse assistant.\n\n# Tools\n\nYou may call one or more functions to assist with "
     "the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
     "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The "
     "weather in a city, \\\"now\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
     "\"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": "
     "[\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
     "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
     "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in "
     "Paris?<|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWeather in "
     "Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": "
     "21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
    {"llama3.1.jinja", "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: "
     "December 2023\nToday Date: 26 Jul 2024\n\nYou are a terse "
     "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond "
     "with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the "
     "format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use "
     "variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        "
     "\"description\": \"The weather in a city, \\\"now\\\"\",\n        \"parameters\": {\n            \"type\": "
     "\"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": "
     "\"string\"\n                },\n                \"unit\": {\n                    \"type\": \"string\",\n         "
     "           \"enum\": [\n                        \"c\",\n                        \"f\"\n                    ]\n   "
     "             }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        "
     "}\n    }\n}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": "
     "\"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": "
     "\"c\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": "
     "21}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: "
     "December 2023\nToday Date: 26 Jul 2024\n\nYou are a terse "
     "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond "
     "with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the "
     "format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use "
     "variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        "
     "\"description\": \"The weather in a city, \\\"now\\\"\",\n        \"parameters\": {\n            \"type\": "
     "\"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": "
     "\"string\"\n                },\n                \"unit\": {\n                    \"type\": \"string\",\n         "
     "           \"enum\": [\n                        \"c\",\n                        \"f\"\n                    ]\n   "
     "             }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        "
     "}\n    }\n}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday "
     "Date: 26 Jul 2024\n\nYou are a terse assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWeather in "
     "Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
     "{\"city\": \"Paris\", \"unit\": \"c\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": "
     "21}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"mistral-v3.jinja", "<s>", "</s>",
     "<s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The "
     "weather in a city, \"now\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
     "\"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": "
     "[\"city\"]}}}][/AVAILABLE_TOOLS][INST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", "
     "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"abcDEF123\"}]</s>[TOOL_RESULTS] {\"content\": "
     "{\"temp\": 21}, \"call_id\": \"abcDEF123\"}[/TOOL_RESULTS]",
     "<s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The "
     "weather in a city, \"now\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
     "\"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": "
     "[\"city\"]}}}][/AVAILABLE_TOOLS][INST] You are a terse assistant.\n\nWeather in Paris?[/INST]",
     "<s>[INST] Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
     "\"unit\": \"c\"}, \"id\": \"abcDEF123\"}]</s>[TOOL_RESULTS] {\"content\": {\"temp\": 21}, \"call_id\": "
     "\"abcDEF123\"}[/TOOL_RESULTS]"},
    {"mistral-v3-tekken.jinja", "<s>", "</s>",
     "<s>[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The "
     "weather in a city, \"now\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
     "\"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": "
     "[\"city\"]}}}][/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST][TOOL_CALLS][{\"name\": \"get_weather\", "
     "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}, \"id\": \"abcDEF123\"}]</s>[TOOL_RESULTS]{\"content\": "
     "{\"temp\": 21}, \"call_id\": \"abcDEF123\"}[/TOOL_RESULTS]",
     "<s>[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The "
     "weather in a city, \"now\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
     "\"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": "
     "[\"city\"]}}}][/AVAILABLE_TOOLS][INST]You are a terse assistant.\n\nWeather in Paris?[/INST]",
     "<s>[INST]Weather in Paris?[/INST][TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
     "\"unit\": \"c\"}, \"id\": \"abcDEF123\"}]</s>[TOOL_RESULTS]{\"content\": {\"temp\": 21}, \"call_id\": "
     "\"abcDEF123\"}[/TOOL_RESULTS]"},
};

TEST(ChatTemplateTools, RendersAsThePublishedTemplates) {
  const std::vector<ToolFunction> tools = {kWeather};
  const std::vector<ChatMessage> conversation = with_tools();
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.file);
    auto t = ChatTemplate::detect(read_template(e.file), e.bos, e.eos);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_NE(t->tool_syntax(), ToolSyntax::none);
    auto all = t->render(conversation, true, tools);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    EXPECT_EQ(*all, e.call_and_result);
    auto first = t->render(std::span(conversation).first(2), true, tools);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(*first, e.first_turn);
    // Calls and results render without tools listed, through either render().
    auto bare = t->render(conversation, true, {});
    ASSERT_TRUE(bare.ok()) << bare.status().to_string();
    EXPECT_EQ(*bare, e.no_tools);
    auto plain = t->render(conversation, true);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    EXPECT_EQ(*plain, e.no_tools);
  }
}

TEST(ChatTemplateTools, FamiliesWithoutToolSyntaxRefuseByName) {
  for (const char* name : {"gemma", "phi3", "llama3", "mistral-v7", "zephyr"}) {
    auto t = ChatTemplate::named(name, "<s>", "</s>");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->tool_syntax(), ToolSyntax::none);
    const std::vector<ChatMessage> user = {{"user", "hi"}};
    auto r = t->render(user, true, std::vector<ToolFunction>{kWeather});
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("no tool calling"), std::string::npos) << r.status().message();
    // A tool result is refused the same way, through the plain render() too.
    auto results = t->render(with_tools(), true);
    EXPECT_FALSE(results.ok()) << name;
    // Without tools, the conversation renders as before.
    EXPECT_TRUE(t->render(user, true, {}).ok()) << name;
  }
}

TEST(ChatTemplateTools, MistralMapsOtherCallIdsToNineCharacters) {
  auto t = ChatTemplate::named("mistral-v3", "<s>", "</s>");
  ASSERT_TRUE(t.ok());
  std::vector<ChatMessage> conversation = with_tools();
  conversation[2].tool_calls[0].id = "call_0123456789abcdefghijklmn";
  conversation[3].tool_call_id = "call_0123456789abcdefghijklmn";
  auto r = t->render(conversation, true, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const size_t call = r->find("\"id\": \"");
  const size_t result = r->find("\"call_id\": \"");
  ASSERT_NE(call, std::string::npos);
  ASSERT_NE(result, std::string::npos);
  const std::string id = r->substr(call + 7, 9);
  EXPECT_EQ(r->substr(call + 7 + 9, 1), "\"");
  EXPECT_EQ(r->substr(result + 12, 9), id);  // the result names the same call
  for (char c : id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
}

TEST(ChatTemplateTools, Llama31TakesOneCallPerMessageAndNeedsAUserTurnForTools) {
  auto t = ChatTemplate::named("llama3.1", "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(t.ok());
  std::vector<ChatMessage> two_calls = with_tools();
  two_calls[2].tool_calls.push_back(two_calls[2].tool_calls[0]);
  EXPECT_FALSE(t->render(two_calls, true, {}).ok());
  const std::vector<ChatMessage> system_only = {{"system", "s"}};
  EXPECT_FALSE(t->render(system_only, true, std::vector<ToolFunction>{kWeather}).ok());
}

}  // namespace
}  // namespace tensorpc
