// Grammar: a context-free grammar over Unicode code points, written in GBNF
// (the notation llama.cpp users write), and GrammarState, which matches UTF-8
// text against it one byte at a time. The grammar-constrained sampler masks
// the vocabulary with them (grammar_vocabulary.h); JSON and JSON Schema turn
// into grammars in json_schema.h.
//
// GBNF, as parse() reads it:
//   root   ::= "a" item* | [^"\\] ( x | y ){2,5}   # a comment runs to the end of the line
// Rules are `name ::= alternatives`; `root` is the start. A rule's body runs
// until the next `name ::=` or the end of the text (newlines are spaces).
// Elements: literals "..." (escapes \n \r \t \" \\ \' \[ \] \- \/ \xHH
// \uHHHH \UHHHHHHHH), classes [a-z0-9_] and negated [^"\\], `.` (any code
// point), groups ( ), references to rules, each followed by any of * + ?
// {m} {m,} {m,n} (spaces allowed inside the braces). Errors are
// invalid_argument naming line and column and what is wrong.
//
// How it is held: every rule is a list of alternatives, each a run of
// symbols in one flat array ended by an `end` symbol; a symbol is a set of
// code-point ranges (negated or not) or a reference to a rule. Groups and
// repetitions become rules of their own (`x*` is `r ::= x r | `; x{m,n} is
// m copies of x and a chain of n - m rules `r ::= x r' | `), so the matcher
// knows only sequences, alternatives and references.
//
// How it matches: a GrammarState is the set of parse stacks the text so far
// allows (a pushdown automaton run on all its choices at once, duplicates
// merged). A stack is a list of positions in the symbol array, the top being
// the next code-point set to match; returning from a rule whose reference
// ended its alternative pops at once, so right recursion (x*) keeps stacks
// short. The text is a valid prefix while some stack is alive, complete when
// some stack is empty and no UTF-8 character is cut off.
//
// Limits (GrammarLimits), so a hostile grammar is refused or bounded, never
// hangs: left recursion, direct or through other rules or nullable symbols,
// is refused naming the rule; a repetition count above max_repeat, groups
// nested deeper than max_nesting, more than max_rules rules, more than
// max_symbols symbols (after repetitions are written out) or a text above
// max_text_bytes are refused. While matching, more than max_stacks stacks at
// once (an ambiguous grammar whose choices multiply), or more than 64 times
// that many expansion steps for one character, fails the state with an error
// (error() says so); a stack deeper than max_stack_depth is dropped, so text
// that would nest deeper is not a valid prefix.
//
// A Grammar is immutable once made: share it (shared_ptr<const Grammar>)
// between threads and requests. A GrammarState is a value: copy it to try
// text without committing; one state is not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpc/status.h"

namespace tensorpc {

struct GrammarLimits {
  size_t max_text_bytes = 1 << 20;
  int max_rules = 20000;
  int max_symbols = 500000;
  int max_repeat = 1000;       // m and n of {m,n}
  int max_nesting = 100;       // groups inside groups
  int max_stacks = 1024;       // parse stacks alive at once
  int max_stack_depth = 1024;  // positions on one stack
};

class Grammar {
 public:
  // The grammar of GBNF `text`, checked as described above.
  static StatusOr<std::shared_ptr<const Grammar>> parse(std::string_view text, const GrammarLimits& limits = {});

  const GrammarLimits& limits() const { return limits_; }
  int n_rules() const { return static_cast<int>(rules_.size()); }
  int n_symbols() const { return static_cast<int>(symbols_.size()); }

  // The compiled form, read by GrammarState and the builder (grammar_build.h).
  struct CodeRange {
    uint32_t lo, hi;  // inclusive
  };
  struct Symbol {
    enum class Kind : uint8_t { chars, rule, end };
    Kind kind = Kind::end;
    bool negated = false;  // chars: matches what the ranges do not
    uint32_t first = 0;    // chars: first range in ranges_; rule: the rule's id
    uint32_t count = 0;    // chars: number of ranges (sorted, disjoint, not touching)
  };
  struct Rule {
    std::string name;
    std::vector<uint32_t> alternatives;  // where each starts in symbols_
  };

  const Symbol& symbol(uint32_t at) const { return symbols_[at]; }
  const Rule& rule(uint32_t id) const { return rules_[id]; }
  uint32_t root() const { return root_; }
  // Whether chars symbol `s` matches code point `cp`, and whether it matches
  // some code point in [lo, hi] (a UTF-8 character not yet complete).
  bool matches(const Symbol& s, uint32_t cp) const;
  bool matches_some(const Symbol& s, uint32_t lo, uint32_t hi) const;
  // Whether chars symbol `s` matches every code point in [lo, hi].
  bool matches_all(const Symbol& s, uint32_t lo, uint32_t hi) const;

 private:
  friend class GrammarBuilder;
  Grammar() = default;

  GrammarLimits limits_;
  std::vector<Symbol> symbols_;
  std::vector<CodeRange> ranges_;
  std::vector<Rule> rules_;
  uint32_t root_ = 0;
};

// Parse stacks stored flat: stack i is frames[ends[i-1] .. ends[i]), its top last.
struct GrammarStacks {
  std::vector<uint32_t> frames;
  std::vector<uint32_t> ends;
  std::vector<uint64_t> hashes;  // one per stack, to merge duplicates quickly

  size_t size() const { return ends.size(); }
  void clear() {
    frames.clear();
    ends.clear();
    hashes.clear();
  }
};

// A memo of code-point steps for the vocabulary walk: the stacks that a set
// of stacks becomes after one code point. The walk meets the same state and
// character many times (inside a JSON string every ordinary character leads
// back to the same stacks), and a hit copies the stacks instead of expanding
// them again. Direct-mapped, a fixed number of entries; any grammar (an entry
// holds its own). Not thread-safe: one per GrammarScratch.
class GrammarStepCache {
 public:
  // The stacks `from` becomes after `cp` under `grammar`, or null when not remembered.
  const GrammarStacks* find(const Grammar* grammar, const GrammarStacks& from, uint32_t cp) const;
  void insert(const std::shared_ptr<const Grammar>& grammar, const GrammarStacks& from, uint32_t cp,
              const GrammarStacks& to);

 private:
  struct Entry {
    std::shared_ptr<const Grammar> grammar;  // held, so that no other grammar takes its address
    uint32_t cp = 0;
    GrammarStacks from, to;
  };
  static uint64_t slot_key(const GrammarStacks& from, uint32_t cp);
  std::vector<Entry> entries_ = std::vector<Entry>(512);
};

// UTF-8 read a byte at a time: the character being read, and the code
// points it may still become. Only well-formed UTF-8 is taken (no overlong
// form, no surrogate, nothing above U+10FFFF), even cut off.
struct Utf8Prefix {
  uint32_t cp = 0;          // the bits so far
  int left = 0;             // bytes still to come; 0 after a whole character
  int length = 0;           // the character's bytes
  uint32_t lo = 0, hi = 0;  // what it may become (cp itself when whole)
  // Takes `byte`; false when the bytes are not the start of a well-formed character.
  bool push(uint8_t byte);
};

class GrammarState {
 public:
  // The state before any text: the start of `root`.
  explicit GrammarState(std::shared_ptr<const Grammar> grammar);

  // Feeds `bytes`; false when the text is no longer a valid prefix (the
  // state is then dead: it accepts nothing more) or the state failed.
  bool advance(std::string_view bytes);
  bool advance_byte(uint8_t byte);

  // Whether the text so far is a valid prefix; whether it may end here.
  bool valid() const { return stacks_.size() > 0 && error_.ok(); }
  bool complete() const;
  // Not ok when a limit stopped the matcher (too many stacks at once).
  const Status& error() const { return error_; }
  size_t n_stacks() const { return stacks_.size(); }
  // Whether both states hold the same stacks, neither with a character cut off.
  bool same_as(const GrammarState& other) const {
    return utf8_.left == 0 && other.utf8_.left == 0 && stacks_.ends == other.stacks_.ends &&
           stacks_.frames == other.stacks_.frames;
  }
  const Grammar& grammar() const { return *grammar_; }
  // Whether every code point from U+0080 up moves this state to the same
  // stacks (each stack's set holds all of them or none): then one of them
  // tells what any does.
  bool non_ascii_alike() const;

  // Feeds one byte of `from` into *this (overwritten; its buffers are
  // reused): the allocation-free step of the vocabulary walk, which passes
  // its step cache.
  bool advance_from(const GrammarState& from, uint8_t byte, GrammarStepCache* cache = nullptr);

 private:
  bool step_code_point(const GrammarState& from, uint32_t cp, GrammarStepCache* cache);
  // Pushes scratch_'s alternatives until each stack's top is a code-point set or it is empty.
  void expand();
  void add_stack(const std::vector<uint32_t>& stack);
  void fail(std::string why);

  std::shared_ptr<const Grammar> grammar_;
  GrammarStacks stacks_;
  Utf8Prefix utf8_;  // a character cut off, when utf8_.left > 0
  Status error_;
  int work_ = 0;                   // expansion steps of the current step, bounded
  std::vector<uint32_t> scratch_;  // the stack being extended
  GrammarStacks pending_;          // stacks still to expand (hashes unused)
};

}  // namespace tensorpc
