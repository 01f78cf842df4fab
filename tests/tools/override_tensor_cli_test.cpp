// `--override-tensor REGEX=DEVICE` (also `-ot`) on the command line: the
// flag's parsing (split at the last '='; no '=', an empty side or a bad
// regex refused, naming the flag), and `tensorpc run` with it: the placement
// table shows the override, and a pattern that matches nothing or a device
// that does not exist ends the command with exit 1 before anything loads.
#include <gtest/gtest.h>

#include <string>

#include "file_util.h"
#include "model_setup.h"
#include "test_util.h"

namespace tensorpc::tools {
namespace {

using test::contains;

TEST(ParseTensorOverride, SplitsAtTheLastEqualsSign) {
  const auto parsed = [](const std::string& text) {
    auto r = parse_tensor_override(text);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value().pattern + " | " + r.value().device : std::string();
  };
  EXPECT_EQ(parsed("exps=cpu"), "exps | cpu");
  EXPECT_EQ(parsed("blk\\.(1[0-9])\\.ffn_.*_exps=127.0.0.1:50052/cpu0"),
            "blk\\.(1[0-9])\\.ffn_.*_exps | 127.0.0.1:50052/cpu0");
  EXPECT_EQ(parsed("ffn_(?=up)=vulkan:0"), "ffn_(?=up) | vulkan:0");
}

TEST(ParseTensorOverride, RejectsWhatIsNotRegexEqualsDevice) {
  struct Case {
    std::string text, says;
  };
  for (const Case& c : {Case{"exps", "no '='"}, Case{"=cpu", "empty REGEX"}, Case{"exps=", "empty DEVICE"},
                        Case{"blk.(1=cpu", "not a regular expression: "}}) {
    auto r = parse_tensor_override(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_TRUE(contains(r.status().message(), "--override-tensor '" + c.text + "'")) << r.status().to_string();
    EXPECT_TRUE(contains(r.status().message(), c.says)) << r.status().to_string();
  }
}

// `tensorpc run` on the bundled model with `args`: the exit status and what
// it wrote (stdout and stderr).
std::pair<int, std::string> run_tensorpc(const std::string& args) {
  const std::string command = std::string(TENSORPC_CLI_BINARY) + " run -m " + TENSORPC_SOURCE_DIR +
                              "/models/kjv-tiny.gguf -p 'In the beginning' -n 4 --temp 0 -t 1 --local-only " + args +
                              " 2>&1";
  return test::run_command(command);
}

TEST(RunCommand, TheShortFlagPutsTensorsOnADeviceAndThePlacementTableShowsIt) {
  const auto [code, out] = run_tensorpc("-ot 'ffn_(up|down)=cpu'");
  ASSERT_EQ(code, 0) << out;
  const size_t header = out.find("\noverride ");
  ASSERT_NE(header, std::string::npos) << out;
  const size_t row = out.find('\n', header + 1) + 1;
  const std::string line = out.substr(row, out.find('\n', row) - row);
  EXPECT_EQ(line.rfind("ffn_(up|down) ", 0), 0u) << out;
  EXPECT_TRUE(contains(line, " cpu ")) << out;
  EXPECT_TRUE(contains(line, " 8 ")) << out;  // up and down of 4 layers
  EXPECT_TRUE(contains(out, "In the beginning")) << out;
}

TEST(RunCommand, AnOverrideThatMatchesNothingOrNamesNoDeviceEndsTheCommandBeforeTheUpload) {
  {
    const auto [code, out] = run_tensorpc("--override-tensor exps=cpu");
    EXPECT_EQ(code, 1) << out;
    EXPECT_TRUE(contains(out, "tensor override 'exps=cpu': the pattern matches no tensor")) << out;
    EXPECT_FALSE(contains(out, "loading weights")) << out;
  }
  {
    const auto [code, out] = run_tensorpc("-ot ffn_=gpu0");
    EXPECT_EQ(code, 1) << out;
    EXPECT_TRUE(contains(out, "no device is named 'gpu0' (the devices: cpu)")) << out;
    EXPECT_FALSE(contains(out, "loading weights")) << out;
  }
  {
    const auto [code, out] = run_tensorpc("-ot ffn_");  // a usage error, as every malformed flag
    EXPECT_EQ(code, 2) << out;
    EXPECT_TRUE(contains(out, "--override-tensor 'ffn_': no '='")) << out;
  }
}

}  // namespace
}  // namespace tensorpc::tools
