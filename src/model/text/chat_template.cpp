// Chat templates by family (chat_template.h). Each render_* function does
// what its family's Jinja template does, step for step; where the template
// raises an exception, it returns the same complaint as a Status.
#include "model/text/chat_template.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <optional>

#include "model/text/chat_template_text.h"
#include "model/text/utf8.h"

namespace tensorpc {

namespace chat_text {

void append(std::string& out, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) out.append(p);
}

std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  append(out, parts);
  return out;
}

namespace {

// Python's str.isspace() for one code point: what Jinja's trim and str.strip() remove.
bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace

std::string trim(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const int len = utf8_char_length(s, begin);
    if (len <= 0 || !is_python_space(utf8_decode(s, begin, len))) break;
    begin += static_cast<size_t>(len);
  }
  // The end of the last character that is not white space.
  size_t end = begin;
  for (size_t i = begin; i < s.size();) {
    const int len = utf8_char_length(s, i);
    const size_t step = len > 0 ? static_cast<size_t>(len) : 1;
    if (len <= 0 || !is_python_space(utf8_decode(s, i, len))) end = i + step;
    i += step;
  }
  return std::string(s.substr(begin, end - begin));
}

}  // namespace chat_text

namespace {

using chat_text::append;
using chat_text::cat;
using chat_text::trim;
using Family = ChatTemplate::Family;

bool contains(std::string_view text, std::string_view marker) { return text.find(marker) != std::string_view::npos; }

// A Jinja string literal `marker`, in single or double quotes.
bool contains_literal(std::string_view text, std::string_view marker) {
  return contains(text, cat({"'", marker, "'"})) || contains(text, cat({"\"", marker, "\""}));
}

struct FamilyInfo {
  Family family;
  std::string_view name;
  bool emits_bos;  // for named(): whether the family's usual template writes bos_token
};

constexpr std::array<FamilyInfo, 13> kFamilies = {{
    {Family::chatml, "chatml", false},
    {Family::llama3, "llama3", true},
    {Family::llama3_1, "llama3.1", true},
    {Family::llama2, "llama2", true},
    {Family::mistral_v0, "mistral-v0", true},
    {Family::mistral_v1, "mistral-v1", true},
    {Family::mistral_v3, "mistral-v3", true},
    {Family::mistral_v3_tekken, "mistral-v3-tekken", true},
    {Family::mistral_v7, "mistral-v7", true},
    {Family::phi3, "phi3", true},
    {Family::phi3_small, "phi3-small", true},
    {Family::gemma, "gemma", true},
    {Family::zephyr, "zephyr", false},
}};

constexpr std::array<std::string_view, kFamilies.size()> kNames = [] {
  std::array<std::string_view, kFamilies.size()> names{};
  for (size_t i = 0; i < kFamilies.size(); ++i) names[i] = kFamilies[i].name;
  return names;
}();

const FamilyInfo& info(Family family) {
  for (const FamilyInfo& f : kFamilies) {
    if (f.family == family) return f;
  }
  return kFamilies[0];  // unreachable: every family is in the table
}

std::string name_list() {
  std::string out;
  for (std::string_view n : kNames) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// The system prompt a chatml template writes in for a conversation without
// one: the text of a literal '<|im_start|>system\n…<|im_end|>' (newline real
// or escaped). Empty when the template has none.
std::string chatml_default_system(std::string_view text) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  constexpr std::string_view kClose = "<|im_end|>";
  for (size_t at = text.find(kOpen); at != std::string_view::npos; at = text.find(kOpen, at + 1)) {
    size_t start = at + kOpen.size();
    if (text.substr(start, 1) == "\n") {
      start += 1;
    } else if (text.substr(start, 2) == "\\n") {
      start += 2;
    } else {
      continue;
    }
    const size_t close = text.find(kClose, start);
    if (close == std::string_view::npos) break;
    const std::string_view body = text.substr(start, close - start);
    // Text inside one string literal only: a quote or a brace means the
    // literal ended there ('<|im_start|>system\n' + messages[0]['content'] …).
    if (!body.empty() && body.find_first_of("'\"{}") == std::string_view::npos) return std::string(body);
  }
  return {};
}

// The date Llama 3.1 and 3.3's templates write when not given one, and what
// named("llama3.1") writes.
constexpr std::string_view kLlama31Date = "26 Jul 2024";

// The date a llama3.1 template writes into its system block: empty when it
// is the date of rendering (Llama 3.2's `strftime_now("%d %b %Y")`, which
// transformers defines), otherwise the literal of `set date_string = "…"`.
std::string llama31_date(std::string_view text) {
  if (contains(text, "strftime_now")) return {};
  constexpr std::string_view kSet = "set date_string = ";
  const size_t at = text.find(kSet);
  if (at != std::string_view::npos && at + kSet.size() < text.size()) {
    const size_t open = at + kSet.size();
    const char quote = text[open];
    const size_t close = text.find(quote, open + 1);
    if ((quote == '"' || quote == '\'') && close != std::string_view::npos && close - open <= 32) {
      return std::string(text.substr(open + 1, close - open - 1));
    }
  }
  return std::string(kLlama31Date);
}

// Today's local date as Python's strftime("%d %b %Y") writes it in the C
// locale ("05 Mar 2025"), which is what transformers' strftime_now gives.
std::string local_date_today() {
  static constexpr std::array<const char*, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  if (localtime_r(&now, &local) == nullptr) return std::string(kLlama31Date);
  char text[32];
  std::snprintf(text, sizeof text, "%02d %s %d", local.tm_mday, kMonths[static_cast<size_t>(local.tm_mon) % 12],
                local.tm_year + 1900);
  return text;
}

// Llama 3 turns: <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>,
// contents trimmed, then what opens the assistant's reply.
void append_llama3_turns(std::string& out, std::span<const ChatMessage> turns, bool add_generation_prompt) {
  for (const ChatMessage& m : turns) {
    append(out, {"<|start_header_id|>", m.role, "<|end_header_id|>\n\n", trim(m.content), "<|eot_id|>"});
  }
  if (add_generation_prompt) append(out, {"<|start_header_id|>assistant<|end_header_id|>\n\n"});
}

Status system_role_error(std::string_view family, bool first_allowed) {
  return invalid_argument(
      cat({family, " chat template: only user and assistant roles are supported",
           first_allowed ? ", besides an optional first system message" : " (it has no system role)"}));
}

// Whether `turns` has a system message.
bool has_system(std::span<const ChatMessage> turns) {
  for (const ChatMessage& m : turns) {
    if (m.role == "system") return true;
  }
  return false;
}

Status alternation_error(std::string_view family) {
  return invalid_argument(cat({family,
                               " chat template: conversation roles must alternate user/assistant/user/assistant/… "
                               "(after an optional first system message)"}));
}

// The user/assistant alternation most templates check: message i of `turns`
// must be the user's exactly when i is even.
bool alternates(std::span<const ChatMessage> turns) {
  for (size_t i = 0; i < turns.size(); ++i) {
    if ((turns[i].role == "user") != (i % 2 == 0)) return false;
  }
  return true;
}

// A leading system message split off, as most templates do with
// `messages[0]['role'] == 'system'` … `messages[1:]`.
struct SplitSystem {
  const ChatMessage* system = nullptr;
  std::span<const ChatMessage> turns;
};

SplitSystem split_system(std::span<const ChatMessage> messages) {
  if (!messages.empty() && messages[0].role == "system") return {&messages[0], messages.subspan(1)};
  return {nullptr, messages};
}

}  // namespace

ChatTemplate::ChatTemplate(Family family, std::string_view bos_text, std::string_view eos_text)
    : family_(family), bos_(bos_text), eos_(eos_text), emits_bos_(info(family).emits_bos) {
  if (family == Family::llama3_1) date_ = kLlama31Date;
}

std::span<const std::string_view> ChatTemplate::names() { return kNames; }

std::string_view ChatTemplate::name() const { return info(family_).name; }

std::string ChatTemplate::date_text() const {
  return !date_.empty() ? date_ : !today_.empty() ? today_ : local_date_today();
}

StatusOr<ChatTemplate> ChatTemplate::named(std::string_view name, std::string_view bos_text,
                                           std::string_view eos_text) {
  for (const FamilyInfo& f : kFamilies) {
    if (f.name == name) return ChatTemplate(f.family, bos_text, eos_text);
  }
  return invalid_argument(cat({"unknown chat template \"", name, "\"; the names are ", name_list()}));
}

StatusOr<ChatTemplate> ChatTemplate::detect(std::string_view text, std::string_view bos_text,
                                            std::string_view eos_text) {
  if (text.empty()) {
    return invalid_argument(
        cat({"the model has no chat template (tokenizer.chat_template); choose one with "
             "--chat-template NAME (",
             name_list(), ")"}));
  }
  const auto family = [&]() -> std::optional<Family> {
    if (contains(text, "<|im_start|>")) return Family::chatml;
    if (contains(text, "<|start_header_id|>")) {
      // Llama 3.1 and later write a dated system block of their own.
      if (contains(text, "Cutting Knowledge Date")) return Family::llama3_1;
      return Family::llama3;
    }
    if (contains(text, "<start_of_turn>")) return Family::gemma;
    if (contains(text, "[INST]")) {
      if (contains(text, "[SYSTEM_PROMPT]")) return Family::mistral_v7;
      if (contains(text, "<<SYS>>")) return Family::llama2;
      if (contains_literal(text, " [INST] ")) return Family::mistral_v1;
      if (contains_literal(text, "[INST]")) return Family::mistral_v3_tekken;
      if (contains_literal(text, " [/INST]")) return Family::mistral_v0;
      if (contains_literal(text, "[/INST]")) return Family::mistral_v3;
      return std::nullopt;
    }
    if (contains(text, "<|end|>")) {
      if (contains(text, "<|system|>") || contains(text, "'<|' + message['role'] + '|>'")) return Family::phi3_small;
      if (contains(text, "<|user|>")) return Family::phi3;
      return std::nullopt;
    }
    if (contains(text, "<|user|>") && contains(text, "<|assistant|>") && contains(text, "eos_token")) {
      return Family::zephyr;
    }
    return std::nullopt;
  }();
  if (!family) {
    // About 60 bytes of the template, cut at a character boundary, on one line.
    size_t cut = std::min<size_t>(text.size(), 60);
    while (cut < text.size() && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;
    std::string shown(text.substr(0, cut));
    for (char& c : shown) {
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    }
    if (cut < text.size()) shown += "…";
    return invalid_argument(cat({"the model's chat template is not one tensorpc recognises (", shown,
                                 "); choose one with --chat-template NAME (", name_list(), ")"}));
  }
  ChatTemplate t(*family, bos_text, eos_text);
  t.emits_bos_ = contains(text, "bos_token");
  if (*family == Family::chatml) t.default_system_ = chatml_default_system(text);
  if (*family == Family::llama3_1) t.date_ = llama31_date(text);
  return t;
}

StatusOr<std::string> ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  const std::string_view family = name();
  if (messages.empty()) return invalid_argument(cat({family, " chat template: the conversation is empty"}));
  for (const ChatMessage& m : messages) {
    if (m.role == "tool" || !m.tool_calls.empty()) return render(messages, add_generation_prompt, {});
  }
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return invalid_argument(
          cat({family, " chat template: unknown role \"", m.role, "\" (roles are system, user, assistant and tool)"}));
    }
  }
  const std::string_view bos = emits_bos_ ? std::string_view(bos_) : std::string_view();
  const std::string_view eos = eos_;
  std::string out;

  switch (family_) {
    case Family::chatml: {
      append(out, {bos});
      if (messages[0].role != "system" && !default_system_.empty()) {
        append(out, {"<|im_start|>system\n", default_system_, "<|im_end|>\n"});
      }
      for (const ChatMessage& m : messages) append(out, {"<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n"});
      if (add_generation_prompt) append(out, {"<|im_start|>assistant\n"});
      return out;
    }

    case Family::llama3: {
      append(out, {bos});
      append_llama3_turns(out, messages, add_generation_prompt);
      return out;
    }

    case Family::llama3_1: {
      // The system block is always there: the knowledge and today's dates,
      // then a blank line and the conversation's own (trimmed) system
      // message, if it opens with one. Later system messages are turns.
      const SplitSystem s = split_system(messages);
      const std::string date = date_text();
      append(out, {bos, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n",
                   "Today Date: ", date, "\n\n"});
      if (s.system != nullptr) append(out, {trim(s.system->content)});
      append(out, {"<|eot_id|>"});
      append_llama3_turns(out, s.turns, add_generation_prompt);
      return out;
    }

    case Family::llama2: {
      // System messages after the first count as "not the user's" in the
      // alternation check and are then written nowhere, as in the template.
      const SplitSystem s = split_system(messages);
      if (!alternates(s.turns)) return alternation_error(family);
      for (size_t i = 0; i < s.turns.size(); ++i) {
        const ChatMessage& m = s.turns[i];
        std::string content = m.content;
        if (i == 0 && s.system != nullptr) {
          content = cat({"<<SYS>>\n", s.system->content, "\n<</SYS>>\n\n", m.content});
        }
        if (m.role == "user") {
          append(out, {bos, "[INST] ", trim(content), " [/INST]"});
        } else if (m.role == "assistant") {
          append(out, {" ", trim(content), " ", eos});
        }
      }
      return out;
    }

    case Family::mistral_v0: {
      if (has_system(messages)) return system_role_error(family, false);
      if (!alternates(messages)) return alternation_error(family);
      append(out, {bos});
      for (const ChatMessage& m : messages) {
        if (m.role == "user") {
          append(out, {"[INST] ", m.content, " [/INST]"});
        } else {
          append(out, {m.content, eos});
        }
      }
      return out;
    }

    case Family::mistral_v1:
    case Family::mistral_v3:
    case Family::mistral_v3_tekken: {
      const SplitSystem s = split_system(messages);
      if (has_system(s.turns)) return system_role_error(family, true);
      if (!alternates(s.turns)) return alternation_error(family);
      // v1 puts the system prompt into the first [INST], v3 into the last one
      // (so only when the conversation ends with the user's message).
      const bool v1 = family_ == Family::mistral_v1;
      const bool tekken = family_ == Family::mistral_v3_tekken;
      const std::string_view open = v1 ? " [INST] " : tekken ? "[INST]" : "[INST] ";
      const std::string_view close = v1 ? " [/INST]" : "[/INST]";
      append(out, {bos});
      for (size_t i = 0; i < s.turns.size(); ++i) {
        const ChatMessage& m = s.turns[i];
        if (m.role == "user") {
          const bool with_system = s.system != nullptr && (v1 ? i == 0 : i + 1 == s.turns.size());
          if (with_system) {
            append(out, {open, s.system->content, "\n\n", m.content, close});
          } else {
            append(out, {open, m.content, close});
          }
        } else if (tekken) {
          append(out, {m.content, eos});
        } else {
          append(out, {" ", v1 ? m.content : trim(m.content), eos});
        }
      }
      return out;
    }

    case Family::mistral_v7: {
      append(out, {bos});
      for (const ChatMessage& m : messages) {
        if (m.role == "user") {
          append(out, {"[INST] ", m.content, "[/INST]"});
        } else if (m.role == "system") {
          append(out, {"[SYSTEM_PROMPT] ", m.content, "[/SYSTEM_PROMPT]"});
        } else {
          append(out, {" ", m.content, eos});
        }
      }
      return out;
    }

    case Family::phi3: {
      // The user's turn already opens the reply; system messages are dropped
      // and add_generation_prompt changes nothing, as in the template.
      append(out, {bos});
      for (const ChatMessage& m : messages) {
        if (m.role == "user") {
          append(out, {"<|user|>\n", m.content, "<|end|>\n<|assistant|>\n"});
        } else if (m.role == "assistant") {
          append(out, {m.content, "<|end|>\n"});
        }
      }
      return out;
    }

    case Family::phi3_small: {
      append(out, {bos});
      for (const ChatMessage& m : messages) append(out, {"<|", m.role, "|>\n", m.content, "<|end|>\n"});
      append(out, {add_generation_prompt ? std::string_view("<|assistant|>\n") : eos});
      return out;
    }

    case Family::gemma: {
      const SplitSystem s = split_system(messages);
      if (!alternates(s.turns)) return alternation_error(family);
      append(out, {bos});
      for (size_t i = 0; i < s.turns.size(); ++i) {
        const ChatMessage& m = s.turns[i];
        append(out, {"<start_of_turn>", m.role == "assistant" ? std::string_view("model") : m.role, "\n"});
        if (i == 0 && s.system != nullptr) append(out, {s.system->content, "\n\n"});
        append(out, {trim(m.content), "<end_of_turn>\n"});
      }
      if (add_generation_prompt) append(out, {"<start_of_turn>model\n"});
      return out;
    }

    case Family::zephyr: {
      append(out, {bos});
      for (const ChatMessage& m : messages) append(out, {"<|", m.role, "|>\n", m.content, eos, "\n"});
      if (add_generation_prompt) append(out, {"<|assistant|>\n"});
      return out;
    }
  }
  return internal_error("chat template: unknown family");
}

}  // namespace tensorpc
