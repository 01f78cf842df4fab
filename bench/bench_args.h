// Command-line defaults shared by the Google Benchmark programs in bench/.
#pragma once

#include <cstring>
#include <vector>

namespace tensorpc::bench {

// argv with three repetitions and only their aggregates reported, unless the
// caller asked for repetitions itself: one noisy run should not decide a ratio.
inline std::vector<char*> with_default_repetitions(int argc, char** argv) {
  static char repetitions[] = "--benchmark_repetitions=3";
  static char aggregates[] = "--benchmark_report_aggregates_only=true";
  std::vector<char*> args(argv, argv + argc);
  bool given = false;
  for (int i = 1; i < argc; ++i) given |= std::strncmp(argv[i], "--benchmark_repetitions", 23) == 0;
  if (!given) {
    args.push_back(repetitions);
    args.push_back(aggregates);
  }
  return args;
}

}  // namespace tensorpc::bench
