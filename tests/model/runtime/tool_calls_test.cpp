// Tool calls read out of replies (tool_calls.h): each syntax, whole and fed
// byte by byte (the same calls, the arguments streamed in pieces), text that
// only looks like a call, unfinished replies; and the grammar of a required
// call, which takes every call the tools allow and nothing else.
#include "model/runtime/tool_calls.h"

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "model/runtime/grammar.h"

namespace tensorpc {
namespace {

// The events of `text` fed in pieces of `piece` bytes.
std::vector<ToolCallEvent> events_of(ToolSyntax syntax, std::string_view text, size_t piece, bool forced = false) {
  ToolCallParser parser(syntax, forced);
  std::vector<ToolCallEvent> events;
  for (size_t at = 0; at < text.size(); at += piece) parser.feed(text.substr(at, piece), events);
  parser.finish(events);
  return events;
}

// The reply `events` make: content, and each call as name(arguments).
std::string joined(const std::vector<ToolCallEvent>& events) {
  std::string content;
  std::vector<std::string> calls;
  for (const ToolCallEvent& e : events) {
    if (e.kind == ToolCallEvent::Kind::content) content += e.text;
    if (e.kind == ToolCallEvent::Kind::call) {
      EXPECT_EQ(e.index, static_cast<int>(calls.size()));
      calls.push_back(e.text + "(");
    }
    if (e.kind == ToolCallEvent::Kind::arguments) calls.at(static_cast<size_t>(e.index)) += e.text;
  }
  std::string out = "content[" + content + "]";
  for (const std::string& c : calls) out += " " + c + ")";
  return out;
}

int argument_pieces(const std::vector<ToolCallEvent>& events) {
  int n = 0;
  for (const ToolCallEvent& e : events) n += e.kind == ToolCallEvent::Kind::arguments;
  return n;
}

struct Case {
  ToolSyntax syntax;
  const char* reply;
  const char* read;  // joined()
  bool forced = false;
};

TEST(ToolCalls, ReadsEverySyntaxWholeAndByteByByte) {
  const Case cases[] = {
      {ToolSyntax::hermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "content[Let me check.\n] get_weather({\"city\": \"Paris\"})"},
      {ToolSyntax::hermes,
       "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": "
       "{\"s\": \"}{\\\"\", \"n\": [1, {\"x\": 2}]}}\n</tool_call>",
       "content[] a({}) b({\"s\": \"}{\\\"\", \"n\": [1, {\"x\": 2}]})"},
      // Keys in another order, arguments as a string: read whole.
      {ToolSyntax::hermes, "<tool_call>\n{\"arguments\": {\"q\": 1}, \"name\": \"f\"}\n</tool_call>",
       "content[] f({\"q\":1})"},
      {ToolSyntax::hermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>",
       "content[] f({\"q\": 1})"},
      // Not calls: a marker followed by prose, a cut marker, JSON without a name.
      {ToolSyntax::hermes, "Use <tool_call> tags, like <tool_c", "content[Use <tool_call> tags, like <tool_c]"},
      {ToolSyntax::hermes, "<tool_call>\n{\"x\": 1}\n</tool_call>", "content[<tool_call>\n{\"x\": 1}\n</tool_call>]"},
      {ToolSyntax::hermes, "Plain text { \"name\": 1 }", "content[Plain text { \"name\": 1 }]"},
      {ToolSyntax::mistral,
       "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abcdefghi\"}, {\"name\": \"b\", "
       "\"arguments\": {}}]",
       "content[] a({\"x\": 1}) b({})"},
      {ToolSyntax::mistral, "No tools needed.", "content[No tools needed.]"},
      // Text after a call keeps its inner spaces, however it is cut.
      {ToolSyntax::mistral, "[TOOL_CALLS] [{\"name\": \"g\", \"arguments\": {}}] {\"name\": \"x\", \"a\": 1}",
       "content[{\"name\": \"x\", \"a\": 1}] g({})"},
      {ToolSyntax::hermes, "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>\n and then some",
       "content[and then some] g({})"},
      {ToolSyntax::mistral, "[TOOL_CALLS] nothing", "content[[TOOL_CALLS] nothing]"},
      {ToolSyntax::llama3_json, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
       "content[] get_weather({\"city\": \"Paris\"})"},
      {ToolSyntax::llama3_json, "{\"answer\": 42}", "content[{\"answer\": 42}]"},
      {ToolSyntax::llama3_json, "Hello {\"name\": \"x\", \"parameters\": {}}",
       "content[Hello {\"name\": \"x\", \"parameters\": {}}]"},
      // Forced: the prompt ended with the opener.
      {ToolSyntax::hermes, "{\"name\": \"f\", \"arguments\": {\"q\": \"x}\"}}\n</tool_call>",
       "content[] f({\"q\": \"x}\"})", true},
      {ToolSyntax::mistral, " [{\"name\": \"f\", \"arguments\": {}}]", "content[] f({})", true},
      {ToolSyntax::none, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
       "content[<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reply);
    EXPECT_EQ(joined(events_of(c.syntax, c.reply, 1 << 20, c.forced)), c.read);
    for (size_t piece : {1, 2, 3, 7}) EXPECT_EQ(joined(events_of(c.syntax, c.reply, piece, c.forced)), c.read);
    const ParsedReply whole = parse_reply(c.syntax, c.reply, c.forced);
    std::string again = "content[" + whole.content + "]";
    for (const ToolCall& call : whole.calls) again += " " + call.name + "(" + call.arguments + ")";
    EXPECT_EQ(again, c.read);
  }
}

TEST(ToolCalls, ArgumentsStreamAsTheyComeAndNameComesFirst) {
  const std::string reply =
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a long query text\"}}\n</tool_call>";
  const std::vector<ToolCallEvent> events = events_of(ToolSyntax::hermes, reply, 1);
  EXPECT_GT(argument_pieces(events), 10);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, ToolCallEvent::Kind::call);
  EXPECT_EQ(events[0].text, "search");
  // Nothing of the call is content, and no marker leaks out.
  for (const ToolCallEvent& e : events) EXPECT_NE(e.kind, ToolCallEvent::Kind::content) << e.text;
}

TEST(ToolCalls, AHeadThatNeverSettlesIsReadWholeOnceTheCallCloses) {
  // A name of 5,000 bytes, white space of 5,000: fed byte by byte, not matched again at every byte.
  const std::string long_name(5000, 'n');
  const std::string reply = "<tool_call>{\"name\": \"" + long_name + "\", \"arguments\": {\"a\": 1}}</tool_call>";
  const std::vector<ToolCallEvent> events = events_of(ToolSyntax::hermes, reply, 1);
  EXPECT_EQ(joined(events), "content[] " + long_name + "({\"a\":1})");
  EXPECT_EQ(argument_pieces(events), 1);  // whole, at the close
  const std::string spaces =
      "<tool_call>{" + std::string(5000, ' ') + "\"name\": \"f\", \"arguments\": {}}</tool_call>";
  EXPECT_EQ(joined(events_of(ToolSyntax::hermes, spaces, 1)), "content[] f({})");
  // However it is cut, the same: a short head with long arguments streams them, a long head does not.
  const std::string long_arguments =
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"" + std::string(3000, 'x') + "\"}}</tool_call>";
  for (const std::string& r : {reply, spaces, long_arguments}) {
    const std::string whole = joined(events_of(ToolSyntax::hermes, r, 1 << 20));
    for (size_t piece : {1, 7, 1000, 1500}) EXPECT_EQ(joined(events_of(ToolSyntax::hermes, r, piece)), whole);
  }
  EXPECT_GT(argument_pieces(events_of(ToolSyntax::hermes, long_arguments, 7)), 100);
}

TEST(ToolCalls, AnUnfinishedCallEndsWhereTheReplyDid) {
  const std::string reply = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"unfinis";
  EXPECT_EQ(joined(events_of(ToolSyntax::hermes, reply, 4)), "content[] f({\"a\": \"unfinis)");
  // Before its name is whole, it is content.
  EXPECT_EQ(joined(events_of(ToolSyntax::hermes, "<tool_call>\n{\"na", 4)), "content[<tool_call>\n{\"na]");
}

// Whether `grammar` takes `text` whole.
bool takes(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  GrammarState state(grammar);
  return state.advance(text) && state.complete();
}

TEST(ToolCalls, GrammarTakesTheToolsCallsOnly) {
  const std::vector<ToolFunction> tools = {
      {.name = "get_weather",
       .description = "",
       .parameters = R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})",
       .tool_json = ""},
      {.name = "now", .description = "", .parameters = "{}", .tool_json = ""},
  };
  auto hermes = tool_call_grammar(ToolSyntax::hermes, tools);
  ASSERT_TRUE(hermes.ok()) << hermes.status().to_string();
  auto g = Grammar::parse(*hermes);
  ASSERT_TRUE(g.ok()) << g.status().to_string() << "\n" << *hermes;
  EXPECT_TRUE(takes(*g, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_TRUE(takes(*g, "{\"name\":\"now\",\"arguments\":{}}\n</tool_call>"));
  EXPECT_FALSE(takes(*g, "{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // city is required
  EXPECT_FALSE(takes(*g, "{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(takes(*g, "{\"name\": \"now\", \"arguments\": {}}"));  // not closed

  auto mistral = tool_call_grammar(ToolSyntax::mistral, tools);
  ASSERT_TRUE(mistral.ok());
  auto m = Grammar::parse(*mistral);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(takes(*m, " [{\"name\": \"now\", \"arguments\": {}}]"));
  auto llama = tool_call_grammar(ToolSyntax::llama3_json, tools);
  ASSERT_TRUE(llama.ok());
  auto l = Grammar::parse(*llama);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(takes(*l, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}"));
  EXPECT_FALSE(takes(*l, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}"));

  // What the grammar takes, the parser reads back as the call.
  const ParsedReply read =
      parse_reply(ToolSyntax::hermes, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                  /*forced=*/true);
  ASSERT_EQ(read.calls.size(), 1u);
  EXPECT_EQ(read.calls[0].name, "get_weather");
}

TEST(ToolCalls, GrammarRefusesWhatItCannotConstrain) {
  const std::vector<ToolFunction> odd = {
      {.name = "f", .description = "", .parameters = R"({"type":"object","not":{}})", .tool_json = ""}};
  auto r = tool_call_grammar(ToolSyntax::hermes, odd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not"), std::string::npos) << r.status().message();
  EXPECT_FALSE(tool_call_grammar(ToolSyntax::hermes, {}).ok());
  const std::vector<ToolFunction> bad_json = {{.name = "f", .description = "", .parameters = "{", .tool_json = ""}};
  EXPECT_FALSE(tool_call_grammar(ToolSyntax::hermes, bad_json).ok());
}

TEST(ToolCalls, NewIdsFollowTheSyntax) {
  std::mt19937_64 random(7);
  const std::string openai = new_tool_call_id(ToolSyntax::hermes, random);
  EXPECT_EQ(openai.rfind("call_", 0), 0u);
  EXPECT_EQ(openai.size(), 5u + 24u);
  const std::string mistral = new_tool_call_id(ToolSyntax::mistral, random);
  EXPECT_EQ(mistral.size(), 9u);
  for (char c : mistral) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << mistral;
  // Every place of the id varies (none is stuck at one digit).
  std::vector<std::set<char>> seen(24);
  for (int i = 0; i < 200; ++i) {
    const std::string id = new_tool_call_id(ToolSyntax::hermes, random);
    for (size_t k = 0; k < 24; ++k) seen[k].insert(id[5 + k]);
  }
  for (const std::set<char>& s : seen) EXPECT_GT(s.size(), 20u);
}

}  // namespace
}  // namespace tensorpc
