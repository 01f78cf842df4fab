// The token endpoints of `tensorpc serve`, as the JSON a client POSTs and
// the JSON answered (the JSON layer only: no HTTP):
//
//   POST /tokenize        {"content": "text", "add_special": false, "parse_special": false,
//                          "with_pieces": false}
//                         -> {"tokens": [ids]}, or with_pieces {"tokens": [{"id", "piece"}]}
//   POST /detokenize      {"tokens": [ids], "special": false} -> {"content": "text"}
//   POST /apply-template  a chat completion's body -> {"prompt": "the rendered conversation"}, its tools
//                         rendered as for a reply (with a required call's opener last)
//
// add_special puts the model's BOS (and what else it adds) around the text;
// parse_special reads text that spells a control token as that token; a
// piece is the token's text as detokenize would give it alone (bytes that
// are not UTF-8 show as U+FFFD). Every problem is a 400 naming the field:
// an id outside the vocabulary, a field of the wrong type, a body that is
// not a JSON object.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"
#include "serve/openai_request.h"

namespace tensorpc::serve {

std::variant<std::string, ApiError> tokenize_json(const Tokenizer& tok, std::string_view body);
std::variant<std::string, ApiError> detokenize_json(const Tokenizer& tok, std::string_view body);
// `chat_template` null: the model has none (a 400 saying so, and why).
std::variant<std::string, ApiError> apply_template_json(const ChatTemplate* chat_template, std::string_view why_none,
                                                        std::string_view body);

}  // namespace tensorpc::serve
