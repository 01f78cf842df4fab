// Tools in a served chat; see tool_reply.h.
#include "serve/tool_reply.h"

#include <utility>

namespace tensorpc::serve {

StatusOr<ToolPlan> plan_tools(const ChatTemplate& chat_template, std::span<const ToolFunction> tools, ToolChoice choice,
                              std::string_view choice_name, bool parallel) {
  ToolPlan plan;
  if (choice == ToolChoice::none || tools.empty()) return plan;
  plan.syntax = chat_template.tool_syntax();
  if (plan.syntax == ToolSyntax::none) {
    std::string message(chat_template.name());
    message +=
        " chat template: it has no tool calling (tools are rendered for the chatml, llama3.1, mistral-v3 and "
        "mistral-v3-tekken templates; choose one with --chat-template if the model knows one)";
    return invalid_argument(message);
  }
  plan.shown.assign(tools.begin(), tools.end());
  plan.parallel = parallel;
  if (choice == ToolChoice::automatic) return plan;
  plan.forced = true;
  std::vector<ToolFunction> allowed;
  for (const ToolFunction& t : tools) {
    if (choice == ToolChoice::required || t.name == choice_name) allowed.push_back(t);
  }
  TENSORPC_ASSIGN_OR_RETURN(plan.grammar, tool_call_grammar(plan.syntax, allowed));
  return plan;
}

StatusOr<std::string> render_with_tools(const ChatTemplate& chat_template, std::span<const ChatMessage> messages,
                                        const ToolPlan& plan) {
  TENSORPC_ASSIGN_OR_RETURN(std::string text,
                            chat_template.render(messages, /*add_generation_prompt=*/true, plan.shown));
  if (plan.forced) text.append(tool_call_opener(plan.syntax));
  return text;
}

ToolReply::ToolReply(const ToolPlan& plan)
    : parser_(plan.active() ? plan.syntax : ToolSyntax::none, plan.forced),
      syntax_(plan.syntax),
      parallel_(plan.parallel),
      ids_(std::random_device{}()) {}

ToolReply::Output ToolReply::feed(std::string_view text) {
  std::vector<ToolCallEvent> events;
  parser_.feed(text, events);
  return apply(events);
}

ToolReply::Output ToolReply::finish() {
  std::vector<ToolCallEvent> events;
  parser_.finish(events);
  return apply(events);
}

ToolReply::Output ToolReply::apply(std::vector<ToolCallEvent>& events) {
  Output out;
  for (ToolCallEvent& e : events) {
    switch (e.kind) {
      case ToolCallEvent::Kind::content: out.content += e.text; break;
      case ToolCallEvent::Kind::call:
        if (!parallel_ && e.index > 0) break;  // parallel_tool_calls false: the first call only
        calls_.push_back({.id = new_tool_call_id(syntax_, ids_), .name = e.text, .arguments = {}});
        out.calls.push_back({.call = e.index, .id = calls_.back().id, .name = std::move(e.text), .arguments = {}});
        break;
      case ToolCallEvent::Kind::arguments:
        if (e.index >= static_cast<int>(calls_.size())) break;
        calls_[static_cast<size_t>(e.index)].arguments += e.text;
        if (!out.calls.empty() && out.calls.back().call == e.index) {
          out.calls.back().arguments += e.text;
        } else {
          out.calls.push_back({.call = e.index, .id = {}, .name = {}, .arguments = std::move(e.text)});
        }
        break;
    }
  }
  return out;
}

}  // namespace tensorpc::serve
