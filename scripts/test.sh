#!/bin/sh
# Installs, builds and runs the whole test suite: a release build, an
# ASan+UBSan build with the portable instruction set, and a TSan build.
# Every build also compiles the benchmarks, so they cannot rot.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
JOBS="$(nproc)"

run_suite() {  # name, extra cmake args...
  name="$1"
  shift
  echo "==> $name: configure and build"
  cmake -S . -B "build-$name" -G Ninja "$@" >/dev/null
  cmake --build "build-$name" -j "$JOBS"
  echo "==> $name: test"
  ctest --test-dir "build-$name" --output-on-failure -j "$JOBS" --timeout 600
}

run_suite release -DCMAKE_BUILD_TYPE=Release -DTENSORPC_WERROR=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_suite asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
  -DTENSORPC_SANITIZE=address,undefined -DTENSORPC_NATIVE=OFF -DTENSORPC_BUILD_BENCH=OFF
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  run_suite tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
  -DTENSORPC_SANITIZE=thread -DTENSORPC_BUILD_BENCH=OFF
echo "==> all test suites passed"
