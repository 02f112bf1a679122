"""llama-bench as the shape benches run it: one file, one thread count, one repetition."""
import json
import pathlib
import subprocess
import sys


def run(bin_dir, path, threads, prefill, decode_tokens, depth=0):
    """[prefill tok/s of `prefill` tokens at depth 0, decode tok/s of `decode_tokens` at `depth`]."""
    pp = tg = None
    base = [str(pathlib.Path(bin_dir) / "llama-bench"), "-m", str(path), "-t", str(threads),
            "-r", "1", "-o", "jsonl"]
    # llama-bench's -d puts every test at that depth: the decode at depth runs on its own.
    cmds = ([base + ["-p", str(prefill), "-n", str(decode_tokens)]] if not depth else
            [base + ["-p", str(prefill), "-n", "0"],
             base + ["-p", "0", "-n", str(decode_tokens), "-d", str(depth)]])
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True)
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                j = json.loads(line)
                if j["n_prompt"] > 0:
                    pp = j["avg_ts"]
                else:
                    tg = j["avg_ts"]
    if pp is None or tg is None:
        sys.exit(f"llama-bench failed ({r.returncode}): {r.stderr[-2000:]}")
    return [pp, tg]
