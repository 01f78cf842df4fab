// Tools in a served chat, whichever API asked: what the request's tools make
// of the prompt and the sampling (ToolPlan), and each reply's calls read out
// of its text as it streams (ToolReply), ready for the API's own shape.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/runtime/tool_calls.h"
#include "serve/openai_request.h"

namespace tensorpc::serve {

struct ToolPlan {
  std::vector<ToolFunction> shown;  // the tools the prompt lists (none: tools play no part)
  ToolSyntax syntax = ToolSyntax::none;
  // The reply must be a call: the prompt ends with tool_call_opener(syntax)
  // and `grammar` (GBNF) constrains the rest.
  bool forced = false;
  std::string grammar;
  bool parallel = true;  // several calls kept; false: the first only

  bool active() const { return !shown.empty(); }
  // Whether the reply's control tokens must print: Mistral's calls open with
  // one, [TOOL_CALLS] (Request::special_text).
  bool special_text() const { return active() && syntax == ToolSyntax::mistral; }
};

// The plan for `tools` under `choice` with a chat template: inactive for
// choice none or no tools; invalid_argument (a 400 naming "tools") when the
// template has no tool syntax, or a required call's grammar cannot be made
// (a keyword of the parameters the schema converter does not take).
StatusOr<ToolPlan> plan_tools(const ChatTemplate& chat_template, std::span<const ToolFunction> tools, ToolChoice choice,
                              std::string_view choice_name, bool parallel);

// The conversation rendered for a plan, the opener of a required call last.
StatusOr<std::string> render_with_tools(const ChatTemplate& chat_template, std::span<const ChatMessage> messages,
                                        const ToolPlan& plan);

// One reply's calls, read as its text comes. Not thread-safe.
class ToolReply {
 public:
  explicit ToolReply(const ToolPlan& plan);

  // What a piece of text made: content, and pieces of calls. A piece with
  // an id begins call `call` (its name); the others carry more arguments.
  struct CallPiece {
    int call = 0;
    std::string id, name;
    std::string arguments;
  };
  struct Output {
    std::string content;
    std::vector<CallPiece> calls;
  };
  Output feed(std::string_view text);
  // The reply ended.
  Output finish();

  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  Output apply(std::vector<ToolCallEvent>& events);

  ToolCallParser parser_;
  ToolSyntax syntax_;
  bool parallel_;
  std::vector<ToolCall> calls_;
  std::mt19937_64 ids_;
};

}  // namespace tensorpc::serve
