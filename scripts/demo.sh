#!/bin/sh
# Installs, builds and runs the main job: a graph computed on the CPU device.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target tensorpc-hello
./build/tools/tensorpc-hello
