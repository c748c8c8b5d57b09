#!/usr/bin/env python3
"""What a Q tile costs apart from its blocks: stage 12 under block masks that give every Q tile
exactly k blocks, on one GPU.

The density line (masks.py) charges a mask the dense time times the fraction of blocks it
keeps. A kernel whose Q tiles each cost a fixed c besides t per visited block sits above that
line by (k + c/t) / (k + c/t · k/K) at k of K blocks a tile, most at small k. This script
measures c/t: for k = 1, 2, ..., K it times two masks of k blocks in every block row,

  same     the first k K/V tiles for every Q tile (every Q tile of a head reads the same K, V)
  random   k K/V tiles drawn at random for each Q tile (the K/V tiles scattered, as masks.py's)

and fits time = a + b·k to each by least squares: c/t = a/b, in blocks. If the two fits
agree, the fixed cost is the Q tile's own work; if `random` lies above `same`, the scattered
K/V reads cost besides. Usage (needs PyTorch with CUDA and fa_stages built with stage 12):

    PYTHONPATH=build/python python3 benchmarks/masks_per_tile.py > masks_per_tile.txt
"""
import argparse
import statistics

import torch

import fa_stages
from masks import SHAPES, BLOCK, time_ms


def fit(ks, ts):
    """Least-squares a, b of t = a + b·k."""
    n = len(ks)
    mk, mt = sum(ks) / n, sum(ts) / n
    b = sum((k - mk) * (t - mt) for k, t in zip(ks, ts)) / sum((k - mk) ** 2 for k in ks)
    return mt - b * mk, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="d64,d128")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    ap.add_argument("--ks", default="1,2,3,4,6,8,12,16,24,32")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true",
                    help="no timing: each mask's plan called twice (the first makes its schedule), for a profiler")
    args = ap.parse_args()
    dev = torch.device("cuda")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    print("device: %s (PyTorch %s)" % (torch.cuda.get_device_name(dev), torch.__version__))
    print("each time: GPU time of one call, the median of 3 turns of %d rounds of 10 calls (CUDA events), %s\n"
          % (args.repeats, args.dtype))
    for shape_name in args.shapes.split(","):
        b, h, n, d = SHAPES[shape_name]
        blocks = -(-n // BLOCK)
        ks = [k for k in map(int, args.ks.split(",")) if k <= blocks]
        torch.manual_seed(args.seed)
        q, kk, v = (torch.randn(b, h, n, d, device=dev, dtype=dtype) for _ in range(3))
        gen = torch.Generator().manual_seed(args.seed)
        dense = fa_stages.MaskPlan(n, n, device=dev)
        dense_ms = 0.0 if args.profile else statistics.median(
            time_ms(lambda: fa_stages.masked_attention(q, kk, v, dense), args.repeats) for _ in range(3))
        print("B=%d H=%d N=%d d=%d: %d x %d blocks a head; dense %.4f ms" % (b, h, n, d, blocks, blocks, dense_ms))
        print("%4s %10s %10s %10s %10s" % ("k", "same", "random", "line", "random/line"))
        times = {"same": [], "random": []}
        for k in ks:
            same = torch.zeros(blocks, blocks, dtype=torch.bool)
            same[:, :k] = True
            rand = torch.zeros(blocks, blocks, dtype=torch.bool)
            for r in range(blocks):
                rand[r, torch.randperm(blocks, generator=gen)[:k]] = True
            row = []
            for name, keep in (("same", same), ("random", rand)):
                plan = fa_stages.MaskPlan(n, n, device=dev, block_mask=keep)
                call = lambda plan=plan: fa_stages.masked_attention(q, kk, v, plan)
                if args.profile:
                    call(), call()
                    torch.cuda.synchronize()
                    print("profiled: k = %d, %s" % (k, name))
                    continue
                t = statistics.median(time_ms(call, args.repeats) for _ in range(3))
                times[name].append(t)
                row.append(t)
            if args.profile:
                continue
            line = dense_ms * k / blocks
            print("%4d %10.4f %10.4f %10.4f %10.2fx" % (k, row[0], row[1], line, row[1] / line))
        if args.profile:
            continue
        for name in ("same", "random"):
            a, slope = fit(ks, times[name])
            print("fit %-6s: time = %.4f + %.5f k ms; a Q tile's own cost = %.2f blocks" % (name, a, slope, a / slope))
        print()


if __name__ == "__main__":
    main()
