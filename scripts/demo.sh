#!/bin/sh
# Installs, builds and runs the main job: `tensorpc demo` starts two
# tensorpc-server processes on loopback ports (two CPU devices each), spreads
# the bundled model models/kjv-tiny.gguf over those four devices, generates
# text from them, and checks it equals the text the local CPU alone generates.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
if [ ! -f models/kjv-tiny.gguf ]; then
  echo "demo: models/kjv-tiny.gguf is missing; make it with tools/train/make_model.sh (see tools/train/README.md)" >&2
  exit 1
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target tensorpc-cli tensorpc-server
./build/tools/tensorpc demo "$@"
