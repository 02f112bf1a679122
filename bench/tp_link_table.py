#!/usr/bin/env python3
"""What a link allows per token at tensor parallelism, from a measured all-reduce cost.

Each layer ends its attention and its MLP with a row-parallel matmul and so an all-reduce of
rows x hidden f32 (two per layer per row). tf's all-reduce is an all-gather then a rank-order
sum: each rank sends its block to each of the N-1 others and receives theirs, so per all-reduce a
rank's link carries (N-1) x rows x hidden x 4 bytes each way. A token's time on the link:

    2 x layers x (overhead + (N-1) x hidden x 4 x 8 / link_bits_per_s)

where `overhead` is the per-call cost measured by bench/allreduce.cpp (the MPI stack's software
path at one row; the wire's own latency comes on top, see docs/tensor-parallel.md).

    python3 bench/tp_link_table.py --overhead-us 640=4.1 5120=9.0
"""
import argparse

MODELS = [("Gemma 3 270M (default)", 640, 18), ("GLM-4.5 shapes", 5120, 92)]
LINKS_GBPS = [1, 10, 100]
RANKS = [2, 4, 8]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--overhead-us", nargs="+", required=True,
                   help="hidden=microseconds per one-row all-reduce, measured")
    a = p.parse_args()
    overhead = {int(k): float(v) for k, v in (s.split("=") for s in a.overhead_us)}
    print("| model | TP | bytes per token per rank (each way) | "
          + " | ".join(f"{g} Gb/s: ms/token (tok/s ceiling)" for g in LINKS_GBPS) + " |")
    print("|---|---|---|" + "---|" * len(LINKS_GBPS))
    for name, hidden, layers in MODELS:
        for n in RANKS:
            per_call_bytes = (n - 1) * hidden * 4
            per_token = 2 * layers * per_call_bytes
            cells = []
            for g in LINKS_GBPS:
                wire_s = per_call_bytes * 8 / (g * 1e9)
                token_s = 2 * layers * (overhead[hidden] * 1e-6 + wire_s)
                cells.append(f"{token_s * 1e3:.2f} ({1 / token_s:,.0f})")
            print(f"| {name}: hidden {hidden}, {layers} layers | {n} | {per_token:,} | "
                  + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
