// Grammar and GrammarBuilder: the compiled form of grammar.h and its checks.
#include <algorithm>

#include "model/runtime/grammar_build.h"

namespace tensorpc {

bool Grammar::matches(const Symbol& s, uint32_t cp) const {
  const CodeRange* r = ranges_.data() + s.first;
  bool in = false;
  for (uint32_t i = 0; i < s.count && !in; ++i) in = r[i].lo <= cp && cp <= r[i].hi;
  return in != s.negated;
}

bool Grammar::matches_some(const Symbol& s, uint32_t lo, uint32_t hi) const {
  const CodeRange* r = ranges_.data() + s.first;
  for (uint32_t i = 0; i < s.count; ++i) {
    const bool overlaps = r[i].lo <= hi && lo <= r[i].hi;
    // Ranges never touch, so a negated set misses all of [lo, hi] only when one range covers it.
    if (s.negated && r[i].lo <= lo && hi <= r[i].hi) return false;
    if (!s.negated && overlaps) return true;
  }
  return s.negated;
}

bool Grammar::matches_all(const Symbol& s, uint32_t lo, uint32_t hi) const {
  const CodeRange* r = ranges_.data() + s.first;
  for (uint32_t i = 0; i < s.count; ++i) {
    if (r[i].lo <= lo && hi <= r[i].hi) return !s.negated;  // one range covers it (ranges never touch)
    if (r[i].lo <= hi && lo <= r[i].hi) return false;       // it is cut
  }
  return s.negated;
}

GrammarBuilder::GrammarBuilder(const GrammarLimits& limits) : grammar_(new Grammar()) { grammar_->limits_ = limits; }

StatusOr<uint32_t> GrammarBuilder::rule_id(std::string_view name, const std::string& where) {
  if (auto it = ids_.find(name); it != ids_.end()) return it->second;
  if (grammar_->rules_.size() >= static_cast<size_t>(limits().max_rules))
    return invalid_argument(where + ": more than " + std::to_string(limits().max_rules) + " rules");
  const auto id = static_cast<uint32_t>(grammar_->rules_.size());
  grammar_->rules_.push_back({std::string(name), {}});
  ids_.emplace(std::string(name), id);
  defined_.push_back(false);
  first_use_.push_back(where);
  generated_.push_back(0);
  return id;
}

StatusOr<uint32_t> GrammarBuilder::new_rule(const std::string& parent) {
  const auto parent_id = ids_.find(parent);
  const int n = parent_id == ids_.end() ? 0 : ++generated_[parent_id->second];
  std::string name = parent + "-" + std::to_string(n);
  while (ids_.contains(name)) name += "'";
  return rule_id(name, "rule '" + parent + "'");
}

Status GrammarBuilder::reserve_symbols(size_t more) {
  if (n_symbols_ + more > static_cast<size_t>(limits().max_symbols))
    return invalid_argument("the grammar is larger than " + std::to_string(limits().max_symbols) +
                            " symbols (repetitions written out)");
  return Status();
}

Status GrammarBuilder::define(uint32_t id, std::vector<Sequence> alternatives, const std::string& where) {
  Grammar::Rule& rule = grammar_->rules_[id];
  if (defined_[id]) return invalid_argument(where + ": rule '" + rule.name + "' is defined twice");
  size_t size = 0;
  for (const Sequence& seq : alternatives) size += seq.size() + 1;
  TENSORPC_RETURN_IF_ERROR(reserve_symbols(size));
  n_symbols_ += size;
  defined_[id] = true;
  auto& symbols = grammar_->symbols_;
  for (Sequence& seq : alternatives) {
    rule.alternatives.push_back(static_cast<uint32_t>(symbols.size()));
    symbols.insert(symbols.end(), seq.begin(), seq.end());
    symbols.push_back(Symbol{});  // end
  }
  return Status();
}

Grammar::Symbol GrammarBuilder::chars(std::vector<Grammar::CodeRange> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
  auto& out = grammar_->ranges_;
  const auto first = static_cast<uint32_t>(out.size());
  for (const auto& r : ranges) {
    if (out.size() > first && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return {Symbol::Kind::chars, negated, first, static_cast<uint32_t>(out.size()) - first};
}

Status GrammarBuilder::check_left_recursion() const {
  const auto& rules = grammar_->rules_;
  const auto& symbols = grammar_->symbols_;
  // Nullable rules, to a fixed point.
  std::vector<bool> nullable(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (nullable[r]) continue;
      for (uint32_t at : rules[r].alternatives) {
        while (symbols[at].kind == Symbol::Kind::rule && nullable[symbols[at].first]) ++at;
        if (symbols[at].kind == Symbol::Kind::end) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // The rules each rule may begin with, without matching a code point first.
  std::vector<std::vector<uint32_t>> left(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    for (uint32_t at : rules[r].alternatives) {
      for (; symbols[at].kind == Symbol::Kind::rule; ++at) {
        left[r].push_back(symbols[at].first);
        if (!nullable[symbols[at].first]) break;
      }
    }
  }
  // A cycle among those is left recursion: depth-first search without recursion.
  enum : uint8_t { unseen, open, done };
  std::vector<uint8_t> mark(rules.size(), unseen);
  std::vector<std::pair<uint32_t, size_t>> path;  // rule, next edge
  for (uint32_t start = 0; start < rules.size(); ++start) {
    if (mark[start] != unseen) continue;
    path.push_back({start, 0});
    mark[start] = open;
    while (!path.empty()) {
      auto& [r, edge] = path.back();
      if (edge == left[r].size()) {
        mark[r] = done;
        path.pop_back();
        continue;
      }
      const uint32_t next = left[r][edge++];
      if (mark[next] == open) {
        std::string cycle;
        for (auto it = std::find_if(path.begin(), path.end(), [&](const auto& p) { return p.first == next; });
             it != path.end(); ++it)
          cycle += rules[it->first].name + " -> ";
        return invalid_argument("rule '" + rules[next].name + "' is left-recursive (" + cycle + rules[next].name +
                                ", matching no character on the way)");
      }
      if (mark[next] == unseen) {
        mark[next] = open;
        path.push_back({next, 0});
      }
    }
  }
  return Status();
}

StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::finish(std::string_view root) {
  for (size_t r = 0; r < defined_.size(); ++r) {
    if (!defined_[r])
      return invalid_argument(first_use_[r] + ": rule '" + grammar_->rules_[r].name + "' is not defined");
  }
  const auto it = ids_.find(root);
  if (it == ids_.end()) return invalid_argument("the grammar has no rule '" + std::string(root) + "'");
  grammar_->root_ = it->second;
  TENSORPC_RETURN_IF_ERROR(check_left_recursion());
  return std::shared_ptr<const Grammar>(std::move(grammar_));
}

}  // namespace tensorpc
