// Tool calls in a model's reply: read back out of its text as it streams,
// in the syntax of the chat template's family (ToolSyntax, chat_template.h),
// and a grammar that makes a reply a call when the caller requires one.
//
// ToolCallParser takes the reply piece by piece and says what each piece
// completes: text of the reply's content, the start of a call (its name),
// or a piece of the call's arguments, as soon as each is certain. Text that
// may be the start of a call marker (a "<tool_c" at the end of a piece) is
// held until the next piece settles it. A call is recognised when its JSON
// begins {"name": "…", "arguments": {  ("parameters" for llama3_json); its
// arguments then stream as the model writes them, up to the brace that
// closes them. A call object written otherwise (keys in another order,
// arguments as a string) is read whole when it closes. Text that turns out
// not to be a call (a marker followed by something else, JSON without a
// name) is content, as written. Parsing never fails.
//
// A caller that requires a call ends the prompt with tool_call_opener() and
// samples under tool_call_grammar(): the reply is then the rest of one call,
// and the parser, told `forced`, starts inside it.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/chat_template.h"
#include "tensorpc/status.h"

namespace tensorpc {

struct ToolCallEvent {
  enum class Kind {
    content,    // text: the reply's content
    call,       // text: the name of call `index` (from 0), which begins
    arguments,  // text: the next piece of call `index`'s arguments (JSON text)
  };
  Kind kind = Kind::content;
  int index = 0;
  std::string text;
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolSyntax syntax, bool forced = false);

  // Reads the next piece of the reply; appends the events it completes.
  void feed(std::string_view piece, std::vector<ToolCallEvent>& events);
  // The reply ended: appends what was held (an unfinished marker is content;
  // an unfinished call's arguments end where the reply did).
  void finish(std::vector<ToolCallEvent>& events);

  // Calls begun so far.
  int calls() const { return calls_; }

 private:
  enum class State { text, list, before_call, call, after_call, plain };
  enum class Match { need_more, yes, no };

  void step(std::vector<ToolCallEvent>& events);
  bool step_text(std::vector<ToolCallEvent>& events);
  bool step_call(std::vector<ToolCallEvent>& events);
  bool step_after_call();
  // The call's head, {"name": "…", "arguments": {, in call_: where its arguments begin.
  Match match_head(size_t* arguments_at, std::string* name) const;
  void end_call(std::vector<ToolCallEvent>& events);
  // What was read since the last marker is content after all; parsing stops.
  void give_up(std::vector<ToolCallEvent>& events);

  ToolSyntax syntax_;
  State state_ = State::text;
  std::string pending_;  // text not yet read
  std::string raw_;      // text read since the marker that opened the calls (for give_up)
  bool seen_text_ = false;
  bool after_call_ = false;  // text just after a call: its leading white space is dropped

  // The call being read.
  std::string call_;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
  bool head_sent_ = false;
  bool head_failed_ = false;  // the head is not {"name": …, "arguments": {: read the call whole
  size_t arguments_at_ = 0, arguments_sent_ = 0, arguments_end_ = 0;
  int calls_ = 0;
};

// What a prompt ends with so that the reply continues a call: "<tool_call>\n"
// (hermes), "[TOOL_CALLS]" (mistral), nothing (llama3_json).
std::string_view tool_call_opener(ToolSyntax syntax);

// The GBNF (grammar.h) of the rest of a reply that is one call to one of
// `tools` after tool_call_opener(): the call's JSON, its arguments valid
// against the tool's parameters (json_schema.h), and what closes it.
// invalid_argument when a tool's parameters use a keyword the schema
// converter does not take (naming the tool), or `tools` is empty.
StatusOr<std::string> tool_call_grammar(ToolSyntax syntax, std::span<const ToolFunction> tools);

// A new call id as the syntax wants it, drawn from `random`: "call_" and 24
// letters or digits; for mistral 9 letters or digits (its template's rule).
std::string new_tool_call_id(ToolSyntax syntax, std::mt19937_64& random);

// A whole reply read at once: its content and its calls (ids empty).
struct ParsedReply {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedReply parse_reply(ToolSyntax syntax, std::string_view text, bool forced = false);

}  // namespace tensorpc
