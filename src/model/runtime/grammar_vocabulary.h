// GrammarVocabulary: which tokens of a vocabulary may come next under a
// grammar (grammar.h). The grammar-constrained sampler asks it first whether
// the token it sampled is allowed (accepts: a few bytes fed to a copy of the
// state) and only when not computes the whole mask and samples again among
// the allowed tokens.
//
// Each token's bytes are what Tokenizer::token_to_piece gives (text that a
// detokenizer without sequence context prints). The pieces are laid out once
// as a trie, so mask() walks the trie and the grammar state together: the
// bytes that tokens share at their start are matched once, and a whole
// subtree is skipped as soon as its first bytes are refused. A UTF-8
// character cut between tokens is matched when its last byte arrives.
// The walk also notes the bytes that lead the starting state back to itself
// (inside a JSON string: every ordinary ASCII character), and whether every
// character from U+0080 up does; a subtree spelled with those only (in
// well-formed UTF-8), reached from that state, is allowed whole without
// walking it, since the trie knows which bytes each subtree holds.
//
// Which tokens: an end-of-generation token (Tokenizer::is_end_of_generation)
// only when the text so far is complete; any other control, unknown or unused
// token never; every other token when its piece, not empty, keeps the text a
// valid prefix. A token whose bytes would make the matcher go past a limit
// (GrammarLimits::max_stacks) is refused like one that does not match.
//
// A GrammarVocabulary is immutable after construction and shared between
// requests and threads; each request keeps its own GrammarScratch (the
// states of one walk, reused so a step allocates nothing once warm).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "model/runtime/grammar.h"
#include "model/text/tokenizer.h"

namespace tensorpc {

// Working space of accepts() and mask(): one state per trie depth. Not thread-safe.
class GrammarScratch {
 public:
  // The state at trie depth `depth`, made from `like` the first time.
  GrammarState& level(size_t depth, const GrammarState& like) {
    while (levels_.size() <= depth) levels_.push_back(like);
    return levels_[depth];
  }
  GrammarStepCache& steps() { return steps_; }

 private:
  std::deque<GrammarState> levels_;
  GrammarStepCache steps_;  // a deque: a level keeps its place while deeper ones are added
};

class GrammarVocabulary {
 public:
  explicit GrammarVocabulary(const Tokenizer& tokenizer);

  int32_t n_tokens() const { return static_cast<int32_t>(pieces_.size()); }
  // The bytes matched for `token` (empty for the tokens never allowed by their bytes).
  const std::string& piece(int32_t token) const { return pieces_[static_cast<size_t>(token)]; }
  bool is_end(int32_t token) const { return kinds_[static_cast<size_t>(token)] == TokenKind::end; }

  // Whether `token` may come next after the text `state` has matched.
  bool accepts(const GrammarState& state, int32_t token, GrammarScratch& scratch) const;
  // mask[t] = accepts(state, t) for every token, mask resized to n_tokens();
  // returns how many are allowed.
  int32_t mask(const GrammarState& state, std::vector<uint8_t>& mask, GrammarScratch& scratch) const;
  // Moves `state` on by `token`'s bytes (an end token leaves it as it is);
  // false when the token was not allowed (the state is then not valid).
  bool advance(GrammarState& state, int32_t token) const;

 private:
  enum class TokenKind : uint8_t { never, text, end };
  using ByteSet = std::array<uint64_t, 4>;
  struct Node {
    uint32_t edge_begin = 0, edge_end = 0;    // into edge_bytes_/edge_nodes_
    uint32_t token_begin = 0, token_end = 0;  // into node_tokens_: the tokens whose piece ends here
    uint32_t subtree_token_end = 0;           // and those of its whole subtree: [token_begin, this)
    ByteSet subtree_bytes{};                  // the bytes on the edges below it
    bool utf8_whole = false;                  // its path and every path below are well-formed UTF-8, maybe cut off
  };
  // What the walk carries down: the mask, the count, what it learnt of the starting state.
  struct Walk {
    std::vector<uint8_t>& mask;
    GrammarScratch& scratch;
    ByteSet loops{};               // bytes that lead the starting state back to itself
    ByteSet tried{};               // bytes tried from the starting state so far
    bool non_ascii_loops = false;  // every character from U+0080 up leads the starting state back to itself
    int32_t allowed = 0;
  };
  // Walks the subtree of `node` from `state` (at trie depth `depth`); at_start: `state` is the walk's first.
  void walk(uint32_t node, const GrammarState& state, size_t depth, bool at_start, Walk& w) const;
  void allow_subtree(uint32_t node, Walk& w) const;

  std::vector<std::string> pieces_;
  std::vector<TokenKind> kinds_;
  std::vector<int32_t> end_tokens_;
  std::vector<Node> nodes_;  // nodes_[0] is the root (the empty piece)
  std::vector<uint8_t> edge_bytes_;
  std::vector<uint32_t> edge_nodes_;
  std::vector<int32_t> node_tokens_;
};

}  // namespace tensorpc
