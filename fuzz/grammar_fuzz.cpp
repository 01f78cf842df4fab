// libFuzzer target: arbitrary bytes as a GBNF grammar or a JSON Schema (the
// first byte chooses), then as text matched against what was accepted.
// Parsing must never crash, throw or hang: a grammar is refused with
// invalid_argument, or it matches the rest of the input byte by byte, where
// a state fails only by its limits (out_of_memory) and a copy taken part way
// gives what the original gives. Small limits keep each input quick.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "model/runtime/grammar.h"
#include "model/runtime/json_schema.h"

namespace {

using namespace tensorpc;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "grammar_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool schema = data[0] & 1;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  // The grammar (or schema) runs to the first NUL; the text to match follows it.
  const size_t cut = std::min(input.find('\0'), input.size());
  const std::string_view source = input.substr(0, cut);
  const std::string_view text = input.substr(std::min(cut + 1, input.size())).substr(0, 256);
  std::string gbnf(source);
  if (schema) {
    auto converted = json_schema_to_gbnf(source);
    if (!converted.ok()) {
      check(converted.status().code() == StatusCode::invalid_argument, "a schema refused other than invalid_argument");
      return 0;
    }
    gbnf = std::move(converted).value();
  }
  GrammarLimits limits;
  limits.max_stacks = 64;
  limits.max_symbols = 20000;
  limits.max_rules = 2000;
  auto grammar = Grammar::parse(gbnf, limits);
  if (!grammar.ok()) {
    check(grammar.status().code() == StatusCode::invalid_argument, "a grammar refused other than invalid_argument");
    return 0;
  }
  GrammarState state(grammar.value());
  GrammarState copy = state;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool valid = state.advance_byte(static_cast<uint8_t>(text[i]));
    check(valid == state.valid(), "advance_byte and valid() disagree");
    check(state.n_stacks() <= 64, "more stacks than the limit");
    check(state.error().ok() || state.error().code() == StatusCode::out_of_memory,
          "a state failed other than by a limit");
    check(!state.complete() || valid, "complete but not valid");
    if (i == text.size() / 2) copy = state;
    if (!valid) break;
  }
  if (copy.valid() && text.size() > 1) {
    GrammarState again = copy;
    check(again.advance(text.substr(text.size() / 2 + 1)) == copy.advance(text.substr(text.size() / 2 + 1)),
          "a copy moved differently from its original");
  }
  return 0;
}
