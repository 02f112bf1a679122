#!/usr/bin/env python3
"""Writes the synthetic seeds of fuzz/corpus/ that no fixture provides: small GGUFs carrying a
tokenizer (BPE and SentencePiece) and a family's hyper-parameter keys, and a small tokenizer.json.
The other seeds are copies of fixtures/ files or hand-written (see docs/reliability.md).
Standard library only; run from anywhere."""
import json
import pathlib
import struct

here = pathlib.Path(__file__).resolve().parent / "corpus"

U32, I32, F32, BOOL, STR, ARR, U64 = 4, 5, 6, 7, 8, 9, 10


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val, elem=None):
    out = s(key) + struct.pack("<I", typ)
    if typ == ARR:
        out += struct.pack("<IQ", elem, len(val))
        for v in val:
            out += scalar(elem, v)
    else:
        out += scalar(typ, val)
    return out


def scalar(typ, v):
    return {U32: lambda: struct.pack("<I", v), I32: lambda: struct.pack("<i", v),
            F32: lambda: struct.pack("<f", v), BOOL: lambda: struct.pack("<B", v),
            STR: lambda: s(v), U64: lambda: struct.pack("<Q", v)}[typ]()


def gguf(kvs, tensors):
    """tensors: (name, dims, ggml type, bytes) with f32 = type 0."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, data, off = b"", b"", 0
    for name, dims, typ, raw in tensors:
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(
            struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", typ, off)
        pad = (-len(raw)) % 32
        data += raw + b"\0" * pad
        off += len(raw) + pad
    body = head + infos
    body += b"\0" * ((-len(body)) % 32)
    return body + data


def bpe_gguf():
    # Byte-level BPE: GPT-2's byte alphabet for printable ASCII, a few merges, two specials.
    toks = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a", "he", "ll", "hell", "hello",
                                               "\u0120w", "<|im_start|>", "<|im_end|>"]
    merges = ["h e", "l l", "he ll", "hell o", "\u0120 w"]
    types = [1] * (len(toks) - 2) + [3, 3]
    kvs = [kv("general.architecture", STR, "qwen3"),
           kv("qwen3.embedding_length", U32, 8), kv("qwen3.block_count", U32, 1),
           kv("qwen3.feed_forward_length", U32, 16), kv("qwen3.attention.head_count", U32, 2),
           kv("qwen3.attention.head_count_kv", U32, 1), kv("qwen3.context_length", U32, 64),
           kv("tokenizer.ggml.model", STR, "gpt2"), kv("tokenizer.ggml.pre", STR, "qwen2"),
           kv("tokenizer.ggml.tokens", ARR, toks, STR),
           kv("tokenizer.ggml.token_type", ARR, types, I32),
           kv("tokenizer.ggml.merges", ARR, merges, STR),
           kv("tokenizer.ggml.eos_token_id", U32, len(toks) - 1)]
    emb = struct.pack("<" + "f" * 8 * len(toks), *([0.5] * 8 * len(toks)))
    return gguf(kvs, [("token_embd.weight", [8, len(toks)], 0, emb)])


def spm_gguf():
    toks = ["<unk>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>"] + [
        "<0x%02X>" % b for b in range(256)] + ["\u2581", "\u2581a", "b", "ab", "\u2581hello"]
    types = [2, 3, 3, 3, 3] + [6] * 256 + [1] * 5
    scores = [0.0] * (len(toks) - 5) + [-1.0, -2.0, -3.0, -4.0, -5.0]
    kvs = [kv("general.architecture", STR, "gemma3"),
           kv("gemma3.embedding_length", U32, 4), kv("gemma3.block_count", U32, 1),
           kv("gemma3.feed_forward_length", U32, 8), kv("gemma3.attention.head_count", U32, 1),
           kv("gemma3.attention.sliding_window", U32, 4),
           kv("tokenizer.ggml.model", STR, "llama"), kv("tokenizer.ggml.tokens", ARR, toks, STR),
           kv("tokenizer.ggml.scores", ARR, scores, F32),
           kv("tokenizer.ggml.token_type", ARR, types, I32),
           kv("tokenizer.ggml.bos_token_id", U32, 1), kv("tokenizer.ggml.eos_token_id", U32, 2),
           kv("tokenizer.ggml.add_bos_token", BOOL, 1)]
    emb = struct.pack("<" + "f" * 4 * len(toks), *([0.25] * 4 * len(toks)))
    return gguf(kvs, [("token_embd.weight", [4, len(toks)], 0, emb)])


def tokenizer_json():
    vocab = {chr(c): c - 33 for c in range(33, 127)}
    vocab.update({"\u0120": 94, "he": 95, "ll": 96, "hell": 97})
    return {
        "model": {"type": "BPE", "vocab": vocab, "merges": ["h e", ["l", "l"], "he ll"]},
        "added_tokens": [{"id": 98, "content": "<|im_end|>", "special": True},
                         {"id": 99, "content": "<tool>", "special": False}],
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": (
                "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?"
                "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")}},
            {"type": "ByteLevel", "use_regex": False}]},
        "bos_token": "<|im_end|>", "eos_token": {"content": "<|im_end|>"}, "add_bos_token": True,
    }


(here / "gguf").mkdir(parents=True, exist_ok=True)
(here / "gguf" / "seed-bpe-qwen3.gguf").write_bytes(bpe_gguf())
(here / "gguf" / "seed-spm-gemma3.gguf").write_bytes(spm_gguf())
(here / "hf_config").mkdir(parents=True, exist_ok=True)
(here / "hf_config" / "seed-tokenizer.json").write_text(json.dumps(tokenizer_json()))
