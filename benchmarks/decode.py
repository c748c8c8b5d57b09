#!/usr/bin/env python3
"""Decoding benchmark: stage 09 beside PyTorch SDPA and a plain copy, in TB/s of cache read.

For each point (precision, B, Hq, Hkv, cache length L, d; one new query per sequence) it

  * runs stage 09's demo (`--json --bandwidth`): its median time, checked against the
    float64 reference, and the median time of a device-to-device copy of the same bytes;
  * draws the very same inputs through libfa_inputs (ctypes) and runs PyTorch's
    scaled_dot_product_attention with each backend forced in turn (cuDNN, flash,
    efficient, math), grouped-query attention through enable_gqa; a backend that declines
    becomes an "unsupported" row with PyTorch's reason. Each is timed with CUDA events
    (warm-up, median of repeats) and checked against float64 on a few rows.

The figure of merit is the cache read rate: K and V bytes of the live cache (each row once)
over the median time. The copy row counts read + written bytes.

  python3 benchmarks/decode.py --demo build/bin/stage09_split_kv_decoding \\
      --lib build/lib/libfa_inputs.so --csv decode.csv           # the sweep and the bars
  python3 benchmarks/decode.py ... --points bars                 # the bar points only
  python3 benchmarks/decode.py --plot benchmarks/results/<gpu>/decode_sweep.csv   # its plot

Exit status: 0 done, 2 bad arguments; without PyTorch the stage's rows are still written.
"""
import argparse
import csv
import ctypes
import json
import math
import subprocess
import sys
import warnings

from torch_sdpa import decline_reason, timed  # the same timing and PyTorch messages as the forward rows

HEADER = ("source,name,precision,device,batch,q_heads,kv_heads,seq_q,seq_kv,dim,splits,median_ms,repeats,"
          "kv_bytes,tbps,max_abs_err,status,note").split(",")

# (B, Hq, Hkv, d, cache lengths): the bar shapes, and a sweep over L (in fp16; BF16 and
# FP32 at the bar shapes only).
BARS = [(1, 32, 32, 128, [32768, 131072]), (16, 32, 8, 128, [32768])]
SWEEP = [(1, 32, 32, 128, [1024, 4096, 16384, 32768, 65536, 131072]),
         (16, 32, 8, 128, [1024, 4096, 16384, 32768]),
         (1, 32, 32, 64, [4096, 32768, 131072])]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plot", metavar="CSV", help="only draw decode_tbps.svg next to this CSV, then exit")
    ap.add_argument("--check", action="store_true", help="with --plot: exit 1 if the plot differs, write nothing")
    ap.add_argument("--demo", help="path of stage09_split_kv_decoding")
    ap.add_argument("--lib", help="path of libfa_inputs.so")
    ap.add_argument("--csv", help="write the rows here")
    ap.add_argument("--points", choices=["all", "bars"], default="all")
    ap.add_argument("--precisions", default="fp16,bf16,fp32")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--splits", type=int, default=0, help="passed to the demo (0: its own choice)")
    return ap.parse_args()


def run_stage(args, prec, b, hq, hkv, d, n):
    cmd = [args.demo, "--batch", str(b), "--heads", str(hq), "--kv-heads", str(hkv), "--seq-kv", str(n),
           "--dim", str(d), "--dtype", prec, "--seed", str(args.seed), "--repeats", str(args.repeats),
           "--warmup", str(args.warmup), "--check-rows", "64", "--splits", str(args.splits), "--json", "--bandwidth"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[:300]}")
    return json.loads(lines[0]), out.returncode


def torch_rows(torch, lib, args, prec, b, hq, hkv, d, n, kv_bytes, device):
    """SDPA with each backend forced, on the inputs stage 09 used."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q32 = torch.empty((b, hq, 1, d), dtype=torch.float32)
    k32 = torch.empty((b, hkv, n, d), dtype=torch.float32)
    v32 = torch.empty_like(k32)
    ptr = lambda t: ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_float))
    if lib.fa_decode_inputs_fill(b, hq, hkv, 1, n, d, args.seed, 1.0, ptr(q32), ptr(k32), ptr(v32)) != 0:
        raise ValueError("libfa_inputs rejected the shape")
    dev = torch.device("cuda")
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[prec]
    q, k, v = (t.to(dev).to(dt) for t in (q32, k32, v32))
    del q32, k32, v32
    scale = 1.0 / math.sqrt(d)
    g = hq // hkv
    # float64 reference on a few (sequence, head) pairs, from the rounded inputs.
    picks = sorted({(0, 0), (b - 1, hq - 1), (b // 2, hq // 2)})
    want = []
    for bi, h in picks:
        s = (k[bi, h // g].double() @ q[bi, h, 0].double()) * scale
        want.append(torch.softmax(s, 0) @ v[bi, h // g].double())
    rows = []
    backends = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
                "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION, "sdpa_math": SDPBackend.MATH}
    for name, be in backends.items():
        row = dict.fromkeys(HEADER, "")
        row.update(source="pytorch", name=name, precision=prec, device=device, batch=b, q_heads=hq, kv_heads=hkv,
                   seq_q=1, seq_kv=n, dim=d, kv_bytes=f"{kv_bytes:.0f}", note=f"PyTorch {torch.__version__}")
        fn = lambda: F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=g > 1)
        try:
            with warnings.catch_warnings(record=True) as said, sdpa_kernel(be), torch.no_grad():
                warnings.simplefilter("always")
                o = fn()
                torch.cuda.synchronize()
                err = max((o[bi, h, 0].double() - w).abs().max().item() for (bi, h), w in zip(picks, want))
                del o
                # Exactly args.repeats timed runs: as many at least as at most, whatever the time.
                ms, reps = timed(torch, fn, args.warmup, args.repeats, args.repeats, 0.0)
            row.update(median_ms=f"{ms:.6g}", repeats=reps, tbps=f"{kv_bytes / (ms * 1e-3) / 1e12:.4g}",
                       max_abs_err=f"{err:.3g}", status="measured")
        except torch.cuda.OutOfMemoryError as e:
            row.update(status="skipped", note="out of memory: " + str(e).split("\n")[0][:160])
        except RuntimeError as e:
            reason = decline_reason([str(w.message) for w in said]) or " ".join(str(e).split())[:300]
            row.update(status="unsupported", note=reason)
        rows.append(row)
        print(f"  {name:15s} {prec} " + (f"{float(row['median_ms']):9.4f} ms {float(row['tbps']):6.3f} TB/s  "
                                         f"max err {float(row['max_abs_err']):.1e}" if row["status"] == "measured"
                                         else row["status"]), flush=True)
    del q, k, v
    torch.cuda.empty_cache()
    return rows


def plot(path, check):
    """TB/s vs cache length, one line per implementation and shape, from a sweep's CSV."""
    import os
    import report  # the benchmark's own chart, from this folder
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "measured" and r["tbps"]]
    colours = {"09_split_kv_decoding": "#6a3d9a", "sdpa_cudnn": "#1f77b4", "sdpa_flash": "#2ca02c",
               "device_copy": "#7f7f7f"}
    labels = {"09_split_kv_decoding": "stage 09", "sdpa_cudnn": "SDPA cuDNN", "sdpa_flash": "SDPA flash",
              "device_copy": "copy (read + write)"}
    series = []
    shapes = sorted({(r["precision"], int(r["batch"]), int(r["q_heads"]), int(r["kv_heads"]), int(r["dim"]))
                     for r in rows}, key=lambda k: (k[0], k[4] != 128, k[1]))
    for shape in shapes:
        prec, b, hq, hkv, d = shape
        dash = "" if (b, hkv, d) == (1, hq, 128) else ("6,3" if d == 128 else "2,3")
        for name in colours:
            pts = sorted((int(r["seq_kv"]), float(r["tbps"]), True) for r in rows
                         if r["name"] == name and (r["precision"], int(r["batch"]), int(r["q_heads"]),
                                                   int(r["kv_heads"]), int(r["dim"])) == shape)
            if pts and not (name == "device_copy" and dash):
                series.append((f"{labels[name]} B={b} Hkv={hkv} d={d}" if name != "device_copy" else labels[name],
                               colours[name], dash, pts))
    device = rows[0]["device"]
    report.line_chart(os.path.join(os.path.dirname(path), "decode_tbps.svg"),
                      f"Decoding: cache read rate vs cache length ({rows[0]['precision'].upper()}, Hq=32, one query)",
                      device + "; solid B=1 Hkv=32 d=128, dashed B=16 Hkv=8 (GQA), dotted d=64",
                      "cache length L (log scale)", "TB/s of K and V read (log scale)", "TB/s", series, check=check)
    return report.plot_checked("decode.py", "decode_tbps.svg") if check else 0


def main():
    args = parse_args()
    if args.plot:
        return plot(args.plot, args.check)
    if not (args.demo and args.lib and args.csv):
        print("decode.py: --demo, --lib and --csv are needed (or --plot CSV)", file=sys.stderr)
        return 2
    try:
        import torch
        have_torch = torch.cuda.is_available()
    except ImportError:
        torch, have_torch = None, False
    if not have_torch:
        print("decode.py: PyTorch with a CUDA GPU is not available; only stage 09's rows", file=sys.stderr)
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    lib = ctypes.CDLL(args.lib)
    i64, u64, f32p = ctypes.c_int64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_float)
    lib.fa_decode_inputs_fill.argtypes = [i64] * 6 + [u64, ctypes.c_float, f32p, f32p, f32p]
    lib.fa_decode_inputs_fill.restype = ctypes.c_int
    failed = False
    with open(args.csv, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=HEADER)
        out.writeheader()
        for prec in args.precisions.split(","):
            for b, hq, hkv, d, lens in (SWEEP if args.points == "all" and prec == "fp16" else BARS):
                for n in lens:
                    print(f"\n{prec} B={b} Hq={hq} Hkv={hkv} L={n} d={d}", flush=True)
                    rep, rc = run_stage(args, prec, b, hq, hkv, d, n)
                    failed = failed or rc != 0
                    base = dict(precision=prec, device=rep["device"], batch=b, q_heads=hq, kv_heads=hkv, seq_q=1,
                                seq_kv=n, dim=d, kv_bytes=f"{rep['kv_bytes']:.0f}")
                    out.writerow(dict(base, source="stage", name="09_split_kv_decoding", splits=rep["splits"],
                                      median_ms=f"{rep['median_ms']:.6g}", repeats=rep["repeats"],
                                      tbps=f"{rep['tbps']:.4g}", max_abs_err=f"{rep['checks']['O']['max_abs_err']:.3g}",
                                      status="measured" if rep["result"] == "PASSED" else "failed", note=""))
                    print(f"  {'09_split_kv':15s} {prec} {rep['median_ms']:9.4f} ms {rep['tbps']:6.3f} TB/s  "
                          f"{rep['splits']} splits, {rep['result']}", flush=True)
                    if rep.get("copy_tbps"):
                        out.writerow(dict(base, source="copy", name="device_copy", tbps=f"{rep['copy_tbps']:.4g}",
                                          status="measured",
                                          note="cudaMemcpy device to device of the cache's bytes; read + written"))
                        print(f"  {'copy':15s}      {rep['copy_tbps']:6.3f} TB/s (read + write)", flush=True)
                    if have_torch:
                        for row in torch_rows(torch, lib, args, prec, b, hq, hkv, d, n, rep["kv_bytes"],
                                              rep["device"]):
                            out.writerow(row)
                    f.flush()
    print(f"\ndecode rows: {args.csv}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
