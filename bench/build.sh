#!/usr/bin/env bash
# Builds what the benches run on tf's side: tf-generate and serve in a Release build folder
# (CUDA off), and the standalone stream read bench (not part of the CMake build). Writes
# tf-build.txt there: the commit the binaries were built from (and whether the tree had
# uncommitted changes outside bench/), which the benches print.
#   bash bench/build.sh [outdir]      (default build-bench; JOBS=2)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${1:-$root/build-bench}"
mkdir -p "$out"
cmake -S "$root" -B "$out" -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=OFF >/dev/null
cmake --build "$out" --target tf-generate serve -j"${JOBS:-2}"
g++ -std=c++20 -O3 -march=native -pthread -Wall -Wextra -Werror \
  "$here/stream_bandwidth.cpp" -o "$out/stream_bandwidth"
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no -- . ':!bench' 2>/dev/null)" ]]; then
  commit="$commit with uncommitted changes"
fi
echo "$commit" >"$out/tf-build.txt"
echo "built $out/apps/tf-generate, $out/apps/serve, $out/stream_bandwidth (tf $commit)"
