// The cost of a grammar-constrained step's two checks, on one thread, with
// the JSON grammar (json_schema.h) part way through an object:
//   accepts: whether one token may come next (the path a step takes when the
//            token it sampled is allowed): an allowed and a refused token;
//   mask:    every token of the vocabulary (the path when it is refused).
// Two places in the object: inside a string value, where nearly every token
// is allowed (the trie is walked almost whole), and after a member, where a
// few are. Vocabularies: the bundled kjv-bpe and, when ../shared/vocab is
// there, Qwen 2's (152k tokens). Prints µs per call, the best of five rounds
// of wall clock.
//
// Run from the repository root: build/bench/grammar_bench [vocab-dir]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/runtime/grammar_vocabulary.h"
#include "model/runtime/json_schema.h"
#include "model/text/tokenizer_gguf.h"

namespace {

using namespace tensorpc;

// µs per call of `f`, the best of five rounds of `calls` calls.
template <typename F>
double micros_per_call(int calls, F&& f) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / calls);
  }
  return best;
}

// The first token whose piece is exactly `piece`, or -1.
int32_t token_of(const GrammarVocabulary& vocab, const std::string& piece) {
  for (int32_t t = 0; t < vocab.n_tokens(); ++t) {
    if (vocab.piece(t) == piece) return t;
  }
  return -1;
}

void measure(const std::string& name, const Tokenizer& tokenizer, const std::shared_ptr<const Grammar>& grammar) {
  const auto built = std::chrono::steady_clock::now();
  const GrammarVocabulary vocab(tokenizer);
  const std::chrono::duration<double, std::milli> build_ms = std::chrono::steady_clock::now() - built;
  struct Place {
    const char* label;
    const char* text;
    const char* allowed;  // a piece allowed there
    const char* refused;  // and one that is not
  };
  const Place places[] = {
      {"in a string", R"({"name": "In the beginning, ", "age": 7, "note": "and the)", " earth", "\n"},
      {"after a member", R"({"name": "In the beginning", "age": 7)", ",", " earth"},
  };
  for (const Place& place : places) {
    GrammarState state(grammar);
    if (!state.advance(place.text)) {
      std::printf("%s: the text does not match the grammar\n", name.c_str());
      return;
    }
    GrammarScratch scratch;
    std::vector<uint8_t> mask;
    const int32_t allowed = token_of(vocab, place.allowed), refused = token_of(vocab, place.refused);
    const bool probes_right = vocab.accepts(state, allowed, scratch) && !vocab.accepts(state, refused, scratch);
    volatile bool sink = false;  // keeps the calls
    const double accept_us = micros_per_call(20000, [&] { sink = vocab.accepts(state, allowed, scratch); });
    const double refuse_us = micros_per_call(20000, [&] { sink = vocab.accepts(state, refused, scratch); });
    int32_t n_allowed = 0;
    const double mask_us = micros_per_call(20, [&] { n_allowed = vocab.mask(state, mask, scratch); });
    std::printf("%-8s %8d %-15s %9d %12.3f %12.3f %10.1f %10.1f%s\n", name.c_str(), vocab.n_tokens(), place.label,
                n_allowed, accept_us, refuse_us, mask_us, build_ms.count(),
                probes_right ? "" : " (the probe tokens are not allowed and refused as expected)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "../shared/vocab";
  auto grammar = Grammar::parse(json_gbnf(/*object_root=*/true));
  if (!grammar.ok()) {
    std::fprintf(stderr, "%s\n", grammar.status().to_string().c_str());
    return 1;
  }
  std::printf("%-8s %8s %-15s %9s %12s %12s %10s %10s\n", "vocab", "tokens", "place", "allowed", "accepts µs",
              "refuses µs", "mask µs", "trie ms");
  const std::pair<std::string, std::string> vocabularies[] = {{"kjv-bpe", "models/kjv-bpe.gguf"},
                                                              {"qwen2", dir + "/ggml-vocab-qwen2.gguf"}};
  for (const auto& [name, path] : vocabularies) {
    if (!std::filesystem::exists(path)) {
      std::printf("%s: %s is absent, skipped\n", name.c_str(), path.c_str());
      continue;
    }
    auto file = GgufFile::open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), file.status().to_string().c_str());
      return 1;
    }
    auto tokenizer = tokenizer_from_gguf(*file.value());
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), tokenizer.status().to_string().c_str());
      return 1;
    }
    measure(name, tokenizer.value(), grammar.value());
  }
  return 0;
}
