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

void GrammarVocabulary::walk(uint32_t node, const GrammarState& state, size_t depth, std::vector<uint8_t>& mask,
                             GrammarScratch& scratch, int32_t& allowed) const {
  const Node& n = nodes_[node];
  for (uint32_t e = n.edge_begin; e < n.edge_end; ++e) {
    GrammarState& next = scratch.level(depth, state);
    if (!next.advance_from(state, edge_bytes_[e], &scratch.steps())) continue;
    const Node& child = nodes_[edge_nodes_[e]];
    for (uint32_t k = child.token_begin; k < child.token_end; ++k) mask[node_tokens_[k]] = 1;
    allowed += static_cast<int32_t>(child.token_end - child.token_begin);
    if (child.edge_begin != child.edge_end) walk(edge_nodes_[e], next, depth + 1, mask, scratch, allowed);
  }
}

int32_t GrammarVocabulary::mask(const GrammarState& state, std::vector<uint8_t>& mask, GrammarScratch& scratch) const {
  mask.assign(pieces_.size(), 0);
  int32_t allowed = 0;
  if (state.complete()) {
    for (const int32_t t : end_tokens_) mask[t] = 1;
    allowed += static_cast<int32_t>(end_tokens_.size());
  }
  if (state.valid()) walk(0, state, 0, mask, scratch, allowed);
  return allowed;
}

bool GrammarVocabulary::advance(GrammarState& state, int32_t token) const {
  if (token < 0 || token >= n_tokens() || kinds_[token] == TokenKind::never) return false;
  if (kinds_[token] == TokenKind::end) return state.complete();
  return state.advance(pieces_[token]);
}

}  // namespace tensorpc
