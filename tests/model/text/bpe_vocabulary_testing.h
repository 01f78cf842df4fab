// What the byte-level BPE tokenizer tests build their small vocabularies from:
// the 256 byte tokens in GPT-2's spelling, and a Tokenizer made from a
// vocabulary that must be accepted.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "model/text/tokenizer.h"
#include "model/text/tokenizer_bpe.h"
#include "model/text/utf8.h"

namespace tensorpc::test {

// A bpe vocabulary with pre-tokenizer `pre` whose ids 0..255 are the bytes.
inline Vocabulary byte_level_vocabulary(const std::string& pre) {
  Vocabulary v;
  v.kind = VocabularyKind::bpe;
  v.pre = pre;
  for (int b = 0; b < 256; ++b) {
    std::string text;
    utf8_append(bpe_byte_to_char(static_cast<uint8_t>(b)), text);
    v.tokens.push_back(text);
  }
  return v;
}

inline Tokenizer make_tokenizer(Vocabulary v) {
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return std::move(tok).value();
}

}  // namespace tensorpc::test
