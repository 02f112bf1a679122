#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the llama-cpp-python sdist that matches the installed wheel,
# so the serving bench compares tf against the same llama.cpp the Python oracle uses.
set -euo pipefail
build_root="${1:-/tmp/llama-build}"
jobs="${JOBS:-2}"
version="$(python3 -c 'import llama_cpp; print(llama_cpp.__version__)')"
mkdir -p "$build_root"
cd "$build_root"
sdist="llama_cpp_python-${version}.tar.gz"
if [[ ! -f "$sdist" ]]; then
  pip download --no-binary :all: --no-deps "llama-cpp-python==${version}" -d "$build_root"
fi
src="$build_root/llama_cpp_python-${version}/vendor/llama.cpp"
[[ -d "$src" ]] || tar xzf "$sdist"
# LLAMA_CMAKE_ARGS adds flags, e.g. "-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AMX_INT8=OFF" where
# the native build's AMX path crashes.
# shellcheck disable=SC2086
cmake -S "$src" -B "$build_root/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF ${LLAMA_CMAKE_ARGS:-}
cmake --build "$build_root/build" --target llama-server -j"$jobs"
echo "$build_root/build/bin/llama-server"
