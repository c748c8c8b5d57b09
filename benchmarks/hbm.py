#!/usr/bin/env python3
"""Measured HBM traffic per stage with Nsight Compute, next to each stage's IO model.

For each stage and sequence length it runs `fa_bench --profile` (one forward pass, in
the stage's first precision: FP32 for stages 01-05, FP16 for stage 06;
untimed, unchecked) under ncu, sums dram__bytes_read.sum and dram__bytes_write.sum over
every kernel of that pass, and writes one CSV row with the stage's IO-model bytes from
fa_bench and the minimum any exact attention moves (Q, K, V read and O written once). Use shapes well beyond the L2 cache (the default, B=1 H=32 d=64 with N = 4096
and 8192, has Q, K, V of 96 and 192 MiB against the H100's 50 MB of L2).

  python3 benchmarks/hbm.py --bench build/bin/fa_bench --csv hbm.csv

Exit status: 0 done, 1 a profile failed, 77 ncu or a GPU is missing.
"""
import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile

METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum"]
HEADER = ["name", "precision", "device", "batch", "heads", "seq_q", "seq_kv", "dim", "kernels", "dram_read_bytes",
          "dram_write_bytes", "hbm_model_bytes", "minimum_bytes", "status", "note"]
UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="path of the fa_bench executable")
    ap.add_argument("--csv", required=True, help="write the rows here")
    ap.add_argument("--ncu", default="ncu", help="Nsight Compute command line tool")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seq", default="4096,8192", help="comma-separated sequence lengths")
    ap.add_argument("--stages", default="all", help="comma-separated stage names, or all")
    return ap.parse_args()


def kernel_bytes(log_text):
    """Sums each metric over the kernels in ncu's --csv output; returns (sums, kernels)."""
    start = log_text.find('"ID"')
    if start < 0:
        return None, 0
    sums, kernels = dict.fromkeys(METRICS, 0.0), set()
    for rec in csv.DictReader(io.StringIO(log_text[start:])):
        metric = rec.get("Metric Name")
        if metric not in sums:
            continue
        value = float(rec["Metric Value"].replace(",", ""))
        sums[metric] += value * UNITS.get(rec.get("Metric Unit", "byte").lower(), 1)
        kernels.add(rec["ID"])
    return sums, len(kernels)


def main():
    args = parse_args()
    ncu = shutil.which(args.ncu)
    if ncu is None:
        print(f"hbm.py: Nsight Compute ('{args.ncu}') is not installed here; no HBM measurement", file=sys.stderr)
        return 77
    listed = subprocess.run([args.bench, "--list", "--stages", args.stages], capture_output=True, text=True)
    if listed.returncode != 0:
        print(listed.stderr, file=sys.stderr, end="")
        return listed.returncode
    # `fa_bench --list`: "<id>  <precisions, default first>  <title>"
    stages = [(line.split()[0], line.split()[1].split(",")[0]) for line in listed.stdout.splitlines() if line.strip()]
    failed = False
    with open(args.csv, "w", newline="") as f, tempfile.TemporaryDirectory() as tmp:
        out = csv.DictWriter(f, fieldnames=HEADER)
        out.writeheader()
        for n in [int(x) for x in args.seq.split(",")]:
            for stage, prec in stages:
                log, rows = os.path.join(tmp, "ncu.csv"), os.path.join(tmp, "bench.csv")
                cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(METRICS), "--csv",
                       "--print-units", "base", "--log-file", log, args.bench, "--profile", "--stages", stage, "--precisions", prec,
                       "--batch", str(args.batch), "--heads", str(args.heads), "--dim", str(args.dim),
                       "--seq", str(n), "--csv", rows]
                run = subprocess.run(cmd, capture_output=True, text=True)
                row = dict.fromkeys(HEADER, "")
                elem = 4 if prec == "fp32" else 2
                row.update(name=stage, precision=prec, batch=args.batch, heads=args.heads, seq_q=n, seq_kv=n,
                           dim=args.dim, minimum_bytes=4 * args.batch * args.heads * n * args.dim * elem)  # Q, K, V, O once
                bench_rows = list(csv.DictReader(open(rows))) if os.path.exists(rows) else []
                if bench_rows:
                    b = bench_rows[0]
                    row.update(device=b["device"], hbm_model_bytes=b["hbm_model_bytes"], status=b["status"],
                               note=b["note"])
                sums, kernels = kernel_bytes(open(log).read()) if os.path.exists(log) else (None, 0)
                if run.returncode != 0 or (sums is None and row["status"] != "skipped"):
                    failed = True
                    row.update(status="failed", note=" ".join((run.stderr or run.stdout).split())[-240:])
                elif sums is not None:
                    row.update(kernels=kernels, dram_read_bytes=f"{sums[METRICS[0]]:.0f}",
                               dram_write_bytes=f"{sums[METRICS[1]]:.0f}", status="measured")
                out.writerow(row)
                f.flush()
                if row["status"] == "measured":
                    model = float(row["hbm_model_bytes"] or 0)
                    print(f"  N={n:6d} {stage:18s} read {sums[METRICS[0]] / 1e9:8.3f} GB  written "
                          f"{sums[METRICS[1]] / 1e9:8.3f} GB  model {model / 1e9:8.3f} GB  ({kernels} kernels)",
                          flush=True)
                else:
                    print(f"  N={n:6d} {stage:18s} {row['status']}: {row['note']}", flush=True)
    print(f"\nHBM rows: {args.csv}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
