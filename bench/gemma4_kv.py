#!/usr/bin/env python3
"""Gemma 4's KV memory per token of context (issue 36): tf against llama.cpp's own figure for the
same GGUF, for each config.json given (a real Gemma 4 model's, e.g. the 31B's and the E2B's; the
multimodal wrapper's text_config is taken).

KV memory depends only on the layers' attention shapes, so each config becomes a GGUF with its
real layer count, sliding/full pattern, KV heads and head dims, K=V and KV-shared layers, and
tiny everything else (hidden 64 per head group, MLP 64, vocabulary 512, random weights): both
engines open the same file. tf's figure is engine::kv_bytes_per_token (bench/gemma4_kv_tf.cpp,
what its ledger, start-up line and budget count); llama.cpp's is the sum of the KV buffers it
logs for a context of --context cells with f16 K and V (bench/llama_kv_size.cpp), divided by the
cells. llama.cpp keeps every position on sliding layers by default (a full-size SWA cache), as
tf does; with --swa-window its window-only figure would be lower. No timings: this runs in a
second. Target (the issue): tf at most llama.cpp's figure.

Usage: python3 bench/gemma4_kv.py --config 31b=path/config.json e2b=path/config.json
           [--context 4096] [--llama ~/.cache/tf-bench/llama-gcc-native]"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

root = pathlib.Path(__file__).resolve().parents[1]
cache = pathlib.Path(os.environ.get("TF_BENCH_CACHE") or os.path.expanduser("~/.cache/tf-bench"))
sdist = cache / "src" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
sys.path.insert(0, str(sdist / "gguf-py"))
sys.path.insert(0, str(root / "fixtures" / "scripts"))
import make_gemma4_tiny_gguf as gg  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--config", nargs="+", required=True, help="NAME=config.json")
ap.add_argument("--context", type=int, default=4096)
ap.add_argument("--llama", default=str(cache / "llama-gcc-native"))
args = ap.parse_args()


def small_model(cfg):
    """A state dict with cfg's attention shapes and tiny widths elsewhere."""
    rng = np.random.default_rng(0)
    h, ff, vocab = 64, 64, 512
    n = cfg["num_hidden_layers"]
    first_shared = n - cfg.get("num_kv_shared_layers", 0)
    sd = {"model.embed_tokens.weight": rng.normal(0, 0.02, (vocab, h)),
          "model.norm.weight": np.ones(h)}
    for i in range(n):
        hd, kv = gg.layer_shape(cfg, i)
        full = cfg["layer_types"][i] == "full_attention"
        p = f"model.layers.{i}."
        q = cfg["num_attention_heads"] * hd
        sd[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.02, (q, h))
        sd[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.02, (h, q))
        sd[p + "self_attn.q_norm.weight"] = np.ones(hd)
        if i < first_shared:
            sd[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.02, (kv * hd, h))
            sd[p + "self_attn.k_norm.weight"] = np.ones(hd)
            if not (full and cfg.get("attention_k_eq_v")):
                sd[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.02, (kv * hd, h))
        for norm in ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"]:
            sd[p + norm + ".weight"] = np.ones(h)
        sd[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.02, (ff, h))
        sd[p + "mlp.up_proj.weight"] = rng.normal(0, 0.02, (ff, h))
        sd[p + "mlp.down_proj.weight"] = rng.normal(0, 0.02, (h, ff))
        sd[p + "layer_scalar"] = np.ones(1)
    return sd, vocab


def text_config(path):
    cfg = json.loads(pathlib.Path(path).read_text())
    cfg = cfg.get("text_config", cfg)
    # Real configs name the full layers' shapes as global_head_dim / num_global_key_value_heads;
    # layer_shape reads per_layer_config.
    per = cfg.get("per_layer_config") or {}
    for i, t in enumerate(cfg["layer_types"]):
        if t == "full_attention" and str(i) not in per:
            per[str(i)] = {"head_dim": cfg.get("global_head_dim", cfg["head_dim"]),
                           "num_key_value_heads": cfg.get("num_global_key_value_heads")
                           or cfg["num_key_value_heads"]}
    cfg["per_layer_config"] = per
    return cfg


with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    llama = pathlib.Path(args.llama) / "build"
    libs = ["src/libllama.a", "ggml/src/libggml.a", "ggml/src/libggml-cpu.a",
            "ggml/src/libggml-base.a"]
    subprocess.run(["g++", "-O1", "-std=c++17", f"-I{sdist}/include", f"-I{sdist}/ggml/include",
                    str(root / "bench" / "llama_kv_size.cpp"), "-o", str(tmp / "llama_kv_size")]
                   + [str(llama / lib) for lib in libs] + ["-fopenmp", "-lpthread", "-ldl"],
                   check=True)
    subprocess.run(["g++", "-O1", "-std=c++20", f"-I{root}", f"-I{root}/include",
                    str(root / "bench" / "gemma4_kv_tf.cpp"), "-o", str(tmp / "gemma4_kv_tf"),
                    "-lfmt", "-lpthread"], check=True)
    print(f"| config | layers (KV-holding) | tf f16 bytes/token | llama.cpp f16 bytes/token "
          f"(context {args.context}) | tf / llama.cpp |")
    print("|---|---|---|---|---|")
    for item in args.config:
        name, path = item.split("=", 1)
        cfg = text_config(path)
        sd, vocab = small_model(cfg)
        cfg = dict(cfg, vocab_size=vocab, hidden_size=64, intermediate_size=64,
                   use_double_wide_mlp=False, enable_moe_block=False,
                   hidden_size_per_layer_input=0)
        model = tmp / f"{name}.gguf"
        gg.write_gguf(cfg, sd, model, False, no_vocab=True)
        tf_out = subprocess.run([str(tmp / "gemma4_kv_tf"), str(model)], capture_output=True,
                                text=True, check=True).stdout
        tf_f16 = int(re.search(r"f16 (\d+)", tf_out).group(1))
        log = subprocess.run([str(tmp / "llama_kv_size"), str(model), str(args.context)],
                             capture_output=True, text=True, check=True).stderr
        mib = [float(m) for m in re.findall(r"llama_kv_cache: size = +([\d.]+) MiB", log)]
        if not mib:
            sys.exit("llama.cpp logged no KV buffer size:\n" + log)
        llama_per_token = sum(mib) * 1024 * 1024 / args.context
        n = cfg["num_hidden_layers"]
        holding = n - cfg.get("num_kv_shared_layers", 0)
        print(f"| {name} | {n} ({holding}) | {tf_f16} | {llama_per_token:.0f} | "
              f"{tf_f16 / llama_per_token:.3f} |")
