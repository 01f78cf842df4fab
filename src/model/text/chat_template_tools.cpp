// Chat templates with tools (chat_template.h): the functions a model may
// call printed into the prompt, the assistant's calls and the tools' results
// written back, as each family's template does.
//
//   hermes       (chatml) Qwen 2.5's template: with tools, a system turn that
//                holds the system message (or the template's default one),
//                "# Tools" and each tool as JSON inside <tools></tools>; an
//                assistant's calls as <tool_call> blocks after its text; tool
//                results as <tool_response> blocks, consecutive ones in one
//                user turn.
//   llama3_json  (llama3.1) Llama 3.1's template with its default
//                tools_in_user_message: "Environment: ipython" in the system
//                block; the tools, each as JSON indented by 4, and the
//                instructions to answer with a call in the first user turn;
//                one call per assistant turn, as {"name", "parameters"}; tool
//                results as "ipython" turns, the text as a JSON string.
//   mistral      (mistral-v3; -v3-tekken the same without the spaces after
//                the markers) Mistral 7B v0.3's template: [AVAILABLE_TOOLS] before
//                the last user turn; calls as [TOOL_CALLS] [{"name",
//                "arguments", "id"}]; results as [TOOL_RESULTS] {"content":
//                …, "call_id": …}[/TOOL_RESULTS]. Call ids must be 9 letters
//                or digits there: other ids are mapped to such (the same id
//                always to the same one, in the call and in its result).
//
// JSON is written as the templates' `tojson` writes it (Python's json.dumps:
// ", " and ": " between items, non-ASCII as is, keys in the request's order).
#include <cstdint>
#include <nlohmann/json.hpp>

#include "model/text/chat_template.h"
#include "model/text/chat_template_text.h"

namespace tensorpc {
namespace {

using chat_text::append;
using chat_text::cat;
using chat_text::trim;
using Json = nlohmann::ordered_json;
using Family = ChatTemplate::Family;

void python_string(const std::string& s, std::string& out) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          append(out, {"\\u00", std::string_view(&kHex[(c >> 4) & 15], 1), std::string_view(&kHex[c & 15], 1)});
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// `v` as Python's json.dumps(v, ensure_ascii=False, indent=indent) writes it
// (indent 0: on one line).
void python_json(const Json& v, int indent, int level, std::string& out) {
  const bool object = v.is_object();
  if (!object && !v.is_array()) {
    if (v.is_string()) return python_string(v.get_ref<const std::string&>(), out);
    out += v.dump();
    return;
  }
  if (v.empty()) {
    out += object ? "{}" : "[]";
    return;
  }
  const auto newline = [&](int depth) {
    if (indent > 0) append(out, {"\n", std::string(static_cast<size_t>(indent * depth), ' ')});
  };
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += indent > 0 ? "," : ", ";
    first = false;
    newline(level + 1);
    if (object) {
      python_string(it.key(), out);
      out += ": ";
    }
    python_json(it.value(), indent, level + 1, out);
  }
  newline(level);
  out += object ? '}' : ']';
}

std::string python_json(const Json& v, int indent = 0) {
  std::string out;
  python_json(v, indent, 0, out);
  return out;
}

// JSON text as the template prints the value it holds; text that is not
// JSON as it is.
std::string python_json_text(const std::string& text, int indent = 0) {
  Json v = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return v.is_discarded() ? text : python_json(v, indent);
}

// A tool's object as the request gave it (ToolFunction::tool_json), or one
// made from its parts when it has none.
Json tool_object(const ToolFunction& tool) {
  Json v = Json::parse(tool.tool_json, nullptr, /*allow_exceptions=*/false);
  if (v.is_object()) return v;
  Json function = Json::object();
  function["name"] = tool.name;
  if (!tool.description.empty()) function["description"] = tool.description;
  Json parameters = Json::parse(tool.parameters, nullptr, /*allow_exceptions=*/false);
  function["parameters"] = parameters.is_discarded() ? Json::object() : parameters;
  return Json{{"type", "function"}, {"function", std::move(function)}};
}

// Mistral's call ids: 9 letters or digits. Others map to such, by a hash.
std::string mistral_call_id(const std::string& id) {
  const auto alnum = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  bool ok = id.size() == 9;
  for (const char c : id) ok = ok && alnum(c);
  if (ok) return id;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string out;
  for (int i = 0; i < 9; ++i, h /= 62) out += kDigits[h % 62];
  return out;
}

bool plain(const ChatMessage& m) { return m.role != "tool" && m.tool_calls.empty(); }

Status roles_error(std::string_view family) {
  return invalid_argument(cat({family, " chat template: roles are system, user, assistant and tool"}));
}

}  // namespace

ToolSyntax ChatTemplate::tool_syntax() const {
  switch (family_) {
    case Family::chatml: return ToolSyntax::hermes;
    case Family::llama3_1: return ToolSyntax::llama3_json;
    case Family::mistral_v3:
    case Family::mistral_v3_tekken: return ToolSyntax::mistral;
    default: return ToolSyntax::none;
  }
}

StatusOr<std::string> ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                           std::span<const ToolFunction> tools) const {
  bool tool_messages = false;
  for (const ChatMessage& m : messages) tool_messages = tool_messages || !plain(m);
  if (tools.empty() && !tool_messages) return render(messages, add_generation_prompt);

  const std::string_view family = name();
  if (tool_syntax() == ToolSyntax::none) {
    return invalid_argument(cat({family,
                                 " chat template: it has no tool calling (tools, tool calls and tool results are "
                                 "rendered for the chatml, llama3.1, mistral-v3 and mistral-v3-tekken templates)"}));
  }
  if (messages.empty()) return invalid_argument(cat({family, " chat template: the conversation is empty"}));
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      return roles_error(family);
    }
    if (!m.tool_calls.empty() && m.role != "assistant") {
      return invalid_argument(cat({family, " chat template: only assistant messages make tool calls"}));
    }
  }
  const std::string_view bos = emits_bos_ ? std::string_view(bos_) : std::string_view();
  std::string out(bos);

  switch (tool_syntax()) {
    case ToolSyntax::hermes: {
      const bool leading_system = messages[0].role == "system";
      if (!tools.empty()) {
        const std::string& system = leading_system ? messages[0].content : default_system_;
        append(out, {"<|im_start|>system\n", system, system.empty() ? "" : "\n\n",
                     "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                     "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"});
        for (const ToolFunction& t : tools) append(out, {"\n", python_json(tool_object(t))});
        append(out, {"\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                     "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                     "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"});
      } else if (leading_system) {
        append(out, {"<|im_start|>system\n", messages[0].content, "<|im_end|>\n"});
      } else if (!default_system_.empty()) {
        append(out, {"<|im_start|>system\n", default_system_, "<|im_end|>\n"});
      }
      for (size_t i = leading_system ? 1 : 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool") {
          if (i == 0 || messages[i - 1].role != "tool") append(out, {"<|im_start|>user"});
          append(out, {"\n<tool_response>\n", m.content, "\n</tool_response>"});
          if (i + 1 == messages.size() || messages[i + 1].role != "tool") append(out, {"<|im_end|>\n"});
        } else if (m.tool_calls.empty()) {
          append(out, {"<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n"});
        } else {
          append(out, {"<|im_start|>assistant"});
          if (!m.content.empty()) append(out, {"\n", m.content});
          for (const ToolCall& c : m.tool_calls) {
            append(out, {"\n<tool_call>\n{\"name\": \"", c.name, "\", \"arguments\": ", python_json_text(c.arguments),
                         "}\n</tool_call>"});
          }
          append(out, {"<|im_end|>\n"});
        }
      }
      if (add_generation_prompt) append(out, {"<|im_start|>assistant\n"});
      return out;
    }

    case ToolSyntax::llama3_json: {
      size_t next = 0;
      std::string system;
      if (messages[0].role == "system") system = trim(messages[next++].content);
      append(out, {"<|start_header_id|>system<|end_header_id|>\n\n", tools.empty() ? "" : "Environment: ipython\n",
                   "Cutting Knowledge Date: December 2023\nToday Date: ", date_text(), "\n\n", system, "<|eot_id|>"});
      if (!tools.empty()) {
        // The tools go into the first user message, which must be there.
        if (next == messages.size() || messages[next].role != "user") {
          return invalid_argument(cat({family,
                                       " chat template: with tools, the conversation must open with a user "
                                       "message (after an optional system message)"}));
        }
        append(out, {"<|start_header_id|>user<|end_header_id|>\n\n",
                     "Given the following functions, please respond with a JSON for a function call with its proper "
                     "arguments that best answers the given prompt.\n\n",
                     "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and "
                     "its value}.Do not use variables.\n\n"});
        for (const ToolFunction& t : tools) append(out, {python_json(tool_object(t), 4), "\n\n"});
        append(out, {trim(messages[next++].content), "<|eot_id|>"});
      }
      for (; next < messages.size(); ++next) {
        const ChatMessage& m = messages[next];
        if (m.role == "tool") {
          append(out, {"<|start_header_id|>ipython<|end_header_id|>\n\n", python_json(Json(m.content)), "<|eot_id|>"});
        } else if (m.tool_calls.empty()) {
          append(out, {"<|start_header_id|>", m.role, "<|end_header_id|>\n\n", trim(m.content), "<|eot_id|>"});
        } else {
          if (m.tool_calls.size() != 1) {
            return invalid_argument(cat({family, " chat template: one tool call per assistant message"}));
          }
          const ToolCall& c = m.tool_calls[0];
          append(out, {"<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"", c.name,
                       "\", \"parameters\": ", python_json_text(c.arguments), "}<|eot_id|>"});
        }
      }
      if (add_generation_prompt) append(out, {"<|start_header_id|>assistant<|end_header_id|>\n\n"});
      return out;
    }

    case ToolSyntax::mistral: {
      const bool tekken = family_ == Family::mistral_v3_tekken;
      const std::string_view gap = tekken ? "" : " ";
      size_t first = 0;
      const std::string* system = nullptr;
      if (messages[0].role == "system") system = &messages[first++].content;
      // User and assistant turns alternate, tool calls and results aside.
      size_t last_user = messages.size();
      size_t turn = 0;
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") last_user = i;
        if (!plain(m)) continue;
        if ((m.role == "user") != (turn++ % 2 == 0)) {
          return invalid_argument(cat({family,
                                       " chat template: after the optional system message, conversation roles must "
                                       "alternate user/assistant/user/assistant/… (tool calls and results aside)"}));
        }
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          if (!tools.empty() && i == last_user) {
            append(out, {"[AVAILABLE_TOOLS]", gap, "["});
            for (size_t t = 0; t < tools.size(); ++t) {
              const Json tool = tool_object(tools[t]);
              const Json& function = tool.contains("function") ? tool["function"] : tool;
              append(out, {t > 0 ? ", " : "", "{\"type\": \"function\", \"function\": {"});
              bool first_key = true;
              for (auto it = function.begin(); it != function.end(); ++it) {
                if (it.key() == "return") continue;
                append(out, {first_key ? "" : ", ", "\"", it.key(), "\": "});
                first_key = false;
                if (it.value().is_string()) {
                  append(out, {"\"", it.value().get_ref<const std::string&>(), "\""});
                } else {
                  out += python_json(it.value());
                }
              }
              out += "}}";
            }
            append(out, {"][/AVAILABLE_TOOLS]"});
          }
          if (i + 1 == messages.size() && system != nullptr) {
            append(out, {"[INST]", gap, *system, "\n\n", m.content, "[/INST]"});
          } else {
            append(out, {"[INST]", gap, m.content, "[/INST]"});
          }
        } else if (!m.tool_calls.empty()) {
          append(out, {"[TOOL_CALLS]", gap, "["});
          for (size_t c = 0; c < m.tool_calls.size(); ++c) {
            const ToolCall& call = m.tool_calls[c];
            append(out, {c > 0 ? ", " : "", "{\"name\": ", python_json(Json(call.name)), ", \"arguments\": ",
                         python_json_text(call.arguments), ", \"id\": \"", mistral_call_id(call.id), "\"}"});
          }
          append(out, {"]", eos_});
        } else if (m.role == "tool") {
          append(out, {"[TOOL_RESULTS]", gap, "{\"content\": ", m.content, ", \"call_id\": \"",
                       mistral_call_id(m.tool_call_id), "\"}[/TOOL_RESULTS]"});
        } else if (m.role == "assistant") {
          append(out, {tekken ? "" : " ", tekken ? std::string(m.content) : trim(m.content), eos_});
        } else {
          return invalid_argument(cat({family, " chat template: a system message only comes first"}));
        }
      }
      return out;
    }

    case ToolSyntax::none: break;
  }
  return internal_error("chat template: unknown tool syntax");
}

}  // namespace tensorpc
