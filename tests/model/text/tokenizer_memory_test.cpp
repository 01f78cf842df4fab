// The memory one encode of a long prompt needs. It runs in a program of its
// own (tokenizer_memory_tests), since it counts every operator new of its
// process (bench/heap_counter.h): for ordinary English, whatever the
// vocabulary, what the call allocates beyond the token vector it returns is
// at most twice the prompt's bytes, as the encoders work a word (BPE) or a
// segment no piece crosses (SentencePiece) at a time. Most of it is the
// vector's own last growth, when its old buffer and the new one live at once.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "heap_counter.h"
#include "model/text/vocabulary_files_testing.h"

namespace tensorpc {
namespace {

// The King James text of tests/data repeated to at least `bytes`.
std::string english_prompt(size_t bytes) {
  std::ifstream in(std::string(TENSORPC_SOURCE_DIR) + "/tests/data/kjv-heldout.txt", std::ios::binary);
  std::stringstream passage;
  passage << in.rdbuf();
  EXPECT_FALSE(passage.str().empty());
  std::string prompt;
  while (!passage.str().empty() && prompt.size() < bytes) prompt += passage.str();
  return prompt;
}

class TokenizerMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerMemory, ALongPromptNeedsWorkingMemoryForAWordAtATime) {
  std::unique_ptr<Tokenizer> tok;
  test::open_tokenizer(test::vocabulary_path(GetParam()), tok);
  if (!tok) return;
  const std::string prompt = english_prompt(size_t{1} << 20);
  const size_t before = bench::reset_heap_peak();
  const std::vector<int32_t> ids = tok->encode(prompt, /*add_special=*/false);
  const size_t working = bench::heap_peak() - before - ids.capacity() * sizeof(int32_t);
  EXPECT_LE(working, 2 * prompt.size()) << ids.size() << " tokens";
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerMemory, ::testing::ValuesIn(test::all_vocabularies()),
                         test::vocabulary_test_name);

}  // namespace
}  // namespace tensorpc
