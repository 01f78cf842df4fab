// PreTokenizer: the regular expressions of each tokenizer.ggml.pre value,
// compiled with PCRE2 (UTF, Unicode properties, JIT where the CPU allows).
#include "model/text/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <initializer_list>
#include <span>

namespace tensorpc {
namespace {

// The expressions of one family of pre values. The patterns are those of the
// models' own tokenizers; where one spells a case-insensitive group, it is
// written here with explicit ASCII classes, which is what it means for the
// contractions it lists.
struct PreTokenizerSpec {
  std::initializer_list<const char*> names;
  std::initializer_list<const char*> patterns;
  bool ignore_merges = false;
};

// GPT-2's split: contractions, letters, digits, other symbols, each optionally
// after one space; whitespace runs leave their last space to the next word.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// The same without the final \s+: a whitespace run it leaves is a word anyway.
constexpr const char* kGpt2NoTail = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama 3 (tiktoken cl100k style): digits in groups of up to three.
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen 2: as Llama 3 but every digit alone.
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// CJK ideographs, the range U+0800..U+4E00 and Hangul, as DeepSeek's tokenizers group them.
constexpr const char* kDeepseekCjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";

const PreTokenizerSpec kSpecs[] = {
    {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2NoTail, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
    {{"llama-bpe", "llama3", "llama-v3"}, {kLlama3}, /*ignore_merges=*/true},
    {{"qwen2", "deepseek-r1-qwen", "stablelm2"}, {kQwen2}},
    {{"gpt-2", "phi-2", "mpt", "olmo", "jais"}, {kGpt2}},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell"}, {R"(\p{N})", kGpt2NoTail}},
    {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2NoTail, "[0-9][0-9][0-9]"}},
    {{"deepseek-coder"}, {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
    {{"deepseek-llm"},
     {"[\r\n]",
      "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
      "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
      "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
      "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
      "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE"
      "\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
      "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
      "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
      "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"
      "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"
      "\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
      "\U0001E900-\U0001E943]+",
      "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+", R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
};

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

std::string PreTokenizer::known_names() {
  std::string out;
  for (const PreTokenizerSpec& spec : kSpecs) {
    for (const char* name : spec.names) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

StatusOr<PreTokenizer> PreTokenizer::create(std::string_view pre) {
  const PreTokenizerSpec* found = nullptr;
  for (const PreTokenizerSpec& spec : kSpecs) {
    for (const char* name : spec.names) {
      if (pre == name) found = &spec;
    }
  }
  if (found == nullptr) {
    return unsupported("tokenizer: tokenizer.ggml.pre is '" + std::string(pre) +
                       "', a pre-tokenizer tensorpc does not know (it knows " + known_names() + ")");
  }
  PreTokenizer p;
  p.name_ = std::string(pre);
  p.ignore_merges_ = found->ignore_merges;
  for (const char* pattern : found->patterns) {
    auto regex = std::make_shared<Regex>();
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // MATCH_INVALID_UTF: ill-formed bytes are characters that match nothing,
    // never an error; DOLLAR_ENDONLY: $ is the end of the word, not a final newline.
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &error,
                                &error_offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return internal_error("tokenizer: pre-tokenizer '" + p.name_ + "': pattern does not compile at offset " +
                            std::to_string(error_offset) + ": " + reinterpret_cast<const char*>(message));
    }
    // Without JIT (a CPU or build it does not support) the interpreter matches the same.
    (void)pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    p.regexes_.push_back(std::move(regex));
  }
  return p;
}

namespace {

// Calls `visit` with the matches of `code` in `piece` and the runs between them, in order.
template <typename Visit>
void split_piece(const pcre2_code* code, pcre2_match_data* match, std::string_view piece, const Visit& visit) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t pos = 0, gap = 0;  // where the next search starts; start of the text not yet a word
  while (pos < piece.size()) {
    const int rc = pcre2_match(code, subject, piece.size(), pos, 0, match, nullptr);
    if (rc < 0) break;  // no match, or out of resources: the rest is one word
    // Read before `visit`, which may match again with the same match data.
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    const size_t start = ov[0], end = ov[1];
    if (start > gap) visit(piece.substr(gap, start - gap));
    gap = start;
    if (end > start) {
      visit(piece.substr(start, end - start));
      pos = gap = end;
    } else {
      // An empty match makes no word; search again from the next character.
      pos = start + 1;
      while (pos < piece.size() && (static_cast<uint8_t>(piece[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  if (gap < piece.size()) visit(piece.substr(gap));
}

// Splits `piece` with codes[0], each of its words with codes[1], and so on:
// depth first, so the words of the last come to `visit` in order.
template <typename Visit>
void split_depth_first(std::span<const pcre2_code* const> codes, pcre2_match_data* match, std::string_view piece,
                       const Visit& visit) {
  if (codes.empty()) {
    visit(piece);
    return;
  }
  split_piece(codes[0], match, piece,
              [&](std::string_view word) { split_depth_first(codes.subspan(1), match, word, visit); });
}

}  // namespace

void PreTokenizer::for_each_word(std::string_view text, const std::function<void(std::string_view)>& visit) const {
  if (text.empty()) return;
  // One ovector pair: only the whole match is needed.
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(pcre2_match_data_create(1, nullptr),
                                                                            &pcre2_match_data_free);
  if (match == nullptr) {
    visit(text);  // out of memory for 24 bytes: keep the text whole
    return;
  }
  std::vector<const pcre2_code*> codes;
  for (const auto& regex : regexes_) codes.push_back(regex->code);
  split_depth_first(std::span<const pcre2_code* const>(codes), match.get(), text, visit);
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
  for_each_word(text, [&](std::string_view word) { words.push_back(word); });
}

}  // namespace tensorpc
