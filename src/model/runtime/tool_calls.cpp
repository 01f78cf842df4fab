// Tool calls read out of a reply, and the grammar of a required call (tool_calls.h).
#include "model/runtime/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "model/runtime/json_schema.h"

namespace tensorpc {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The marker that opens a reply's calls: empty for llama3_json, whose call is the whole reply.
std::string_view marker(ToolSyntax syntax) {
  switch (syntax) {
    case ToolSyntax::hermes: return kHermesOpen;
    case ToolSyntax::mistral: return kMistralOpen;
    default: return {};
  }
}

// The length of the longest end of `text` that begins `word` (a word cut between pieces).
size_t cut_prefix(std::string_view text, std::string_view word) {
  for (size_t n = std::min(text.size(), word.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == word.substr(0, n)) return n;
  }
  return 0;
}

// The most bytes of a call object before its arguments, for them to stream (see step_call).
constexpr size_t kMaxHead = 1024;

std::string_view arguments_key(ToolSyntax syntax) {
  return syntax == ToolSyntax::llama3_json ? "parameters" : "arguments";
}

}  // namespace

ToolCallParser::ToolCallParser(ToolSyntax syntax, bool forced) : syntax_(syntax) {
  if (syntax == ToolSyntax::none) {
    state_ = State::plain;
  } else if (forced) {
    state_ = syntax == ToolSyntax::mistral ? State::list : State::before_call;
  }
}

void ToolCallParser::feed(std::string_view piece, std::vector<ToolCallEvent>& events) {
  pending_.append(piece);
  step(events);
}

void ToolCallParser::step(std::vector<ToolCallEvent>& events) {
  for (bool more = true; more && !pending_.empty();) {
    switch (state_) {
      case State::plain:
        events.push_back({ToolCallEvent::Kind::content, 0, std::move(pending_)});
        pending_.clear();
        more = false;
        break;
      case State::text: more = step_text(events); break;
      case State::list:
      case State::before_call: {
        size_t n = 0;
        while (n < pending_.size() && is_space(pending_[n])) ++n;
        raw_.append(pending_, 0, n);
        pending_.erase(0, n);
        if (pending_.empty()) return;
        const char want = state_ == State::list ? '[' : '{';
        if (pending_[0] != want) {
          give_up(events);
          break;
        }
        if (state_ == State::list) {
          raw_ += '[';
          pending_.erase(0, 1);
          state_ = State::before_call;
          break;
        }
        call_.clear();
        depth_ = 0;
        in_string_ = escaped_ = head_sent_ = head_failed_ = false;
        arguments_at_ = arguments_sent_ = arguments_end_ = 0;
        state_ = State::call;
        break;
      }
      case State::call: more = step_call(events); break;
      case State::after_call: more = step_after_call(); break;
    }
  }
}

bool ToolCallParser::step_text(std::vector<ToolCallEvent>& events) {
  if (syntax_ == ToolSyntax::llama3_json) {
    // A call is the whole reply: it opens with "{" (after white space).
    if (seen_text_) {
      state_ = State::plain;
      return true;
    }
    size_t n = 0;
    while (n < pending_.size() && is_space(pending_[n])) ++n;
    if (n == pending_.size()) return false;  // only white space yet: hold it
    seen_text_ = true;
    if (pending_[n] != '{') {
      state_ = State::plain;
      return true;
    }
    raw_.assign(pending_, 0, n);
    pending_.erase(0, n);
    state_ = State::before_call;
    return true;
  }
  if (after_call_) {
    // White space between and after calls is not content (only there: later text keeps its spaces).
    size_t n = 0;
    while (n < pending_.size() && is_space(pending_[n])) ++n;
    pending_.erase(0, n);
    if (pending_.empty()) return false;
    after_call_ = false;
  }
  const std::string_view open = marker(syntax_);
  const size_t at = pending_.find(open);
  if (at == std::string::npos) {
    const size_t keep = cut_prefix(pending_, open);
    if (pending_.size() > keep) {
      events.push_back({ToolCallEvent::Kind::content, 0, pending_.substr(0, pending_.size() - keep)});
      pending_.erase(0, pending_.size() - keep);
    }
    return false;
  }
  if (at > 0) events.push_back({ToolCallEvent::Kind::content, 0, pending_.substr(0, at)});
  raw_.assign(open);
  pending_.erase(0, at + open.size());
  state_ = syntax_ == ToolSyntax::mistral ? State::list : State::before_call;
  return true;
}

ToolCallParser::Match ToolCallParser::match_head(size_t* arguments_at, std::string* name) const {
  const std::string& s = call_;
  size_t i = 1;  // after "{"
  const auto space = [&] {
    while (i < s.size() && is_space(s[i])) ++i;
    return i < s.size();
  };
  // `word` next (whole, or what there is of it so far).
  const auto literal = [&](std::string_view word) {
    const size_t n = std::min(word.size(), s.size() - i);
    if (s.compare(i, n, word.substr(0, n)) != 0) return Match::no;
    i += n;
    return n == word.size() ? Match::yes : Match::need_more;
  };
  const std::string key = "\"" + std::string(arguments_key(syntax_)) + "\"";
  if (!space()) return Match::need_more;
  if (Match m = literal("\"name\""); m != Match::yes) return m;
  if (!space()) return Match::need_more;
  if (Match m = literal(":"); m != Match::yes) return m;
  if (!space()) return Match::need_more;
  if (s[i] != '"') return Match::no;
  // The name: a JSON string, read by the JSON library once it is whole.
  const size_t start = i++;
  for (bool escaped = false; i < s.size() && (escaped || s[i] != '"'); ++i) escaped = !escaped && s[i] == '\\';
  if (i == s.size()) return Match::need_more;
  const Json value = Json::parse(s.substr(start, i + 1 - start), nullptr, /*allow_exceptions=*/false);
  if (!value.is_string()) return Match::no;
  ++i;
  if (!space()) return Match::need_more;
  if (Match m = literal(","); m != Match::yes) return m;
  if (!space()) return Match::need_more;
  if (Match m = literal(key); m != Match::yes) return m;
  if (!space()) return Match::need_more;
  if (Match m = literal(":"); m != Match::yes) return m;
  if (!space()) return Match::need_more;
  if (s[i] != '{') return Match::no;  // arguments that are not an object are read whole
  *arguments_at = i;
  *name = value.get<std::string>();
  return Match::yes;
}

bool ToolCallParser::step_call(std::vector<ToolCallEvent>& events) {
  // Read the call's JSON up to the brace that closes it, noting where its arguments end.
  size_t used = 0;
  bool closed = false;
  for (; used < pending_.size() && !closed; ++used) {
    const char c = pending_[used];
    call_ += c;
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      // The first value nested in the call closes: with the head matched, the arguments.
      if (--depth_ == 1 && arguments_end_ == 0) arguments_end_ = call_.size();
      closed = depth_ == 0;
    }
  }
  raw_.append(pending_, 0, used);
  pending_.erase(0, used);
  if (!head_sent_ && !head_failed_) {
    std::string name;
    // A head whose arguments begin past kMaxHead bytes (an endless name,
    // endless white space) is not the streamable kind, however the reply is
    // cut: the call is read whole, and the head is not matched again at
    // every piece.
    Match m = match_head(&arguments_at_, &name);
    if ((m == Match::need_more && call_.size() > kMaxHead) || (m == Match::yes && arguments_at_ > kMaxHead)) {
      m = Match::no;
    }
    switch (m) {
      case Match::need_more: break;
      case Match::no: head_failed_ = true; break;
      case Match::yes:
        head_sent_ = true;
        arguments_sent_ = arguments_at_;
        events.push_back({ToolCallEvent::Kind::call, calls_++, std::move(name)});
        break;
    }
  }
  if (head_sent_) {
    const size_t end = arguments_end_ > 0 ? arguments_end_ : call_.size();
    if (end > arguments_sent_) {
      events.push_back(
          {ToolCallEvent::Kind::arguments, calls_ - 1, call_.substr(arguments_sent_, end - arguments_sent_)});
      arguments_sent_ = end;
    }
  }
  if (!closed) return false;
  end_call(events);
  return true;
}

void ToolCallParser::end_call(std::vector<ToolCallEvent>& events) {
  state_ = State::after_call;
  if (head_sent_) return;
  // A call object of another shape: read it whole.
  const Json call = Json::parse(call_, nullptr, /*allow_exceptions=*/false);
  const std::string key(arguments_key(syntax_));
  const Json* arguments = nullptr;
  if (call.is_object() && call.contains(key)) arguments = &call[key];
  if (call.is_object() && arguments == nullptr && call.contains("arguments")) arguments = &call["arguments"];
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string() || arguments == nullptr) {
    give_up(events);
    return;
  }
  events.push_back({ToolCallEvent::Kind::call, calls_, call["name"].get<std::string>()});
  events.push_back({ToolCallEvent::Kind::arguments, calls_++,
                    arguments->is_string() ? arguments->get<std::string>() : arguments->dump()});
}

bool ToolCallParser::step_after_call() {
  size_t n = 0;
  while (n < pending_.size() && is_space(pending_[n])) ++n;
  if (n == pending_.size()) {
    pending_.clear();
    return false;
  }
  pending_.erase(0, n);
  switch (syntax_) {
    case ToolSyntax::hermes: {
      const size_t have = std::min(pending_.size(), kHermesClose.size());
      if (pending_.compare(0, have, kHermesClose.substr(0, have)) != 0) {
        state_ = State::text;
        after_call_ = true;
        return true;
      }
      if (have < kHermesClose.size()) return false;
      pending_.erase(0, kHermesClose.size());
      state_ = State::text;
      after_call_ = true;
      return true;
    }
    case ToolSyntax::mistral:
      if (pending_[0] == ',') {
        pending_.erase(0, 1);
        state_ = State::before_call;
        return true;
      }
      if (pending_[0] == ']') pending_.erase(0, 1);
      state_ = State::text;
      after_call_ = true;
      return true;
    default: state_ = State::plain; return true;
  }
}

void ToolCallParser::give_up(std::vector<ToolCallEvent>& events) {
  std::string text = std::move(raw_);
  if (state_ == State::call && head_sent_) text.clear();  // the call was announced: its text is not content
  text += pending_;
  pending_.clear();
  raw_.clear();
  if (!text.empty()) events.push_back({ToolCallEvent::Kind::content, 0, std::move(text)});
  state_ = State::plain;
}

void ToolCallParser::finish(std::vector<ToolCallEvent>& events) {
  switch (state_) {
    case State::text:
      if (!pending_.empty()) events.push_back({ToolCallEvent::Kind::content, 0, std::move(pending_)});
      break;
    case State::list:
    case State::before_call: give_up(events); break;
    case State::call:
      if (!head_sent_) give_up(events);
      break;
    case State::after_call:
    case State::plain: break;
  }
  pending_.clear();
  state_ = State::plain;
}

std::string_view tool_call_opener(ToolSyntax syntax) {
  switch (syntax) {
    case ToolSyntax::hermes: return "<tool_call>\n";
    case ToolSyntax::mistral: return kMistralOpen;
    default: return {};
  }
}

StatusOr<std::string> tool_call_grammar(ToolSyntax syntax, std::span<const ToolFunction> tools) {
  if (tools.empty()) return invalid_argument("a required tool call needs at least one tool");
  if (syntax == ToolSyntax::none) return invalid_argument("this chat template has no tool calling");
  Json any = Json::array();
  for (const ToolFunction& tool : tools) {
    Json parameters = Json::parse(tool.parameters, nullptr, /*allow_exceptions=*/false);
    if (parameters.is_discarded()) return invalid_argument("tool " + tool.name + ": its parameters are not JSON");
    if (parameters.is_object() && parameters.empty()) parameters = Json{{"type", "object"}};
    Json properties = Json::object();
    properties["name"] = Json{{"const", tool.name}};
    properties[std::string(arguments_key(syntax))] = std::move(parameters);
    Json call = Json::object();
    call["type"] = "object";
    call["properties"] = std::move(properties);
    call["required"] = Json::array({"name", std::string(arguments_key(syntax))});
    any.push_back(std::move(call));
  }
  const Json schema = any.size() == 1 ? any[0] : Json{{"anyOf", any}};
  auto gbnf = json_schema_to_gbnf(schema.dump());
  if (!gbnf.ok()) {
    return invalid_argument("the tools' parameters cannot constrain a call: " + gbnf.status().message());
  }
  std::string rules = std::move(gbnf).value();
  constexpr std::string_view kRoot = "root ::= ";
  if (rules.compare(0, kRoot.size(), kRoot) != 0) return internal_error("tool call grammar: no root rule");
  rules.replace(0, kRoot.size(), "tool-call ::= ");
  // A call written as models write one, {"name": "f", "arguments": {…}}: at
  // most one space between its tokens, not the 20 characters of white space
  // the JSON grammar allows (a weak model would spend its tokens on them).
  constexpr std::string_view kWs = "ws      ::= [ \\t\\n\\r]{0,20}";
  const size_t ws = rules.find(kWs);
  if (ws == std::string::npos) return internal_error("tool call grammar: no ws rule");
  rules.replace(ws, kWs.size(), "ws      ::= \" \"?");
  switch (syntax) {
    case ToolSyntax::hermes: return "root ::= tool-call \"\\n</tool_call>\"\n" + rules;
    case ToolSyntax::mistral: return "root ::= \" [\" tool-call \"]\"\n" + rules;
    default: return "root ::= tool-call\n" + rules;
  }
}

std::string new_tool_call_id(ToolSyntax syntax, std::mt19937_64& random) {
  static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::uniform_int_distribution<int> digit(0, 61);
  std::string out = syntax == ToolSyntax::mistral ? "" : "call_";
  const int n = syntax == ToolSyntax::mistral ? 9 : 24;
  for (int i = 0; i < n; ++i) out += kDigits[digit(random)];
  return out;
}

ParsedReply parse_reply(ToolSyntax syntax, std::string_view text, bool forced) {
  ToolCallParser parser(syntax, forced);
  std::vector<ToolCallEvent> events;
  parser.feed(text, events);
  parser.finish(events);
  ParsedReply reply;
  for (ToolCallEvent& e : events) {
    switch (e.kind) {
      case ToolCallEvent::Kind::content: reply.content += e.text; break;
      case ToolCallEvent::Kind::call:
        reply.calls.push_back({.id = {}, .name = std::move(e.text), .arguments = {}});
        break;
      case ToolCallEvent::Kind::arguments: reply.calls[static_cast<size_t>(e.index)].arguments += e.text; break;
    }
  }
  return reply;
}

}  // namespace tensorpc
