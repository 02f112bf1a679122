#!/usr/bin/env bash
# Installs what is needed, then configures, builds and runs every test (plain, then ASan + UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=AUTO
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

# The sanitizer configuration: the same tests under AddressSanitizer and UBSan (CPU build).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTF_SANITIZE=ON -DTF_CUDA=OFF
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j"$jobs" -LE "compile_fail|consumer|bench")

# Fuzzing: every libFuzzer target (clang, ASan + UBSan) for TF_FUZZ_SECONDS (default 30) each,
# from the committed corpus (fuzz/; docs/reliability.md). A crash fails the run and leaves its
# input under build-fuzz/fuzz/artifacts/<target>/.
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTF_CUDA=OFF -DTF_FUZZ=ON -DTF_BUILD_TESTS=OFF -DTF_BUILD_APPS=OFF \
  -DTF_FUZZ_SECONDS="${TF_FUZZ_SECONDS:-30}"
cmake --build build-fuzz -j"$jobs"
(cd build-fuzz && ctest --output-on-failure -j"$jobs" -L '^fuzzing$')
