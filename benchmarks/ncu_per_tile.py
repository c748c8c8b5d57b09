#!/usr/bin/env python3
"""Splits a kernel's SASS-level counters into what each Q tile costs on its own and what each
block of its list costs, from two Nsight Compute source pages of the same binary: one run with
k1 blocks a Q tile, one with k2 (benchmarks/masks_per_tile.py --profile makes both).

For each SASS instruction, with e(k) its count at k blocks a tile and the same tiles in both
runs, e(k) = own + k·per_block: per_block = (e(k2) − e(k1)) / (k2 − k1), own = e(k1) − k1·per_block.
The same for the warp stall samples. It prints the totals, the ratio own / per_block (a Q
tile's own cost in blocks), the instructions whose own share of stall samples is largest, and,
with --regions, the own shares summed over address ranges of the binary (offsets from its
first instruction, as the listing prints them). Usage:

    ncu --set none --section SourceCounters --kernel-name regex:masked_kernel --launch-skip 1 \\
        --launch-count 1 -o k1 python3 benchmarks/masks_per_tile.py --profile --shapes d64 --ks 1
    (the same with --ks 32 -o k32)
    ncu -i k1.ncu-rep --page source --csv --print-source sass > k1.csv    (and k32.csv)
    python3 benchmarks/ncu_per_tile.py k1.csv 1 k32.csv 32 --tiles 4096 [--regions "name:0x470-0x4d0,..."]
"""
import argparse
import csv
import re


def load(path):
    """(offset, instruction, instructions executed, stall samples) for each SASS line."""
    rows = list(csv.reader(open(path)))
    header = rows[1]
    executed = header.index("Instructions Executed")
    samples = header.index("Warp Stall Sampling (All Samples)")
    data = [r for r in rows[2:] if len(r) > samples]
    base = int(data[0][0], 16)
    return [(int(r[0], 16) - base, re.sub(r"0x[0-9a-f]{8,}", "ADDR", r[1].strip()), float(r[executed] or 0),
             float(r[samples] or 0)) for r in data]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv1")
    ap.add_argument("k1", type=int)
    ap.add_argument("csv2")
    ap.add_argument("k2", type=int)
    ap.add_argument("--tiles", type=int, required=True, help="Q tiles in each run (B·H·Nq/Br)")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--regions", default="", help="name:lo-hi,... address ranges (hex offsets) to sum")
    args = ap.parse_args()
    a, b = load(args.csv1), load(args.csv2)
    if len(a) != len(b) or any(x[1] != y[1] for x, y in zip(a, b)):
        raise SystemExit("the two listings are not of the same binary")
    dk = args.k2 - args.k1
    per_block = [((y[2] - x[2]) / dk, (y[3] - x[3]) / dk) for x, y in zip(a, b)]
    own = [(x[2] - args.k1 * pb[0], x[3] - args.k1 * pb[1]) for x, pb in zip(a, per_block)]
    inst_own, inst_block = sum(o[0] for o in own), sum(p[0] for p in per_block)
    st_own, st_block = sum(o[1] for o in own), sum(p[1] for p in per_block)
    print("warp-instructions a tile: own %.0f, a block %.0f (own / block = %.2f)" %
          (inst_own / args.tiles, inst_block / args.tiles, inst_own / inst_block))
    print("stall samples: own %.0f, a block %.0f (own / block = %.2f)" % (st_own, st_block, st_own / st_block))
    print("\nthe %d instructions with the largest own share of stall samples:" % args.top)
    for i in sorted(sorted(range(len(a)), key=lambda i: -own[i][1])[:args.top]):
        print("  %6x  %-62s own %5.0f samples, %4.1f warp-instructions a tile" %
              (a[i][0], a[i][1][:62], own[i][1], own[i][0] / args.tiles))
    if args.regions:
        print("\nown shares by region:")
        for spec in args.regions.split(","):
            name, span = spec.rsplit(":", 1)
            lo, hi = (int(v, 16) for v in span.split("-"))
            ids = [i for i in range(len(a)) if lo <= a[i][0] < hi]
            s = sum(own[i][1] for i in ids)
            n = sum(own[i][0] for i in ids) / args.tiles
            print("  %-60s %6.0f samples (%5.1f%% of a block's), %5.0f warp-instructions a tile" %
                  (name, s, 100 * s / st_block, n))


if __name__ == "__main__":
    main()
