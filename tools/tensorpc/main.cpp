// tensorpc: the command-line tool. One subcommand per job (`devices`, `run`,
// `chat`, `demo`, `bench`, `certs`, `quantize`, `perplexity`), each in a file
// of its own that adds itself to the app.
#include <CLI/CLI.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tensorpc/bench.h"
#include "tensorpc/certs.h"
#include "tensorpc/chat.h"
#include "tensorpc/demo.h"
#include "tensorpc/devices.h"
#include "tensorpc/perplexity.h"
#include "tensorpc/quantize.h"
#include "tensorpc/run.h"
#include "tensorpc/serve.h"
#include "tensorpc/version.h"

int main(int argc, char** argv) {
  CLI::App app{"tensorpc: tensor compute on this machine and on tensorpc servers", "tensorpc"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tensorpc ") + tensorpc::kProjectVersion + " (protocol " +
                                        tensorpc::kProtocolVersion + ")",
                       "print the version and the wire protocol's version, and exit");
  int exit_code = 0;
  tensorpc::tools::add_devices_command(app, &exit_code);
  tensorpc::tools::add_run_command(app, &exit_code);
  tensorpc::tools::add_chat_command(app, &exit_code);
  tensorpc::tools::add_serve_command(app, &exit_code);
  tensorpc::tools::add_demo_command(app, &exit_code);
  tensorpc::tools::add_bench_command(app, &exit_code);
  tensorpc::tools::add_certs_command(app, &exit_code);
  tensorpc::tools::add_quantize_command(app, &exit_code);
  tensorpc::tools::add_perplexity_command(app, &exit_code);
  // The common tools spell the system prompt `-sys` and a tensor override
  // `-ot`, which CLI11 would read as one-letter flags.
  const auto spelled = [](const char* arg) -> std::string {
    if (std::strcmp(arg, "-sys") == 0) return "--system-prompt";
    if (std::strcmp(arg, "-ot") == 0) return "--override-tensor";
    return arg;
  };
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.emplace_back(spelled(argv[i]));
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
