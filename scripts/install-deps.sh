#!/bin/sh
# Installs what tensorpc needs to build, test and benchmark on Debian 12.
set -eu
# python3-numpy: tools/train, and the tests that load models written by its GGUF writer.
PACKAGES="cmake ninja-build g++ clang-14 libclang-rt-14-dev ccache libgtest-dev libbenchmark-dev libopenblas-dev libssl-dev libcli11-dev libpcre2-dev nlohmann-json3-dev libboost-dev libvulkan-dev glslc mesa-vulkan-drivers pkg-config python3 python3-numpy nodejs chromium curl"
# npm, for the serve tests' npm packages: Debian's nodejs lacks it, NodeSource's
# ships it and conflicts with Debian's npm package.
command -v npm >/dev/null 2>&1 || PACKAGES="$PACKAGES npm"
if dpkg -s $PACKAGES >/dev/null 2>&1; then exit 0; fi  # all there: no network needed
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $PACKAGES
