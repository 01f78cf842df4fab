// Wrong values on the command line: the checks of tools/cli_checks.h, and
// what `tensorpc` and tensorpc-server say for out-of-range, fractional and
// not-a-number flags (a short message quoting the value and its bounds;
// CLI11's own ranges let "nan" through and print 309-digit bounds).
#include "cli_checks.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "server_process.h"
#include "tensorpc/bench.h"
#include "tensorpc/certs.h"
#include "tensorpc/demo.h"
#include "tensorpc/run.h"
#include "test_util.h"

// TENSORPC_SERVER_BINARY: the path of tensorpc-server, from tests/CMakeLists.txt.
namespace tensorpc::tools {
namespace {

using namespace std::chrono_literals;

using test::contains;

TEST(CliChecks, AWholeNumberWithinItsBounds) {
  const CliCheck check = whole_number(1, 100);
  for (const char* text : {"1", "2", "100"}) EXPECT_EQ(check(text), "") << text;
  for (const char* text : {"0", "101", "-1", "", "1.5", " 2", "2 ", "+2", "0x10", "nan", "99999999999999999999"}) {
    EXPECT_EQ(check(text), std::string("'") + text + "' is not a whole number from 1 to 100") << text;
  }
}

TEST(CliChecks, AFiniteNumberThatTheRuleAccepts) {
  const CliCheck check = finite_number("a number > 0", [](double x) { return x > 0; });
  for (const char* text : {"1", "0.5", "1e-3", "3.25"}) EXPECT_EQ(check(text), "") << text;
  for (const char* text : {"0", "-1", "nan", "inf", "-inf", "", "1x", "1e999"}) {
    EXPECT_EQ(check(text), std::string("'") + text + "' is not a number > 0") << text;
  }
}

// The `tensorpc` app as main() makes it; the error CLI11 throws for `args`,
// or "" when they parse (which runs no command: each fails validation first
// or is not given).
std::string parse_error(std::vector<std::string> args) {
  CLI::App app;
  app.require_subcommand(1);
  int exit_code = 0;
  add_run_command(app, &exit_code);
  add_demo_command(app, &exit_code);
  add_bench_command(app, &exit_code);
  add_certs_command(app, &exit_code);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last-first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(CommandLine, OutOfRangeAndNotANumberFlagsAreShortErrorsQuotingTheValue) {
  const std::vector<std::string> run = {"run", "-m", "/nonexistent.gguf", "-p", "x"};
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"-n", "0"}, "'0' is not a whole number from 1 to 2147483647"},
      {{"-n", "99999999999"}, "'99999999999' is not a whole number from 1"},
      {{"--ctx", "-1"}, "'-1' is not a whole number from 0"},
      {{"--top-k", "2.5"}, "'2.5' is not a whole number from 0"},
      {{"--top-p", "nan"}, "'nan' is not a number in (0, 1]"},
      {{"--top-p", "0"}, "'0' is not a number in (0, 1]"},
      {{"--temp", "-1"}, "'-1' is not a finite number ≥ 0"},
      {{"--repeat-penalty", "inf"}, "'inf' is not a finite number > 0"},
      {{"--min-p", "1.5"}, "'1.5' is not a number in [0, 1]"},
      {{"-c", "-1"}, "'-1' is not a whole number from 0"},
      {{"-s", "x"}, "'x' is not a whole number from 0"},
      {{"--seed", "-1"}, "'-1' is not a whole number from 0 to 9223372036854775807"},
      {{"-t", "5000"}, "'5000' is not a whole number from 0 (every core) to 4096"},
      {{"--lookup", "--draft-max", "0"}, "'0' is not a whole number from 1 to 64"},
      {{"--draft-max", "4"}, "--draft-max: requires --lookup or --draft-model"},
      {{"--draft-device", "cpu"}, "--draft-device requires --draft-model"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = run;
    args.insert(args.end(), c.args.begin(), c.args.end());
    const std::string error = parse_error(args);
    EXPECT_TRUE(contains(error, c.says)) << c.args[0] << " " << c.args[1] << ": " << error;
    EXPECT_LT(error.size(), 200u) << error;
  }
  EXPECT_TRUE(contains(parse_error({"run", "-m", "/nonexistent.gguf"}), "-p TEXT or -f FILE"));
  EXPECT_TRUE(contains(parse_error({"run", "-m", "/nonexistent.gguf", "-p", "x", "--device", "cpu,gpu"}),
                       "unknown local device 'gpu': expected cpu, vulkan or vulkan:N"));
  EXPECT_TRUE(contains(parse_error({"run", "-m", "/nonexistent.gguf", "-p", "x", "--rpc", "127.0.0.1:1", "--device",
                                    "vulkan", "--no-local"}),
                       "excludes"));
  EXPECT_TRUE(contains(parse_error({"run", "-m", "/nonexistent.gguf", "-p", "x", "-f", "/tmp/x"}), "excludes"));
  EXPECT_TRUE(contains(parse_error({"demo", "-n", "0"}), "'0' is not a whole number from 1"));
  EXPECT_TRUE(contains(parse_error({"bench", "-r", "-1"}), "'-1' is not a whole number from 0 to 1000"));
  EXPECT_TRUE(contains(parse_error({"bench", "-n", "x"}), "'x' is not a whole number from 0"));
  EXPECT_TRUE(contains(parse_error({"certs", "/tmp/unused", "--host", "a", "--days", "0"}),
                       "'0' is not a whole number from 1 to 36500"));
}

TEST(ServerCommandLine, NotANumberAndNegativeLimitsAreUsageErrors) {
  for (const auto& [flag, value, says] :
       {std::tuple<const char*, const char*, const char*>{"--io-timeout", "nan",
                                                          "'nan' is not a number of seconds from 0"},
        {"--io-timeout", "-1", "'-1' is not a number of seconds from 0"},
        {"--max-session-buffers", "-1", "'-1' is not a whole number from 0"},
        {"--models", "/nonexistent/tensorpc-models", "--models /nonexistent/tensorpc-models: not a directory"}}) {
    auto server = ServerProcess::start(TENSORPC_SERVER_BINARY, {flag, value}, 10s);
    ASSERT_FALSE(server.ok()) << flag << " " << value << " was accepted";
    const std::string message = server.status().message();
    EXPECT_TRUE(contains(message, "exited with status 2")) << message;
    EXPECT_TRUE(contains(message, says)) << message;
  }
}

}  // namespace
}  // namespace tensorpc::tools
