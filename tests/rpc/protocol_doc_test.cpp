// docs/protocol.md is the contract of the wire protocol: the version its title
// states, and the newest row of its table of versions, are the version this
// code speaks in HELLO (kVersionMajor.kVersionMinor.kVersionPatch in
// rpc/wire/messages.h). A version bump without its entry in the document fails here.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "file_util.h"
#include "rpc/wire/messages.h"

namespace tensorpc::rpc {
namespace {

const std::string kProtocolDoc = std::string(TENSORPC_SOURCE_DIR) + "/docs/protocol.md";

std::string code_version() {
  return std::to_string(kVersionMajor) + "." + std::to_string(kVersionMinor) + "." + std::to_string(kVersionPatch);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ProtocolDoc, TitleStatesTheVersionTheCodeSpeaks) {
  const std::vector<std::string> lines = lines_of(test::read_file(kProtocolDoc));
  ASSERT_FALSE(lines.empty()) << "cannot read " << kProtocolDoc;
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, std::regex(R"(# The tensorpc wire protocol, version (\d+\.\d+\.\d+))")))
      << "title of " << kProtocolDoc << ": " << lines[0];
  EXPECT_EQ(m[1].str(), code_version()) << kProtocolDoc << " states a version other than rpc/wire/messages.h's";
}

TEST(ProtocolDoc, NewestRowOfTheVersionTableIsTheVersionTheCodeSpeaks) {
  const std::vector<std::string> lines = lines_of(test::read_file(kProtocolDoc));
  ASSERT_FALSE(lines.empty()) << "cannot read " << kProtocolDoc;
  const std::regex row(R"(\| (\d+\.\d+\.\d+) \|.*)");
  std::string newest;
  for (const std::string& line : lines) {
    std::smatch m;
    if (std::regex_match(line, m, row)) newest = m[1].str();
  }
  ASSERT_FALSE(newest.empty()) << kProtocolDoc << " has no table of versions";
  EXPECT_EQ(newest, code_version()) << "the newest version described in " << kProtocolDoc;
}

}  // namespace
}  // namespace tensorpc::rpc
