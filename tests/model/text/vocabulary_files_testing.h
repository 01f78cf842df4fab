// The real vocabularies the tokenizer tests read: the GGUF files of
// ../shared/vocab (GPT-2, Qwen 2, Phi-3; see its README), which may be absent,
// and those of the bundled models (kjv-bpe, kjv-tiny).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_gguf.h"

namespace tensorpc::test {

// The file of vocabulary `name`: models/<name>.gguf for a bundled model,
// else ../shared/vocab/ggml-vocab-<name>.gguf ("gpt-2", "qwen2", "phi-3").
inline std::string vocabulary_path(const std::string& name) {
  const std::string root = TENSORPC_SOURCE_DIR;
  return name.starts_with("kjv-") ? root + "/models/" + name + ".gguf"
                                  : root + "/../shared/vocab/ggml-vocab-" + name + ".gguf";
}

// Every vocabulary above, for INSTANTIATE_TEST_SUITE_P, and its test names.
inline std::vector<std::string> all_vocabularies() { return {"gpt-2", "qwen2", "phi-3", "kjv-bpe", "kjv-tiny"}; }
inline std::string vocabulary_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::erase(name, '-');
  return name;
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
