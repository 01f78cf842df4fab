// StopMatcher: finds the first of several stop strings in generated text
// that arrives piece by piece, and holds back the tail that could still
// become one, so a streamed answer never shows part of a stop string.
//
// "First" is the stop string that is complete earliest in the text, that is
// the one whose last byte comes first; of two ending at the same byte, the
// longer (which starts earlier). So the answer does not depend on how the
// text was cut into pieces, and generation can end the moment a stop string
// appears. Matching is by bytes; with stop strings and text of valid UTF-8,
// what is emitted and held back is cut between characters.
//
// Each stop string is followed with its Knuth-Morris-Pratt state (how much
// of it the text ends with), so a piece costs time in its length whatever
// the stop strings' lengths, and the text held back is never longer than
// the longest stop string.
//
// One StopMatcher follows one generation; it is not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tensorpc::serve {

class StopMatcher {
 public:
  // Empty strings among `stops` are ignored (they would stop everything).
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;
    bool stopped = false;
  };

  // Adds a piece; returns the text safe to emit now. `stopped` when a stop
  // string completed (emit is then the text before it, and the rest is
  // dropped); every push after that returns nothing and stopped. With no
  // stop strings the piece comes back as it is.
  Result push(std::string_view piece);

  // At the end of generation: whatever was held back (nothing if stopped).
  // Nothing is held after it; a stopped matcher stays stopped.
  std::string flush();

  bool stopped() const { return stopped_; }
  // The stop string that completed; empty before.
  const std::string& stopped_by() const { return stopped_by_; }

 private:
  struct Stop {
    std::string text;
    std::vector<size_t> failure;  // failure[k]: the longest proper prefix of text[0..k] that is also its suffix
    size_t matched = 0;           // the longest prefix of text the text so far ends with
  };

  std::vector<Stop> stops_;
  std::string held_;  // text not emitted yet: as long as the longest `matched`
  bool stopped_ = false;
  std::string stopped_by_;
};

}  // namespace tensorpc::serve
