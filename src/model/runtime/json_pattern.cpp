// json_pattern_to_gbnf: a JSON Schema `pattern` (a simple regular expression)
// as a GBNF expression over the characters of a JSON string (json_schema.h).
#include <algorithm>
#include <cstdio>
#include <vector>

#include "model/runtime/json_schema.h"
#include "model/text/utf8.h"

namespace tensorpc {
namespace {

struct Range {
  uint32_t lo, hi;
};

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// The characters a JSON string holds only escaped: controls, '"' and '\'.
const std::vector<Range>& json_escaped() {
  static const std::vector<Range> ranges{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  return ranges;
}

std::string code_point_escape(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, cp > 0xFFFF ? "\\U%08X" : "\\u%04X", static_cast<unsigned>(cp));
  return buf;
}

// `ranges` less the characters JSON escapes, sorted.
std::vector<Range> without_escaped(std::vector<Range> ranges) {
  for (const Range& cut : json_escaped()) {
    std::vector<Range> kept;
    for (const Range& r : ranges) {
      if (r.hi < cut.lo || r.lo > cut.hi) {
        kept.push_back(r);
        continue;
      }
      if (r.lo < cut.lo) kept.push_back({r.lo, cut.lo - 1});
      if (r.hi > cut.hi) kept.push_back({cut.hi + 1, r.hi});
    }
    ranges = std::move(kept);
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
  return ranges;
}

class PatternTranslator {
 public:
  explicit PatternTranslator(std::string_view re) : re_(re) {}

  StatusOr<std::string> translate() {
    if (!re_.empty() && re_.front() == '^') ++pos_;
    if (re_.size() > pos_ && re_.back() == '$' && (re_.size() < 2 || re_[re_.size() - 2] != '\\')) {
      re_.remove_suffix(1);
    }
    TENSORPC_ASSIGN_OR_RETURN(std::string out, alternation(0));
    if (pos_ < re_.size()) return error("unexpected ')'");
    return out;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("pattern '" + std::string(re_) + "': at " + std::to_string(pos_) + ": " + what);
  }
  bool at(char c) const { return pos_ < re_.size() && re_[pos_] == c; }

  StatusOr<std::string> alternation(int depth) {
    if (depth > 50) return error("groups nested deeper than 50");
    std::string out = "(";
    while (true) {
      TENSORPC_ASSIGN_OR_RETURN(std::string seq, sequence(depth));
      out += seq.empty() ? "\"\"" : seq;
      if (!at('|')) break;
      ++pos_;
      out += " | ";
    }
    return out + ")";
  }

  StatusOr<std::string> sequence(int depth) {
    std::string out;
    while (pos_ < re_.size() && !at('|') && !at(')')) {
      TENSORPC_ASSIGN_OR_RETURN(std::string atom, this->atom(depth));
      TENSORPC_ASSIGN_OR_RETURN(std::string quantifier, this->quantifier());
      if (!out.empty()) out += ' ';
      out += atom + quantifier;
    }
    return out;
  }

  StatusOr<std::string> quantifier() {
    if (pos_ >= re_.size()) return std::string();
    const char c = re_[pos_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      const size_t close = re_.find('}', pos_);
      if (close == std::string_view::npos) return error("'{' without '}'");
      q = std::string(re_.substr(pos_, close - pos_ + 1));
      const bool starts_with_digit = q.size() > 2 && q[1] >= '0' && q[1] <= '9';
      if (!starts_with_digit || std::count(q.begin(), q.end(), ',') > 1 ||
          q.find_first_not_of("0123456789,", 1) != q.size() - 1)
        return error("a quantifier other than {m}, {m,} or {m,n}");
      pos_ = close + 1;
    } else {
      return std::string();
    }
    if (at('?') || at('+')) return error("lazy and possessive quantifiers are not supported");
    if (pos_ < re_.size() && (at('*') || at('{'))) return error("a quantifier after a quantifier");
    return q;
  }

  StatusOr<std::string> atom(int depth) {
    const char c = re_[pos_];
    if (c == '(') {
      ++pos_;
      if (at('?')) {
        if (re_.substr(pos_, 2) != "?:") return error("only (?: ) groups are supported, not lookaround or names");
        pos_ += 2;
      }
      TENSORPC_ASSIGN_OR_RETURN(std::string inner, alternation(depth + 1));
      if (!at(')')) return error("'(' without ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return bracket_class();
    if (c == '.') {
      ++pos_;
      return chars({{'\n', '\n'}}, true);
    }
    if (c == '^' || c == '$') return error("anchors are supported only at the start and the end");
    if (c == '*' || c == '+' || c == '?' || c == '{') return error("a quantifier with nothing before it");
    if (c == '\\') {
      std::vector<Range> ranges;
      bool negated = false;
      TENSORPC_ASSIGN_OR_RETURN(const uint32_t cp, escape(ranges, negated));
      if (!ranges.empty()) return chars(std::move(ranges), negated);
      return literal(cp);
    }
    TENSORPC_ASSIGN_OR_RETURN(const uint32_t cp, take_utf8());
    return literal(cp);
  }

  StatusOr<uint32_t> take_utf8() {
    const int len = utf8_char_length(re_, pos_);
    if (len <= 0) return error("invalid UTF-8");
    uint32_t cp = len == 1 ? static_cast<uint8_t>(re_[pos_]) : static_cast<uint8_t>(re_[pos_]) & (0x7F >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(re_[pos_ + k]) & 0x3F);
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  // After '\': a class escape (its ranges set, \D \W \S negated) or a character.
  StatusOr<uint32_t> escape(std::vector<Range>& ranges, bool& negated) {
    ++pos_;
    if (pos_ >= re_.size()) return error("'\\' at the end");
    const char e = re_[pos_++];
    switch (e) {
      case 'd':
      case 'D': ranges = {{'0', '9'}}; break;
      case 'w':
      case 'W': ranges = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; break;
      case 's':
      case 'S': ranges = {{' ', ' '}, {'\t', '\r'}}; break;
      case 'n': return uint32_t{'\n'};
      case 't': return uint32_t{'\t'};
      case 'r': return uint32_t{'\r'};
      case 'u': {
        if (pos_ + 4 > re_.size()) return error("'\\u' needs 4 hex digits");
        uint32_t cp = 0;
        for (int k = 0; k < 4; ++k) {
          const char h = re_[pos_++];
          const int v = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
          if (v < 0) return error("'\\u' needs 4 hex digits");
          cp = cp * 16 + static_cast<uint32_t>(v);
        }
        return cp;
      }
      default:
        if (std::string_view(".\\/-()[]{}*+?|^$").find(e) != std::string_view::npos) return uint32_t(e);
        return error(std::string("escape '\\") + e + "' is not supported");
    }
    negated = e >= 'A' && e <= 'Z';
    return 0;
  }

  StatusOr<std::string> bracket_class() {
    ++pos_;
    const bool negated = at('^');
    pos_ += negated;
    std::vector<Range> ranges;
    bool first = true;
    while (true) {
      if (pos_ >= re_.size()) return error("'[' without ']'");
      if (at(']') && !first) break;
      first = false;
      uint32_t lo = 0;
      if (at('\\')) {
        std::vector<Range> escaped;
        bool escaped_negated = false;
        TENSORPC_ASSIGN_OR_RETURN(lo, escape(escaped, escaped_negated));
        if (escaped_negated) return error("\\D, \\W and \\S inside a class are not supported");
        if (!escaped.empty()) {
          ranges.insert(ranges.end(), escaped.begin(), escaped.end());
          continue;
        }
      } else {
        TENSORPC_ASSIGN_OR_RETURN(lo, take_utf8());
      }
      uint32_t hi = lo;
      if (at('-') && pos_ + 1 < re_.size() && re_[pos_ + 1] != ']') {
        ++pos_;
        if (at('\\')) {
          std::vector<Range> escaped;
          bool escaped_negated = false;
          TENSORPC_ASSIGN_OR_RETURN(hi, escape(escaped, escaped_negated));
          if (!escaped.empty()) return error("a range ending in a class escape");
        } else {
          TENSORPC_ASSIGN_OR_RETURN(hi, take_utf8());
        }
        if (hi < lo) return error("a range that ends before it starts");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return chars(std::move(ranges), negated);
  }

  // A GBNF class for the characters of `ranges` (or all others) that a JSON string holds unescaped.
  StatusOr<std::string> chars(std::vector<Range> ranges, bool negated) {
    if (negated) {
      ranges.insert(ranges.end(), json_escaped().begin(), json_escaped().end());
    } else {
      ranges = without_escaped(std::move(ranges));
      if (ranges.empty()) return error("a class of characters JSON holds only escaped");
    }
    std::string out = negated ? "[^" : "[";
    for (const Range& r : ranges) {
      out += code_point_escape(r.lo);
      if (r.hi != r.lo) {
        out += '-';
        out += code_point_escape(std::min(r.hi, kMaxCodePoint));
      }
    }
    return out + "]";
  }

  // The character `cp` as JSON writes it inside a string.
  static std::string literal(uint32_t cp) {
    if (cp == '"') return R"("\\\"")";
    if (cp == '\\') return R"("\\\\")";
    if (cp < 0x20) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\"\\\\u%04x\"", static_cast<unsigned>(cp));
      return buf;
    }
    std::string out(1, '"');
    out += code_point_escape(cp);
    out += '"';
    return out;
  }

  std::string_view re_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<std::string> json_pattern_to_gbnf(std::string_view pattern) { return PatternTranslator(pattern).translate(); }

}  // namespace tensorpc
