// ChatTemplate: turns a conversation into the text a chat model was trained
// on, as its GGUF `tokenizer.chat_template` would.
//
// tensorpc does not interpret Jinja. It recognises the template families
// that ship with the common models by their distinctive markers, and renders
// each family with code that does what that template does:
//
//   chatml             <|im_start|>role\n…<|im_end|>\n (Qwen 2, OpenHermes …). A default
//                      system prompt written into the template (Qwen 2's "You are a
//                      helpful assistant") is taken from its text and added when the
//                      conversation has none.
//   llama3             <|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|>, BOS
//                      first, contents trimmed (Llama 3 Instruct).
//   llama3.1           llama3 turns after a system block that is always there:
//                      "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n",
//                      then the conversation's leading system message, trimmed
//                      (Llama 3.1, 3.2, 3.3 Instruct; recognised by
//                      <|start_header_id|> and "Cutting Knowledge Date"). DATE is
//                      the template's: Llama 3.1 and 3.3 write a fixed
//                      "26 Jul 2024", Llama 3.2 the date of rendering (its
//                      strftime_now("%d %b %Y"); see set_today). named("llama3.1")
//                      writes the fixed date. Their tool-calling branches (tools,
//                      builtin_tools, "ipython"/"tool" messages) are not rendered:
//                      those roles are invalid_argument errors.
//   llama2             <s>[INST] <<SYS>>\n…\n<</SYS>>\n\n… [/INST] … </s> (Llama 2 chat).
//   mistral-v0         <s>[INST] … [/INST]…</s>: the original Mistral 7B Instruct
//                      v0.1/v0.2 template; it has no system role.
//   mistral-v1         <s> [INST] system\n\nuser [/INST] …</s>: the system prompt in the
//                      first [INST].
//   mistral-v3         <s>[INST] …[/INST] …</s>: the system prompt in the LAST [INST]
//                      (Mistral 7B v0.3, Large 2407), replies trimmed.
//   mistral-v3-tekken  as v3 without the spaces (Mistral Nemo).
//   mistral-v7         [SYSTEM_PROMPT] …[/SYSTEM_PROMPT] turns (Mistral Large 2411).
//   phi3               <|user|>\n…<|end|>\n<|assistant|>\n (Phi-3 mini/medium); that
//                      template drops system messages, and so does this.
//   phi3-small         <|role|>\n…<|end|>\n for every role, system included (Phi-3
//                      small, Phi-3.5).
//   gemma              <start_of_turn>user|model\n…<end_of_turn>\n, contents trimmed. A
//                      leading system message becomes the first user turn's opening
//                      paragraph (system + "\n\n"), as Gemma 3's template does; Gemma
//                      1 and 2's templates raise an exception instead, and we render
//                      them the Gemma 3 way rather than refuse.
//   zephyr             <|role|>\n…</s>\n (Zephyr).
//
// detect() picks the family from the template text; named() gives one by the
// name above (the --chat-template flag). Whether the rendering starts with
// (or, for llama2, puts in every turn) the BOS text follows the template: it
// does when the template mentions bos_token. BOS and EOS texts come from the
// model's vocabulary.
//
// Conversations: roles are "system", "user", "assistant" and "tool" (a tool's
// result, for families with tool syntax; chat_template_tools.cpp); any other role,
// an empty conversation, and whatever the family's template refuses (roles
// not alternating user/assistant, a system role it has no place for) are
// invalid_argument errors, never exceptions.
//
// A chat loop that keeps its KV cache renders the whole conversation each
// turn and evaluates only the text past what it evaluated before (see
// chat_session.h). That works because rendering is deterministic and
// prefix-stable: messages[0..k] rendered with the generation prompt is a
// prefix of messages[0..k+1] rendered, k+1 being the reply. The reply's own
// text may differ from what the model generated (llama3, llama3.1, llama2,
// gemma and mistral-v3 trim it), which the loop handles by comparing tokens.
// A llama3.1 template dated with the day of rendering (Llama 3.2) changes
// its system block at midnight; the loop then re-evaluates from there. Not
// prefix-stable: mistral-v3 and mistral-v3-tekken with a system message,
// which their templates move into the last user turn (the loop then
// re-evaluates from the first difference).
//
// A ChatTemplate is a small value; it is safe to share between threads.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc {

// A call the assistant made to one of the conversation's tools.
struct ToolCall {
  std::string id;         // the caller's handle, echoed by the tool's result
  std::string name;       // the function's
  std::string arguments;  // JSON text (an object, as the model wrote it)
};

// A function the model may call: what tool-calling templates print into the
// prompt. `tool_json` is the tool as the request described it (OpenAI's
// {"type": "function", "function": {...}}, its keys in the request's order),
// which templates print whole; `parameters` the JSON Schema of its
// arguments (JSON text, "{}" when the request gave none).
struct ToolFunction {
  std::string name;
  std::string description;
  std::string parameters = "{}";
  std::string tool_json;
};

// How a template family writes tool calls (tool_calls.h parses them back):
//   hermes       <tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>, one block per call
//                (chatml: Qwen 2.5, Hermes 2 Pro and their kin);
//   llama3_json  the whole reply one {"name": …, "parameters": {…}} (llama3.1);
//   mistral      [TOOL_CALLS] [{"name": …, "arguments": {…}}, …] (mistral-v3, -v3-tekken, -v7);
//   none         the family's templates have no tool calling.
enum class ToolSyntax { none, hermes, llama3_json, mistral };

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::vector<ToolCall> tool_calls = {};  // an assistant's, before or instead of content
  std::string tool_call_id = {};          // a tool message's: the call it answers
};

class ChatTemplate {
 public:
  // The family of a GGUF tokenizer.chat_template. An empty text (the model
  // has no template) and a text of no known family are invalid_argument
  // errors that say how to choose one with --chat-template.
  static StatusOr<ChatTemplate> detect(std::string_view template_text, std::string_view bos_text = {},
                                       std::string_view eos_text = {});

  // The family called `name` (one of names()); invalid_argument listing the
  // names otherwise.
  static StatusOr<ChatTemplate> named(std::string_view name, std::string_view bos_text = {},
                                      std::string_view eos_text = {});

  // The family names, in the order the help text lists them.
  static std::span<const std::string_view> names();

  // The conversation as the model's template renders it; with
  // `add_generation_prompt`, followed by what opens the assistant's reply.
  StatusOr<std::string> render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // The same with the functions the model may call, printed into the prompt
  // as the family's template does (for tool_syntax() hermes, llama3_json and
  // mistral; see chat_template_tools.cpp). Assistant messages' tool_calls
  // and "tool" messages (results) are rendered whether or not `tools` is
  // empty. For a family without tool syntax, tools, tool calls or tool
  // messages are invalid_argument naming the family and those that have it.
  StatusOr<std::string> render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                               std::span<const ToolFunction> tools) const;

  // How this family writes tool calls.
  ToolSyntax tool_syntax() const;

  // The date ("05 Mar 2025", strftime's "%d %b %Y") that templates dating
  // their system block with the day of rendering (Llama 3.2's) write, in
  // place of the local date at each render(): for tests and reproducible
  // prompts. Templates with a fixed date (Llama 3.1's) keep theirs. Set it
  // before sharing the template between threads.
  void set_today(std::string date) { today_ = std::move(date); }

  std::string_view name() const;
  // The system prompt the template adds to a conversation without one
  // (chatml templates that write one in); empty when none.
  const std::string& default_system_prompt() const { return default_system_; }

  enum class Family;

 private:
  ChatTemplate(Family family, std::string_view bos_text, std::string_view eos_text);
  // The date a llama3.1 system block writes.
  std::string date_text() const;

  Family family_;
  std::string bos_;
  std::string eos_;
  bool emits_bos_;              // whether the template writes bos_token
  std::string default_system_;  // chatml only
  std::string date_;            // llama3.1: the template's fixed date; empty: the day of rendering
  std::string today_;           // set_today(); empty: the local date at render()
};

}  // namespace tensorpc
