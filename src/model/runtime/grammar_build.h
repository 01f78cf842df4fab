// GrammarBuilder: collects rules into a Grammar and checks it once complete
// (every referenced rule defined, no left recursion, the size limits). The
// GBNF parser (grammar_gbnf.cpp) is its one user; it lives apart so that the
// checks read on their own.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/runtime/grammar.h"

namespace tensorpc {

class GrammarBuilder {
 public:
  using Symbol = Grammar::Symbol;
  using Sequence = std::vector<Symbol>;

  explicit GrammarBuilder(const GrammarLimits& limits);

  const GrammarLimits& limits() const { return grammar_->limits_; }

  // The id of the rule named `name`, made (undefined) on first use; `where`
  // is the position that names it, for the error when it stays undefined.
  StatusOr<uint32_t> rule_id(std::string_view name, const std::string& where);
  // A rule of the builder's own (a group, a repetition), named after `parent`.
  StatusOr<uint32_t> new_rule(const std::string& parent);
  // Defines rule `id`; an error when it was defined before.
  Status define(uint32_t id, std::vector<Sequence> alternatives, const std::string& where);

  // A symbol matching the code points of `ranges` (any order, may overlap), or the others when negated.
  Symbol chars(std::vector<Grammar::CodeRange> ranges, bool negated);
  static Symbol reference(uint32_t rule) { return {Symbol::Kind::rule, false, rule, 0}; }

  // Symbols defined so far plus `more`, checked against max_symbols.
  Status reserve_symbols(size_t more);

  // The grammar whose start is rule `root`, checked.
  StatusOr<std::shared_ptr<const Grammar>> finish(std::string_view root);

 private:
  Status check_left_recursion() const;

  std::unique_ptr<Grammar> grammar_;
  std::map<std::string, uint32_t, std::less<>> ids_;
  std::vector<bool> defined_;
  std::vector<std::string> first_use_;  // where each rule was first named
  std::vector<int> generated_;          // rules made after each rule, for their names
  size_t n_symbols_ = 0;
};

}  // namespace tensorpc
