#!/usr/bin/env python3
"""Stage 12's masks beside FlexAttention on the same inputs and masks, on one GPU.

For each shape (the forward bars': B=4 H=32 N=4096 d=64 and B=1 H=16 N=16384 d=128) and
dtype, and each mask: the causal mask, causal sliding windows, packed documents (causal),
and random block masks at densities from 10% to 100%, it times

  stage 12     fa_stages.masked_attention under a MaskPlan made once (not timed)
  flex         torch.nn.attention.flex_attention under torch.compile, its BlockMask made once
               by create_block_mask from the same mask (128 x 128 blocks, not timed)
  dense line   stage 12 with no mask, times the fraction of blocks the mask leaves: what the
               mask would cost if a skipped block cost nothing and a visited one as much as
               a dense one

and checks that the two outputs agree. Each time is GPU time (time_ms), the median of three
turns, stage 12 and flex in turn, each turn the median of --repeats rounds of ten calls. Usage (needs PyTorch with CUDA, and fa_stages
built with stage 12, e.g. PYTHONPATH=build/python):

    python3 benchmarks/masks.py --csv masks.csv > masks.txt
"""
import argparse
import csv
import math
import random
import statistics
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import fa_stages

SHAPES = {"d64": (4, 32, 4096, 64), "d128": (1, 16, 16384, 128)}
BLOCK = 128


def doc_lengths(n, count, seed):
    """count random document lengths summing to n (the cut points drawn from seed)."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, n), count - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [n])]


def masks_for(n, seed):
    """(name, plan arguments, flex mask_mod maker, density or None) for each mask at length n."""
    out = [("causal", dict(causal=True), lambda dev: lambda b, h, q, kv: q >= kv, None)]
    for w in (256, 1024):
        out.append(("window %d, causal" % w, dict(causal=True, window=(w, -1)),
                    lambda dev, w=w: lambda b, h, q, kv: (q >= kv) & (q - kv <= w), None))
    lengths = doc_lengths(n, max(2, n // 1024), seed)

    def docs_mod(dev, lengths=lengths):
        doc = torch.repeat_interleave(torch.arange(len(lengths), device=dev), torch.tensor(lengths, device=dev))
        return lambda b, h, q, kv: (q >= kv) & (doc[q] == doc[kv])
    out.append(("%d documents, causal" % len(lengths), dict(causal=True, doc_lengths=lengths), docs_mod, None))
    blocks = -(-n // BLOCK)
    gen = torch.Generator().manual_seed(seed)
    for density in (0.1, 0.3, 0.5, 0.7, 1.0):
        keep = torch.rand((blocks, blocks), generator=gen) < density
        keep[:, 0] = True  # every row sees a block: flex and stage 12 then agree on every row

        def block_mod(dev, keep=keep):
            k = keep.to(dev)
            return lambda b, h, q, kv: k[q // BLOCK, kv // BLOCK]
        out.append(("blocks at %.0f%%" % (100 * density), dict(block_mask=keep), block_mod, density))
    return out


def time_ms(fn, repeats, calls=10):
    """GPU time of one fn(): the median over `repeats` of `calls` calls timed with CUDA events
    (after two untimed calls). Before each, the GPU sleeps a while (torch.cuda._sleep), so that
    the host has queued all the calls by the time the first starts: the events time the
    kernels, not the Python between them."""
    fn(), fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(20_000_000)  # about 10 ms
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="d64,d128")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    dev = torch.device("cuda")
    # One compiled kernel for each mask (its mask_mod) and dtype: more than dynamo keeps by default.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 1000)
    flex = torch.compile(flex_attention, dynamic=False)
    print("device: %s (PyTorch %s)" % (torch.cuda.get_device_name(dev), torch.__version__))
    print("each time: GPU time of one call, the median of 3 turns of %d rounds of 10 calls (CUDA events); "
          "stage 12 and flex on the same inputs and masks\n" % args.repeats)
    rows = []
    header = "%-30s %-5s %-22s %9s %9s %9s %10s %9s %9s" % (
        "shape", "dtype", "mask", "blocks", "stage12", "flex", "flex/s12", "line", "s12/line")
    for shape_name in args.shapes.split(","):
        b, h, n, d = SHAPES[shape_name]
        for dtype_name in args.dtypes.split(","):
            dtype = dtypes[dtype_name]
            torch.manual_seed(args.seed)
            q, k, v = (torch.randn(b, h, n, d, device=dev, dtype=dtype) for _ in range(3))
            dense_plan = fa_stages.MaskPlan(n, n, device=dev)
            dense_ms = time_ms(lambda: fa_stages.masked_attention(q, k, v, dense_plan), args.repeats)
            # Stage 08, whose kernel stage 12 extends, on the two masks it has: what the lists cost.
            s08 = {c: time_ms(lambda c=c: fa_stages.forward(q, k, v, causal=c, stage="08"), args.repeats)
                   for c in (False, True)}
            print(header)
            for name, plan_args, mod, _ in masks_for(n, args.seed):
                plan = fa_stages.MaskPlan(n, n, device=dev, **plan_args)
                block_mask = create_block_mask(mod(dev), None, None, n, n, device=dev, BLOCK_SIZE=BLOCK)
                ours = lambda: fa_stages.masked_attention(q, k, v, plan)
                theirs = lambda: flex(q, k, v, block_mask=block_mask)
                o, _ = ours()
                o_flex = theirs()
                diff = (o.float() - o_flex.float()).abs().max().item()
                s12_ms, flex_ms = [], []
                for _ in range(3):  # in turns, so that a drifting clock touches both alike
                    s12_ms.append(time_ms(ours, args.repeats))
                    flex_ms.append(time_ms(theirs, args.repeats))
                s12, fx = statistics.median(s12_ms), statistics.median(flex_ms)
                frac = plan.density()
                line = dense_ms * frac
                shape = "B=%d H=%d N=%d d=%d" % (b, h, n, d)
                print("%-30s %-5s %-22s %8.1f%% %9.3f %9.3f %9.2fx %9.3f %8.2fx  max|O-flex| %.2e" % (
                    shape, dtype_name, name, 100 * frac, s12, fx, fx / s12, line, s12 / line, diff))
                sys.stdout.flush()
                rows.append(dict(shape=shape, dtype=dtype_name, mask=name, blocks_visited=frac,
                                 empty=plan.counts["empty"], partial=plan.counts["partial"], full=plan.counts["full"],
                                 stage12_ms=s12, flex_ms=fx, dense_ms=dense_ms, line_ms=line,
                                 flex_over_stage12=fx / s12, stage12_over_line=s12 / line, max_abs_diff=diff,
                                 stage08_dense_ms=s08[False], stage08_causal_ms=s08[True]))
                if not math.isfinite(diff) or diff > 0.05:
                    print("  stage 12 and flex disagree on this mask", file=sys.stderr)
            print("dense (no mask): stage 12 %.3f ms, stage 08 %.3f ms; causal: stage 08 %.3f ms\n"
                  % (dense_ms, s08[False], s08[True]))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
