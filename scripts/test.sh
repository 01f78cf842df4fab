#!/bin/sh
# Installs, builds and runs the whole test suite: a release build, an
# ASan+UBSan build with the portable instruction set, a TSan build, and short
# runs of every libFuzzer target over its seed corpus. The release build also
# compiles the benchmarks, so they cannot rot.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
JOBS="$(nproc)"
# ccache keys by paths relative to the checkout, so a clone in another folder
# (as CI makes) reuses what an earlier build compiled.
export CCACHE_BASEDIR="$(pwd)" CCACHE_NOHASHDIR=1

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
echo "==> fuzz: configure and build"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
  -DTENSORPC_FUZZ=ON -DTENSORPC_BUILD_TESTS=OFF -DTENSORPC_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$JOBS" --target graph_decode_fuzz messages_fuzz gguf_fuzz session_fuzz model_fuzz \
  serve_request_fuzz http_front_fuzz grammar_fuzz
FUZZ_SECONDS="${TENSORPC_FUZZ_SECONDS:-60}"
for target in graph_decode_fuzz messages_fuzz gguf_fuzz session_fuzz model_fuzz serve_request_fuzz http_front_fuzz \
    grammar_fuzz; do
  echo "==> fuzz: $target for ${FUZZ_SECONDS}s"
  work="$(mktemp -d)"  # new inputs and any crash go here; the committed corpus stays as it is
  mkdir "$work/corpus"
  if ! ./build-fuzz/fuzz/$target -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 \
      -artifact_prefix="$work/" "$work/corpus" "fuzz/corpus/$target" >"$work/log" 2>&1; then
    tail -60 "$work/log"
    for input in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do  # the input, to replay it elsewhere
      [ -f "$input" ] && { echo "==> $(basename "$input") (base64):"; base64 "$input"; }
    done
    echo "==> fuzz: $target found a crash (input kept in $work)"
    exit 1
  fi
  grep -E "stat::number_of_executed_units" "$work/log"
  rm -rf "$work"
done
echo "==> all test suites passed"
