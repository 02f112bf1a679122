#!/usr/bin/env bash
# Builds the standalone benchmarks (not part of the CMake build): bash bench/build.sh [outdir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../build-bench}"
mkdir -p "$out"
g++ -std=c++20 -O3 -march=native -pthread -Wall -Wextra -Werror \
  "$here/stream_bandwidth.cpp" -o "$out/stream_bandwidth"
echo "built $out/stream_bandwidth (run: $out/stream_bandwidth [threads...], default 1 2)"
