// Grammar::parse: GBNF text into rules (grammar.h describes the notation).
// A recursive-descent parser over bytes; groups and repetitions become rules
// of their own through GrammarBuilder, which checks the result.
#include <algorithm>
#include <optional>

#include "model/runtime/grammar_build.h"
#include "model/text/utf8.h"

namespace tensorpc {
namespace {

using Symbol = Grammar::Symbol;
using Sequence = GrammarBuilder::Sequence;
using CodeRange = Grammar::CodeRange;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, GrammarBuilder& builder) : text_(text), b_(builder) {
    for (size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Status parse_rules() {
    for (skip_space(); pos_ < text_.size(); skip_space()) {
      const size_t at = pos_;
      const std::string_view name = take_name();
      if (name.empty()) return error(at, "expected a rule name");
      skip_space();
      if (text_.substr(pos_, 3) != "::=")
        return error(pos_, "expected '::=' after rule name '" + std::string(name) + "'");
      pos_ += 3;
      TENSORPC_ASSIGN_OR_RETURN(const uint32_t id, b_.rule_id(name, where(at)));
      rule_ = std::string(name);
      TENSORPC_ASSIGN_OR_RETURN(auto alternatives, parse_alternatives());
      if (pos_ < text_.size() && text_[pos_] == ')') return error(pos_, "')' without '('");
      TENSORPC_RETURN_IF_ERROR(b_.define(id, std::move(alternatives), where(at)));
    }
    return Status();
  }

 private:
  std::string where(size_t at) const {
    const auto line = std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - line_starts_.begin();
    const size_t column = at - line_starts_[static_cast<size_t>(line) - 1] + 1;
    return "grammar: line " + std::to_string(line) + ", column " + std::to_string(column);
  }
  Status error(size_t at, const std::string& what) const { return invalid_argument(where(at) + ": " + what); }

  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view take_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // Whether the text at pos_ starts the next rule: a name, spaces, "::=".
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  StatusOr<std::vector<Sequence>> parse_alternatives() {
    std::vector<Sequence> alternatives;
    while (true) {
      TENSORPC_ASSIGN_OR_RETURN(auto seq, parse_sequence());
      alternatives.push_back(std::move(seq));
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '|') return alternatives;
      ++pos_;
    }
  }

  StatusOr<Sequence> parse_sequence() {
    Sequence seq;
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] == '|' || text_[pos_] == ')' || at_rule_start()) return seq;
      TENSORPC_ASSIGN_OR_RETURN(Sequence element, parse_element());
      TENSORPC_ASSIGN_OR_RETURN(element, parse_repetitions(std::move(element)));
      seq.insert(seq.end(), element.begin(), element.end());
    }
  }

  StatusOr<Sequence> parse_element() {
    const size_t at = pos_;
    const char c = text_[pos_];
    if (c == '"') return parse_literal();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      TENSORPC_RETURN_IF_ERROR(b_.reserve_symbols(1));
      return Sequence{b_.chars({{0, kMaxCodePoint}}, false)};
    }
    if (c == '(') {
      if (++depth_ > b_.limits().max_nesting)
        return error(at, "groups nested deeper than " + std::to_string(b_.limits().max_nesting));
      ++pos_;
      TENSORPC_ASSIGN_OR_RETURN(auto alternatives, parse_alternatives());
      if (pos_ >= text_.size() || text_[pos_] != ')') return error(at, "'(' without ')'");
      ++pos_;
      --depth_;
      return rule_of(std::move(alternatives), at);
    }
    if (is_name_char(c)) {
      const std::string_view name = take_name();
      TENSORPC_RETURN_IF_ERROR(b_.reserve_symbols(1));
      TENSORPC_ASSIGN_OR_RETURN(const uint32_t id, b_.rule_id(name, where(at)));
      return Sequence{GrammarBuilder::reference(id)};
    }
    return error(at, std::string("unexpected '") + c + "'");
  }

  // A rule of its own for `alternatives` (a group, a repetition), referenced once.
  StatusOr<Sequence> rule_of(std::vector<Sequence> alternatives, size_t at) {
    TENSORPC_ASSIGN_OR_RETURN(const uint32_t id, b_.new_rule(rule_));
    TENSORPC_RETURN_IF_ERROR(b_.define(id, std::move(alternatives), where(at)));
    TENSORPC_RETURN_IF_ERROR(b_.reserve_symbols(1));
    return Sequence{GrammarBuilder::reference(id)};
  }

  // The code point at pos_ inside a literal or class, escapes decoded.
  StatusOr<uint32_t> take_char() {
    const size_t at = pos_;
    if (text_[pos_] != '\\') {
      const int len = utf8_char_length(text_, pos_);
      if (len <= 0) return error(at, "invalid UTF-8");
      uint32_t cp = len == 1 ? static_cast<uint8_t>(text_[pos_]) : static_cast<uint8_t>(text_[pos_]) & (0x7F >> len);
      for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text_[pos_ + k]) & 0x3F);
      pos_ += len;
      return cp;
    }
    if (++pos_ >= text_.size()) return error(at, "'\\' at the end of the text");
    const char e = text_[pos_++];
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 'r': return uint32_t{'\r'};
      case 't': return uint32_t{'\t'};
      case '"':
      case '\\':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '/':
      case '^': return uint32_t(e);
      default: break;
    }
    const int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits == 0) return error(at, std::string("unknown escape '\\") + e + "'");
    uint32_t cp = 0;
    for (int k = 0; k < digits; ++k) {
      const int h = pos_ < text_.size() ? hex_value(text_[pos_]) : -1;
      if (h < 0) return error(at, std::string("'\\") + e + "' needs " + std::to_string(digits) + " hex digits");
      cp = cp * 16 + static_cast<uint32_t>(h);
      ++pos_;
    }
    if (cp > kMaxCodePoint) return error(at, "code point above U+10FFFF");
    return cp;
  }

  StatusOr<Sequence> parse_literal() {
    const size_t at = pos_++;
    Sequence seq;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') return error(at, "unterminated literal");
      if (text_[pos_] == '"') break;
      TENSORPC_ASSIGN_OR_RETURN(const uint32_t cp, take_char());
      TENSORPC_RETURN_IF_ERROR(b_.reserve_symbols(1));
      seq.push_back(b_.chars({{cp, cp}}, false));
    }
    ++pos_;
    return seq;
  }

  StatusOr<Sequence> parse_class() {
    const size_t at = pos_++;
    const bool negated = pos_ < text_.size() && text_[pos_] == '^';
    pos_ += negated;
    std::vector<CodeRange> ranges;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') return error(at, "unterminated character class");
      if (text_[pos_] == ']') break;
      TENSORPC_ASSIGN_OR_RETURN(const uint32_t lo, take_char());
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        TENSORPC_ASSIGN_OR_RETURN(hi, take_char());
        if (hi < lo) return error(at, "a range in a character class ends before it starts");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    TENSORPC_RETURN_IF_ERROR(b_.reserve_symbols(1));
    return Sequence{b_.chars(std::move(ranges), negated)};
  }

  // A count of {m,n}, at most max_repeat.
  StatusOr<int> take_count(size_t at) {
    const size_t start = pos_;
    int64_t n = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      n = std::min<int64_t>(n * 10 + (text_[pos_++] - '0'), int64_t{1} << 40);
    }
    if (pos_ == start) return error(at, "expected a number in '{'");
    if (n > b_.limits().max_repeat)
      return error(at, "repetition count " + std::to_string(n) + " is above the limit of " +
                           std::to_string(b_.limits().max_repeat));
    return static_cast<int>(n);
  }

  StatusOr<Sequence> parse_repetitions(Sequence element) {
    while (true) {
      skip_space();
      if (pos_ >= text_.size()) return element;
      const size_t at = pos_;
      int min = 0, max = -1;  // -1: no bound
      switch (text_[pos_]) {
        case '*': break;
        case '+': min = 1; break;
        case '?': max = 1; break;
        case '{': {  // spaces are allowed inside: { 2 , 5 }
          ++pos_;
          skip_space();
          TENSORPC_ASSIGN_OR_RETURN(min, take_count(at));
          skip_space();
          max = min;
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            skip_space();
            max = -1;
            if (pos_ < text_.size() && text_[pos_] != '}') {
              TENSORPC_ASSIGN_OR_RETURN(max, take_count(at));
              skip_space();
              if (max < min) return error(at, "in {m,n}, n is below m");
            }
          }
          if (pos_ >= text_.size() || text_[pos_] != '}') return error(at, "expected '}'");
          break;
        }
        default: return element;
      }
      ++pos_;
      TENSORPC_ASSIGN_OR_RETURN(element, repeat(element, min, max, at));
    }
  }

  // x{min,max}: min copies of x, then a chain of optional ones (or one rule x* when there is no max).
  StatusOr<Sequence> repeat(const Sequence& x, int min, int max, size_t at) {
    const size_t optional = max < 0 ? 1 : static_cast<size_t>(max - min);
    TENSORPC_RETURN_IF_ERROR(b_.reserve_symbols(x.size() * (static_cast<size_t>(min) + optional)));
    Sequence out;
    for (int i = 0; i < min; ++i) out.insert(out.end(), x.begin(), x.end());
    if (max < 0) {
      TENSORPC_ASSIGN_OR_RETURN(const uint32_t id, b_.new_rule(rule_));
      Sequence more = x;
      more.push_back(GrammarBuilder::reference(id));
      TENSORPC_RETURN_IF_ERROR(b_.define(id, {std::move(more), {}}, where(at)));
      out.push_back(GrammarBuilder::reference(id));
      return out;
    }
    std::optional<uint32_t> tail;  // the rule matching up to k more copies
    for (size_t k = 0; k < optional; ++k) {
      TENSORPC_ASSIGN_OR_RETURN(const uint32_t id, b_.new_rule(rule_));
      Sequence more = x;
      if (tail) more.push_back(GrammarBuilder::reference(*tail));
      TENSORPC_RETURN_IF_ERROR(b_.define(id, {std::move(more), {}}, where(at)));
      tail = id;
    }
    if (tail) out.push_back(GrammarBuilder::reference(*tail));
    return out;
  }

  std::string_view text_;
  GrammarBuilder& b_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<size_t> line_starts_{0};
  std::string rule_;  // the rule being defined, to name the rules made for it
};

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view text, const GrammarLimits& limits) {
  if (text.size() > limits.max_text_bytes)
    return invalid_argument("grammar: the text is larger than " + std::to_string(limits.max_text_bytes) + " bytes");
  GrammarBuilder builder(limits);
  GbnfParser parser(text, builder);
  TENSORPC_RETURN_IF_ERROR(parser.parse_rules());
  return builder.finish("root");
}

}  // namespace tensorpc
