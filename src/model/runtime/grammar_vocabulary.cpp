// GrammarVocabulary: the vocabulary's pieces as a trie, walked with a grammar state.
#include "model/runtime/grammar_vocabulary.h"

#include <algorithm>
#include <numeric>

namespace tensorpc {

GrammarVocabulary::GrammarVocabulary(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.n_tokens();
  pieces_.resize(static_cast<size_t>(n));
  kinds_.assign(static_cast<size_t>(n), TokenKind::never);
  for (int32_t t = 0; t < n; ++t) {
    const TokenType type = tokenizer.type(t);
    if (tokenizer.is_end_of_generation(t)) {
      kinds_[t] = TokenKind::end;
      end_tokens_.push_back(t);
    } else if (type != TokenType::control && type != TokenType::unknown && type != TokenType::unused) {
      pieces_[t] = tokenizer.token_to_piece(t);
      if (!pieces_[t].empty()) kinds_[t] = TokenKind::text;
    }
  }
  // The trie, built from the pieces in byte order: each node's children are
  // then consecutive, made depth-first, and its tokens too.
  std::vector<int32_t> order;
  for (int32_t t = 0; t < n; ++t) {
    if (kinds_[t] == TokenKind::text) order.push_back(t);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });
  // A first pass makes nodes with their parent and byte; a second lays out the edges.
  struct Draft {
    uint32_t parent;
    uint8_t byte;
    std::vector<int32_t> tokens;
  };
  std::vector<Draft> drafts{{0, 0, {}}};
  std::vector<uint32_t> path{0};  // the nodes of the previous piece, root first
  std::string_view previous;
  for (const int32_t t : order) {
    const std::string_view p = pieces_[t];
    size_t common = 0;
    while (common < p.size() && common < previous.size() && p[common] == previous[common]) ++common;
    path.resize(common + 1);
    for (size_t i = common; i < p.size(); ++i) {
      drafts.push_back({path.back(), static_cast<uint8_t>(p[i]), {}});
      path.push_back(static_cast<uint32_t>(drafts.size() - 1));
    }
    drafts[path.back()].tokens.push_back(t);
    previous = p;
  }
  // Nodes were made in depth-first byte order, so each node's children appear in order.
  nodes_.resize(drafts.size());
  std::vector<std::vector<uint32_t>> children(drafts.size());
  for (uint32_t i = 1; i < drafts.size(); ++i) children[drafts[i].parent].push_back(i);
  for (uint32_t i = 0; i < drafts.size(); ++i) {
    Node& node = nodes_[i];
    node.edge_begin = static_cast<uint32_t>(edge_nodes_.size());
    for (const uint32_t c : children[i]) {
      edge_bytes_.push_back(drafts[c].byte);
      edge_nodes_.push_back(c);
    }
    node.edge_end = static_cast<uint32_t>(edge_nodes_.size());
    node.token_begin = static_cast<uint32_t>(node_tokens_.size());
    node_tokens_.insert(node_tokens_.end(), drafts[i].tokens.begin(), drafts[i].tokens.end());
    node.token_end = static_cast<uint32_t>(node_tokens_.size());
  }
  // Whether each node's path is well-formed UTF-8: parents come before their children.
  std::vector<Utf8Prefix> utf8(nodes_.size());
  std::vector<bool> well_formed(nodes_.size(), true);
  for (uint32_t i = 1; i < drafts.size(); ++i) {
    utf8[i] = utf8[drafts[i].parent];
    well_formed[i] = well_formed[drafts[i].parent] && utf8[i].push(drafts[i].byte);
  }
  // Children come after their parent, so one pass from the end sums each subtree.
  for (uint32_t i = static_cast<uint32_t>(nodes_.size()); i-- > 0;) {
    Node& node = nodes_[i];
    node.subtree_token_end = node.token_end;
    node.utf8_whole = well_formed[i];
    for (uint32_t e = node.edge_begin; e < node.edge_end; ++e) {
      const Node& child = nodes_[edge_nodes_[e]];
      node.subtree_token_end = std::max(node.subtree_token_end, child.subtree_token_end);
      for (size_t k = 0; k < 4; ++k) node.subtree_bytes[k] |= child.subtree_bytes[k];
      node.subtree_bytes[edge_bytes_[e] / 64] |= uint64_t{1} << (edge_bytes_[e] % 64);
      node.utf8_whole = node.utf8_whole && child.utf8_whole;
    }
  }
}

bool GrammarVocabulary::accepts(const GrammarState& state, int32_t token, GrammarScratch& scratch) const {
  if (token < 0 || token >= n_tokens()) return false;
  switch (kinds_[token]) {
    case TokenKind::never: return false;
    case TokenKind::end: return state.complete();
    case TokenKind::text: break;
  }
  const std::string& p = pieces_[token];
  const GrammarState* from = &state;
  for (size_t i = 0; i < p.size(); ++i) {
    GrammarState& next = scratch.level(i % 2, state);
    if (!next.advance_from(*from, static_cast<uint8_t>(p[i]), &scratch.steps())) return false;
    from = &next;
  }
  return true;
}

namespace {

bool has(const std::array<uint64_t, 4>& set, uint8_t byte) { return (set[byte / 64] >> (byte % 64)) & 1; }
void add(std::array<uint64_t, 4>& set, uint8_t byte) { set[byte / 64] |= uint64_t{1} << (byte % 64); }

}  // namespace

void GrammarVocabulary::allow_subtree(uint32_t node, Walk& w) const {
  const Node& n = nodes_[node];
  for (uint32_t k = n.token_begin; k < n.subtree_token_end; ++k) w.mask[node_tokens_[k]] = 1;
  w.allowed += static_cast<int32_t>(n.subtree_token_end - n.token_begin);
}

void GrammarVocabulary::walk(uint32_t node, const GrammarState& state, size_t depth, bool at_start, Walk& w) const {
  const Node& n = nodes_[node];
  for (uint32_t e = n.edge_begin; e < n.edge_end; ++e) {
    const uint8_t b = edge_bytes_[e];
    const uint32_t child = edge_nodes_[e];
    const Node& c = nodes_[child];
    GrammarState& next = w.scratch.level(depth, state);
    bool advanced = false, matched = false;
    if (at_start && !has(w.tried, b)) {
      // Whether this byte leads the starting state back to itself, found the first time it is met.
      matched = next.advance_from(state, b, &w.scratch.steps());
      advanced = true;
      if (matched && next.same_as(state)) add(w.loops, b);
      add(w.tried, b);
    }
    const bool loop = has(w.loops, b);
    if (at_start && (loop || (b >= 0x80 && w.non_ascii_loops)) && c.utf8_whole) {
      // If every byte below leads back too, the subtree is allowed whole.
      const bool all_loop = (c.subtree_bytes[0] & ~w.loops[0]) == 0 && (c.subtree_bytes[1] & ~w.loops[1]) == 0 &&
                            (w.non_ascii_loops || (c.subtree_bytes[2] | c.subtree_bytes[3]) == 0);
      if (all_loop) {
        allow_subtree(child, w);
        continue;
      }
    }
    if (at_start && loop) {
      for (uint32_t k = c.token_begin; k < c.token_end; ++k) w.mask[node_tokens_[k]] = 1;
      w.allowed += static_cast<int32_t>(c.token_end - c.token_begin);
      walk(child, state, depth, true, w);
      continue;
    }
    if (!advanced) matched = next.advance_from(state, b, &w.scratch.steps());
    if (!matched) continue;
    for (uint32_t k = c.token_begin; k < c.token_end; ++k) w.mask[node_tokens_[k]] = 1;
    w.allowed += static_cast<int32_t>(c.token_end - c.token_begin);
    if (c.edge_begin != c.edge_end) walk(child, next, depth + 1, false, w);
  }
}

int32_t GrammarVocabulary::mask(const GrammarState& state, std::vector<uint8_t>& mask, GrammarScratch& scratch) const {
  mask.assign(pieces_.size(), 0);
  Walk w{mask, scratch};
  if (state.complete()) {
    for (const int32_t t : end_tokens_) mask[t] = 1;
    w.allowed += static_cast<int32_t>(end_tokens_.size());
  }
  if (!state.valid()) return w.allowed;
  if (state.non_ascii_alike()) {
    GrammarState& probe = scratch.level(0, state);
    w.non_ascii_loops = probe.advance_from(state, 0xC2, &scratch.steps()) &&
                        scratch.level(1, state).advance_from(probe, 0x80, &scratch.steps()) &&
                        scratch.level(1, state).same_as(state);
  }
  walk(0, state, 0, true, w);
  return w.allowed;
}

bool GrammarVocabulary::advance(GrammarState& state, int32_t token) const {
  if (token < 0 || token >= n_tokens() || kinds_[token] == TokenKind::never) return false;
  if (kinds_[token] == TokenKind::end) return state.complete();
  return state.advance(pieces_[token]);
}

}  // namespace tensorpc
