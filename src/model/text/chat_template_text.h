// Text helpers the chat template renderers share (chat_template.cpp and
// chat_template_tools.cpp); private to the model layer.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "model/text/chat_template.h"

namespace tensorpc {

enum class ChatTemplate::Family {
  chatml,
  llama3,
  llama3_1,
  llama2,
  mistral_v0,
  mistral_v1,
  mistral_v3,
  mistral_v3_tekken,
  mistral_v7,
  phi3,
  phi3_small,
  gemma,
  zephyr,
};

namespace chat_text {

// Appends the parts to `out`. (Strings are built this way, not with
// operator+, which GCC 12 misreads under -Wrestrict.)
void append(std::string& out, std::initializer_list<std::string_view> parts);

// The parts joined.
std::string cat(std::initializer_list<std::string_view> parts);

// `s` without leading and trailing white space, as Jinja's `| trim` and
// Python's `.strip()` give it (Unicode white space, not only ASCII).
std::string trim(std::string_view s);

}  // namespace chat_text
}  // namespace tensorpc
