#!/usr/bin/env bash
# Installs what is needed, then configures, builds and runs every test (plain, with the CUDA
# backend where nvcc is installed), the server-side modules under ASan + UBSan, then the fuzzers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

jobs=$(nproc)
# With nvcc on the machine the CUDA backend is built too (no GPU needed), so a change that
# breaks it fails here; its GPU tests skip without a device and say so.
cuda=AUTO
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=ON
  command -v nvcc >/dev/null 2>&1 || export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTF_CUDA="$cuda"
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

# The sanitizer configuration: under AddressSanitizer and UBSan, the modules that take outside
# input or own lifetimes (parsers, server, ledger, engine); the numeric forwards and kernels are
# checked bit for bit in the plain stage and by the fuzzers' ASan builds of what reads files, and
# the real-model live tests, the browser test, generate() on the real model and the verify-row
# check over every fixture (a numeric forward) are the plain stage's (the toy-model live tests and
# the drafts' lane-host tests run here).
asan_modules=(core engine backend kv memory model serve jinja tokenizer grammar sample)
mapfile -t asan_targets < <(cd tests && find "${asan_modules[@]}" -name '*_test.cpp' |
  sed -E 's#_test\.cpp$##; s#/#_#g; s#^#test_#' |
  grep -vxE 'test_serve_live_(server|api|eval|drafts)|test_serve_web_page_live|test_engine_loaded_model|test_engine_draft_rows' | sort)
# -O0 -g1: line tables are all a sanitizer report needs, and unoptimized code builds in half the
# time; the serve binary, whose tests run real forwards, and the Jinja limits test, which runs the
# interpreter for millions of steps, keep -O1. One bundle target, so make builds them in parallel.
asan_bundle="serve;toy_serve;tf-memory;tf-inspect;$(IFS=';'; echo "${asan_targets[*]}")"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTF_SANITIZE=ON -DTF_CUDA=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" "-DTF_O1_TARGETS=serve;test_jinja_limits" \
  "-DTF_BUNDLE_TARGETS=$asan_bundle"
cmake --build build-asan -j"$jobs" --target tf_bundle
label_regex="^($(IFS='|'; echo "${asan_modules[*]}"))(/|\$)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j"$jobs" -L "$label_regex" \
     -E '^(serve/live_(server|api|eval|drafts)|serve/web_page_live|engine/loaded_model|engine/draft_rows)$')

# Fuzzing: every libFuzzer target (clang, ASan + UBSan) for TF_FUZZ_SECONDS (default 30) each,
# from the committed corpus (fuzz/; docs/reliability.md). A crash fails the run and leaves its
# input under build-fuzz/fuzz/artifacts/<target>/.
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTF_CUDA=OFF -DTF_FUZZ=ON -DTF_BUILD_TESTS=OFF -DTF_BUILD_APPS=OFF \
  -DTF_FUZZ_SECONDS="${TF_FUZZ_SECONDS:-30}"
cmake --build build-fuzz -j"$jobs"
(cd build-fuzz && ctest --output-on-failure -j"$jobs" -L '^fuzzing$')
