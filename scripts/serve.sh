#!/usr/bin/env bash
# Installs what is needed, builds Release, then serves the default model (or what "$@" says).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=AUTO
cmake --build build -j"$(nproc)" --target serve
if [ "$#" -eq 0 ]; then set -- --port 8080; fi
exec build/apps/serve "$@"
