// PreTokenizer: the split of a text into words that byte-level BPE merges
// never cross, as a GGUF file names it in tokenizer.ggml.pre.
//
// Each pre value stands for a list of regular expressions (the ones the
// model's own tokenizer uses), applied in turn: the first splits the text,
// each later one splits every word the one before made. A split keeps both
// the matches and the text between them, so the words always cover the text
// exactly, byte for byte. Character classes such as \p{L} and \s follow
// Unicode (PCRE2 with UCP). Invalid UTF-8 never fails a match: such bytes
// match nothing and so end up in the words between matches.
//
// A PreTokenizer is immutable after create(); split() may run on several
// threads at once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc {

class PreTokenizer {
 public:
  // The pre-tokenizer of `pre` (a tokenizer.ggml.pre value); an unknown value
  // is unsupported, naming it and the values known.
  static StatusOr<PreTokenizer> create(std::string_view pre);
  // The pre values create() accepts, comma-separated, for messages and docs.
  static std::string known_names();

  // Calls `visit` with each word of `text`, in order; the words are views
  // into `text`, and none is kept: the split needs memory for one word at a
  // time, not for the list. A regex that fails for lack of resources (a
  // pathological input) leaves the rest of the piece it was splitting as one
  // word.
  void for_each_word(std::string_view text, const std::function<void(std::string_view)>& visit) const;
  // Appends the words of `text` to `words`, as for_each_word finds them.
  void split(std::string_view text, std::vector<std::string_view>& words) const;

  // Whether a word that is a token as a whole becomes that token without
  // running the merges (Llama 3's tokenizer does this).
  bool ignore_merges() const { return ignore_merges_; }
  const std::string& name() const { return name_; }

 private:
  struct Regex;  // one compiled PCRE2 pattern
  PreTokenizer() = default;

  std::string name_;
  std::vector<std::shared_ptr<const Regex>> regexes_;
  bool ignore_merges_ = false;
};

}  // namespace tensorpc
