// `tensorpc bench`: the command line of the performance report. The figures,
// their defaults and the report are the bench lab's (bench/lab/bench_command.h);
// here are its flags, parsed into BenchOptions, and the idle cores held awake
// for a run when asked.
#pragma once

#include <cstdio>
#include <string>

#include "lab/bench_command.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

// The bench lab's bench_command(), with idle cores held awake for the whole
// run — the baselines and tensorpc's figures alike — through `awake_cores`,
// the CPU latency file (awake_cores.h; empty: not asked). A request that
// cannot be made stops the bench before it measures anything: exit code 1.
int bench_with_awake_cores(BenchOptions options, const std::string& awake_cores, std::FILE* out, std::FILE* err);

// Adds the `bench` subcommand; when it runs, its exit code goes to *exit_code.
void add_bench_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
