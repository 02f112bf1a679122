#!/usr/bin/env python3
"""Gemma 4 decode and prefill (issue 36): tf-generate against llama-bench (the same sdist) on a
random-weight GGUF in a real Gemma 4 model's shape (its config.json: the E2B's for the issue's
figure), alternating engine by engine over rounds, at 1 and 2 threads: prefill of --prefill
tokens and --decode-tokens decode tokens at depth 0, as bench/shapes.py measures the other
families. Target (the issue): at least Gemma 3's ratios, decode >= 1.5x, prefill >= 1.3x.

The file: every tensor the config implies (PLE, K=V, KV-shared layers, double-wide MLP, MoE) in
its real shape, random normal weights (std 0.02, norms 1, layer scalars 1), written tensor by
tensor in F16 (make_gemma4_tiny_gguf's names and metadata, its 512-token vocabulary padded with
[PADn] tokens to the model's vocabulary), then quantized by llama-quantize. --layers N keeps the
first N layers (the KV-shared ones counted from the end of the cut) where the full model does not
fit: both engines run the same cut file, and the table reports their ratio. An E2B holds about 5
billion parameters with its per-layer embedding table (2.3 billion of them): F16 about 10 GB,
Q8_0 about 5.5 GB. Made once under ~/.cache/tf-bench/gemma4/.

Usage: python3 bench/gemma4_speed.py --config e2b=path/config.json [--layers N]
           [--quants Q8_0 Q4_K_M] [--threads 1 2] [--rounds 2] [--build build-perf]
           [--make-only]"""
import argparse
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys

import numpy as np

root = pathlib.Path(__file__).resolve().parents[1]
cache = pathlib.Path(os.environ.get("TF_BENCH_CACHE") or os.path.expanduser("~/.cache/tf-bench"))
sdist = cache / "src" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
sys.path.insert(0, str(sdist / "gguf-py"))
sys.path.insert(0, str(root / "fixtures" / "scripts"))
import gguf  # noqa: E402
import make_gemma4_tiny_gguf as gg  # noqa: E402
import llama_bench  # noqa: E402  (bench/, next to this script)

ap = argparse.ArgumentParser()
ap.add_argument("--config", required=True, help="NAME=config.json")
ap.add_argument("--layers", type=int, help="keep the first N layers")
ap.add_argument("--quants", nargs="+", default=["Q8_0", "Q4_K_M"])
ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--prefill", type=int, default=512)
ap.add_argument("--decode-tokens", type=int, default=64)
ap.add_argument("--build", default=str(root / "build-perf"))
ap.add_argument("--llama", default=str(cache / "llama-gcc-native"))
ap.add_argument("--dir", default=str(cache / "gemma4"))
ap.add_argument("--make-only", action="store_true")
args = ap.parse_args()
llama_bin = pathlib.Path(args.llama) / "build" / "bin"
name, config_path = args.config.split("=", 1)


def text_config():
    cfg = json.loads(pathlib.Path(config_path).read_text())
    cfg = cfg.get("text_config", cfg)
    per = {k: dict(v) for k, v in (cfg.get("per_layer_config") or {}).items()}
    n = cfg["num_hidden_layers"]
    shared = cfg.get("num_kv_shared_layers") or 0
    if args.layers:  # a cut: the first layers, KV sharing kept in proportion at its end
        shared = round(shared * args.layers / n)
        n = args.layers
        cfg["layer_types"] = cfg["layer_types"][:n]
    for i, t in enumerate(cfg["layer_types"]):
        if t == "full_attention" and str(i) not in per:
            per[str(i)] = {"head_dim": cfg.get("global_head_dim", cfg["head_dim"]),
                           "num_key_value_heads": cfg.get("num_global_key_value_heads")
                           or cfg["num_key_value_heads"]}
    return dict(cfg, num_hidden_layers=n, num_kv_shared_layers=shared, per_layer_config=per)


def shapes(cfg):
    """(HF name, shape, kind) of every tensor, kind: "w" random, "n" ones."""
    h, n, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    ple = cfg.get("hidden_size_per_layer_input") or 0
    first_shared = n - cfg["num_kv_shared_layers"]
    out = [("model.embed_tokens.weight", (v, h), "w"), ("model.norm.weight", (h,), "n")]
    if ple:
        out += [("model.embed_tokens_per_layer.weight",
                 (cfg.get("vocab_size_per_layer_input") or v, n * ple), "w"),
                ("model.per_layer_model_projection.weight", (n * ple, h), "w"),
                ("model.per_layer_projection_norm.weight", (ple,), "n")]
    for i in range(n):
        hd, kv = gg.layer_shape(cfg, i)
        full = cfg["layer_types"][i] == "full_attention"
        p = f"model.layers.{i}."
        q = cfg["num_attention_heads"] * hd
        ff = cfg["intermediate_size"] * (2 if cfg.get("use_double_wide_mlp") and i >= first_shared
                                         else 1)
        out += [(p + "self_attn.q_proj.weight", (q, h), "w"),
                (p + "self_attn.o_proj.weight", (h, q), "w"),
                (p + "self_attn.q_norm.weight", (hd,), "n")]
        if i < first_shared:
            out += [(p + "self_attn.k_proj.weight", (kv * hd, h), "w"),
                    (p + "self_attn.k_norm.weight", (hd,), "n")]
            if not (full and cfg.get("attention_k_eq_v")):
                out.append((p + "self_attn.v_proj.weight", (kv * hd, h), "w"))
        for norm in ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"]:
            out.append((p + norm + ".weight", (h,), "n"))
        out += [(p + "mlp.gate_proj.weight", (ff, h), "w"), (p + "mlp.up_proj.weight", (ff, h), "w"),
                (p + "mlp.down_proj.weight", (h, ff), "w"), (p + "layer_scalar", (1,), "n")]
        if ple:
            out += [(p + "per_layer_input_gate.weight", (ple, h), "w"),
                    (p + "per_layer_projection.weight", (h, ple), "w"),
                    (p + "post_per_layer_input_norm.weight", (h,), "n")]
        if cfg.get("enable_moe_block"):
            e, mff = cfg["num_experts"], cfg["moe_intermediate_size"]
            out += [(p + "router.proj.weight", (e, h), "w"), (p + "router.scale", (h,), "n"),
                    (p + "router.per_expert_scale", (e,), "n"),
                    (p + "experts.gate_up_proj", (e, 2 * mff, h), "w"),
                    (p + "experts.down_proj", (e, h, mff), "w")]
            for norm in ["pre_feedforward_layernorm_2", "post_feedforward_layernorm_1",
                         "post_feedforward_layernorm_2"]:
                out.append((p + norm + ".weight", (h,), "n"))
    return out


class LazyState(dict):
    """A state dict whose tensors are made when read (F16 random normal or ones), so that the
    writer streams a model larger than memory one tensor at a time."""

    def __init__(self, items):
        super().__init__({k: (s, kind) for k, s, kind in items})
        self.rng = np.random.default_rng(36)

    def __getitem__(self, key):
        s, kind = super().__getitem__(key)
        if kind == "n":
            return np.ones(s, dtype=np.float32)
        return self.rng.standard_normal(s, dtype=np.float32).astype(np.float16) * np.float16(0.02)


def make_f16(cfg, path):
    vocab = gg.small_vocab()
    pad = cfg["vocab_size"] - len(vocab["tokens"])
    vocab = dict(vocab, tokens=vocab["tokens"] + [f"[PAD{i}]" for i in range(pad)],
                 scores=vocab["scores"] + [0.0] * pad, types=vocab["types"] + [1] * pad)
    gg.write_gguf(cfg, LazyState(shapes(cfg)), path, False, vocab=vocab, f16=True)


def ensure(cfg):
    d = pathlib.Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    tag = name + (f"-cut{args.layers}" if args.layers else "")
    f16 = d / f"{tag}-F16.gguf"
    if not f16.exists():
        make_f16(cfg, f16)
    files = []
    for q in args.quants:
        out = d / f"{tag}-{q}.gguf"
        if not out.exists():
            subprocess.run([str(llama_bin / "llama-quantize"), str(f16), str(out), q], check=True)
        files.append(out)
    return files


def prompt_ids(vocab, n):
    rng = random.Random(36)
    return [rng.randrange(600, vocab) for _ in range(n)]


LINE = re.compile(r"prompt (\d+) tokens in [0-9.]+ s \(([0-9.]+) tok/s\); decode (\d+) tokens in "
                  r"[0-9.]+ s \(([0-9.]+) tok/s\)")


def run_tf(path, vocab, threads):
    """(prefill tok/s, decode tok/s) from tf-generate's summary line, as bench/shapes.py."""
    out = []
    for n_prompt, n_predict in ((args.prefill, 1), (1, args.decode_tokens + 1)):
        cmd = [str(pathlib.Path(args.build) / "apps" / "tf-generate"), str(path), "--tokens",
               ",".join(map(str, prompt_ids(vocab, n_prompt))), "-n", str(n_predict),
               "--ignore-eos", "-q", "--threads", str(threads)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        m = LINE.search(r.stderr)
        if not m:
            sys.exit(f"tf-generate failed ({r.returncode}): {r.stderr[-2000:]}")
        out.append(float(m.group(2)) if n_predict == 1 else float(m.group(4)))
    return out


def run_llama(path, threads):
    return llama_bench.run(llama_bin, path, threads, args.prefill, args.decode_tokens)


cfg = text_config()
files = ensure(cfg)
if args.make_only:
    sys.exit(0)
samples = {}
for rnd in range(args.rounds):
    for q, path in zip(args.quants, files):
        for t in args.threads:
            for e in (["tf", "llama"] if rnd % 2 == 0 else ["llama", "tf"]):
                v = run_tf(path, cfg["vocab_size"], t) if e == "tf" else run_llama(path, t)
                samples.setdefault((q, t, e), []).append(v)
                print(f"round {rnd} {q} t={t} {e}: pp {v[0]:.1f} tg {v[1]:.2f}", flush=True)
print(f"| {name} | threads | tf pp | llama.cpp pp | pp ratio | tf tg | llama.cpp tg | tg ratio |")
print("|---|---|---|---|---|---|---|---|")
for q in args.quants:
    for t in args.threads:
        tf_pp, tf_tg = (statistics.median(x[i] for x in samples[(q, t, "tf")]) for i in (0, 1))
        ll_pp, ll_tg = (statistics.median(x[i] for x in samples[(q, t, "llama")]) for i in (0, 1))
        print(f"| {q} | {t} | {tf_pp:.1f} | {ll_pp:.1f} | {tf_pp / ll_pp:.2f}x | {tf_tg:.2f} | "
              f"{ll_tg:.2f} | {tf_tg / ll_tg:.2f}x |")
