// The real vocabularies the tokenizer tests read: the GGUF files of
// ../shared/vocab (GPT-2, Qwen 2, Phi-3; see its README), which may be absent,
// and those of the bundled models.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "model/gguf/gguf.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_gguf.h"

namespace tensorpc::test {

inline std::string shared_vocab_path(const std::string& name) {
  return std::string(TENSORPC_SOURCE_DIR) + "/../shared/vocab/ggml-vocab-" + name + ".gguf";
}

// Reads the tokenizer of the GGUF file at `path` into `tok`, or skips the
// test, saying why, when the file is absent. A skip or a failure ends only
// this function: the caller returns when `tok` is still empty.
inline void open_tokenizer(const std::string& path, std::unique_ptr<Tokenizer>& tok) {
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (the shared vocabularies are not here)";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto opened = tokenizer_from_gguf(*file.value());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  tok = std::make_unique<Tokenizer>(std::move(opened).value());
}

}  // namespace tensorpc::test
