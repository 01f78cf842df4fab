// The published chat templates of tests/data/chat_templates, for the chat
// template tests.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace tensorpc::test {

// The text of tests/data/chat_templates/FILE (a failed expectation when it cannot be read).
inline std::string read_template(const std::string& file) {
  std::ifstream in(std::string(TENSORPC_SOURCE_DIR) + "/tests/data/chat_templates/" + file);
  EXPECT_TRUE(in.good()) << file;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tensorpc::test
