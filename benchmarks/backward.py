#!/usr/bin/env python3
"""Backward-pass benchmark: stages 10, 11 and 13 beside PyTorch SDPA's backward, on the same inputs.

FP32 (`--precision fp32`, the default) is stage 10 beside every SDPA backend that runs it;
FP16 and BF16 (`--precision fp16,bf16`) are stage 11 (mma.sync) and stage 13 (Hopper: wgmma,
TMA), on tensor cores, beside SDPA's flash (FlashAttention-2), cuDNN and memory-efficient
backends. For each point (B, H, N, d, causal, precision) it

  * runs each stage's demo (`--demo`, comma-separated, `--json`): the backward pass's median
    time (the forward stage, 05, 07 or 08, runs first, untimed), its gradients checked against
    the float64 reference on one head, and the forward pass's time on the same inputs
    (`--compare`);
  * draws the very same Q, K, V and dO through libfa_inputs (ctypes), runs PyTorch's
    scaled_dot_product_attention forward once with each backend forced in turn (cuDNN,
    flash, efficient, math) and times torch.autograd.grad(O, (Q, K, V), dO) alone (CUDA
    events, warm-up, median of repeats). It records the peak memory the backward pass
    allocates beyond what the forward left (the math backend's is its N×N matrices), and
    checks dQ, dK, dV on one head against float64 autograd. A backend that declines FP32
    becomes an "unsupported" row with PyTorch's reason.

TFLOP/s count 2.5x the forward's 4·B·H·N²·d (five matrix products instead of two), the
causal mask not subtracted, for every row alike. extra_bytes is device memory the backward
pass needs beyond Q, K, V, O, dO and the lse, its three gradients included: PyTorch's peak
allocation during the call (it allocates dQ, dK, dV there), the stage's dQ, dK, dV and D.

  python3 benchmarks/backward.py --demo build/bin/stage10_backward --lib build/lib/libfa_inputs.so \\
      --csv backward.csv
  python3 benchmarks/backward.py --precision fp16,bf16 --demo build/bin/stage11_backward_tensor_cores \\
      --lib build/lib/libfa_inputs.so --csv backward_tc.csv
  python3 benchmarks/backward.py --precision fp16,bf16 \\
      --demo build/bin/stage11_backward_tensor_cores,build/bin/stage13_backward_hopper \\
      --lib build/lib/libfa_inputs.so --csv backward_hopper.csv     # a Hopper GPU: stages 11 and 13

  python3 benchmarks/backward.py --plot backward.csv [--check]   # backward_ms.svg beside it
  python3 benchmarks/backward.py --plot backward_tc.csv          # backward_tc_ms.svg (any CSV: <name>_ms.svg)

Exit status: 0 done (with --check: the plot matches), 1 the plot is out of date, 2 bad
arguments; without PyTorch the stage's rows are still written.
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

HEADER = ("source,name,precision,device,batch,heads,seq,dim,causal,median_ms,repeats,tflops,forward_ms,"
          "extra_bytes,max_abs_err,status,note").split(",")

# (B, H, N, d): the bar shapes, non-causal and causal: FP32 (stage 10) and FP16/BF16 (stages 11, 13).
POINTS = [(4, 32, 4096, 64), (4, 32, 4096, 128)]
POINTS_TC = [(4, 32, 4096, 64), (1, 16, 8192, 128)]
PRECISIONS = ("fp32", "fp16", "bf16")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plot", metavar="CSV", help="only draw backward_ms.svg next to this CSV, then exit")
    ap.add_argument("--check", action="store_true", help="with --plot: exit 1 if the plot differs, write nothing")
    ap.add_argument("--demo", help="path of stage10_backward (fp32), or of stage11_backward_tensor_cores and/or "
                    "stage13_backward_hopper (fp16, bf16), comma-separated")
    ap.add_argument("--precision", default="fp32", help="fp32, or fp16 and/or bf16 (comma-separated)")
    ap.add_argument("--lib", help="path of libfa_inputs.so")
    ap.add_argument("--csv", help="write the rows here")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--causal", default="no,yes", help="which masks: no, yes or both (no,yes)")
    ap.add_argument("--no-torch", action="store_true", help="the stage's rows only")
    ap.add_argument("--dims", default="", help="only these head dims of the points (comma-separated)")
    ap.add_argument("--no-stage-check", action="store_true",
                    help="skip the demo's float64 check of one head (minutes at N = 8192, on the host's CPU); "
                         "the tests check every element at smaller shapes")
    return ap.parse_args()


def flops(b, h, n, d):
    return 2.5 * 4.0 * b * h * n * n * d


def run_stage(args, demo, b, h, n, d, causal, precision):
    cmd = [demo, "--batch", str(b), "--heads", str(h), "--seq-q", str(n), "--seq-kv", str(n), "--dim", str(d),
           "--dtype", precision,
           "--seed", str(args.seed), "--repeats", str(args.repeats), "--warmup", str(args.warmup),
           "--check-heads", "1", "--compare", "--json"] + (["--causal"] if causal else []) + \
        (["--no-check"] if args.no_stage_check else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[:300]}")
    return json.loads(lines[0]), out.returncode


def torch_rows(torch, lib, args, b, h, n, d, causal, device, precision):
    """SDPA's backward with each backend forced, on the inputs the stage used (rounded to the
    precision as the stage rounds them: to nearest, ties to even)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    host = [torch.empty((b, h, n, d), dtype=torch.float32) for _ in range(4)]
    ptr = lambda t: ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_float))
    if (lib.fa_inputs_fill(b, h, n, n, d, args.seed, 1.0, ptr(host[0]), ptr(host[1]), ptr(host[2])) != 0 or
            lib.fa_output_gradient_fill(b, h, n, n, d, args.seed, ptr(host[3])) != 0):
        raise ValueError("libfa_inputs rejected the shape")
    dev = torch.device("cuda")
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    q, k, v, g = (t.to(dev).to(dtype) for t in host)
    del host
    scale = 1.0 / math.sqrt(d)
    # float64 autograd on head (0, 0): the reference for every backend's gradients.
    q0, k0, v0 = (t[0, 0].double().requires_grad_() for t in (q, k, v))
    s = (q0 @ k0.T) * scale
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=dev).triu(1), float("-inf"))
    want = torch.autograd.grad(torch.softmax(s, -1) @ v0, (q0, k0, v0), g[0, 0].double())
    del q0, k0, v0, s
    rows = []
    backends = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
                "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION, "sdpa_math": SDPBackend.MATH}
    if precision != "fp32":  # the plain backend that stores P is the FP32 table's point
        del backends["sdpa_math"]
    for name, be in backends.items():
        row = dict.fromkeys(HEADER, "")
        row.update(source="pytorch", name=name, precision=precision, device=device, batch=b, heads=h, seq=n, dim=d,
                   causal=int(causal), note=f"PyTorch {torch.__version__}")
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        try:
            with warnings.catch_warnings(record=True) as said, sdpa_kernel(be):
                warnings.simplefilter("always")
                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
                torch.cuda.synchronize()
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                fn = lambda: torch.autograd.grad(o, (qg, kg, vg), g, retain_graph=True)
                grads = fn()
                torch.cuda.synchronize()
                extra = torch.cuda.max_memory_allocated() - before
                err = max((x[0, 0].double() - w).abs().max().item() for x, w in zip(grads, want))
                del grads
                ms, reps = timed(torch, fn, args.warmup, args.repeats, 3, 20.0)
            row.update(median_ms=f"{ms:.6g}", repeats=reps, tflops=f"{flops(b, h, n, d) / (ms * 1e-3) / 1e12:.4g}",
                       extra_bytes=extra, max_abs_err=f"{err:.3g}", status="measured")
            del o
        except torch.cuda.OutOfMemoryError as e:
            row.update(status="skipped", note="out of memory: " + str(e).split("\n")[0][:160])
        except RuntimeError as e:
            reason = decline_reason([str(w.message) for w in said]) or " ".join(str(e).split())[:300]
            row.update(status="unsupported", note=reason)
        del qg, kg, vg
        torch.cuda.empty_cache()
        rows.append(row)
        print(f"  {name:15s} " + (f"{float(row['median_ms']):9.3f} ms {float(row['tflops']):6.2f} TFLOP/s  "
                                  f"extra {int(row['extra_bytes']) / 2**30:6.2f} GiB  max err "
                                  f"{float(row['max_abs_err']):.1e}" if row["status"] == "measured"
                                  else row["status"] + ": " + row["note"][:100]), flush=True)
    return rows


def plot(path, check):
    """backward_ms.svg next to the CSV: each shape's backward time, stage 10 beside SDPA; for a
    CSV of FP16/BF16 rows, backward_tc_ms.svg: stage 11 beside SDPA."""
    import os
    import report  # the benchmark's own charts, from this folder
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "measured" and r["median_ms"]]
    if rows and rows[0]["precision"] != "fp32":
        return plot_tc(path, rows, check)
    bars = [("stage 10", "#d62728"), ("SDPA efficient (tensor cores, 3xTF32)", "#1f77b4"),
            ("SDPA math (stores P)", "#c7c7c7"), ("forward pass, stage 05", "#2ca02c")]
    shapes = sorted({(int(r["dim"]), int(r["causal"])) for r in rows})
    groups = []
    for d, causal in shapes:
        at = {r["name"]: r for r in rows if (int(r["dim"]), int(r["causal"])) == (d, causal)}
        stage = at.get("10_backward")
        values = [float(stage["median_ms"]) if stage else None]
        values += [float(at[n]["median_ms"]) if n in at else None for n in ("sdpa_efficient", "sdpa_math")]
        values.append(float(stage["forward_ms"]) if stage and stage["forward_ms"] else None)
        groups.append((f"d={d}" + (" causal" if causal else ""), values))
    r0 = rows[0]
    report.bar_chart(os.path.join(os.path.dirname(path), "backward_ms.svg"),
                     f"Backward pass, FP32: median time, ms (B={r0['batch']} H={r0['heads']} N={r0['seq']})",
                     r0["device"] + "; lower is better; TF32 off", groups, check=check, bars=bars, unit="ms")
    return report.plot_checked("backward.py", "backward_ms.svg") if check else 0


def plot_tc(path, rows, check):
    """<csv>_ms.svg (backward_tc.csv: backward_tc_ms.svg): stages 11 and 13 beside SDPA's flash and
    cuDNN backward, each point and precision (stage 13's bars only where the CSV has its rows)."""
    import os
    import report
    has13 = any(r["name"] == "13_backward_hopper" for r in rows)
    bars = [("stage 11", "#d62728")] + ([("stage 13 (Hopper)", "#ff7f0e")] if has13 else []) + \
        [("SDPA flash (FlashAttention-2)", "#1f77b4"), ("SDPA cuDNN", "#9467bd"), ("forward pass, stage 07", "#2ca02c")]
    points = sorted({(int(r["dim"]), int(r["batch"]), int(r["heads"]), int(r["seq"]), int(r["causal"]),
                      r["precision"]) for r in rows})
    groups = []
    for d, b, h, n, causal, prec in points:
        at = {r["name"]: r for r in rows if (int(r["dim"]), int(r["batch"]), int(r["heads"]), int(r["seq"]),
                                               int(r["causal"]), r["precision"]) == (d, b, h, n, causal, prec)}
        stage = at.get("11_backward_tensor_cores")
        values = [float(stage["median_ms"]) if stage else None]
        if has13:
            values.append(float(at["13_backward_hopper"]["median_ms"]) if "13_backward_hopper" in at else None)
        values += [float(at[x]["median_ms"]) if x in at else None for x in ("sdpa_flash", "sdpa_cudnn")]
        values.append(float(stage["forward_ms"]) if stage and stage["forward_ms"] else None)
        groups.append((f"d={d} {prec}" + (" causal" if causal else ""), values))
    svg = os.path.splitext(os.path.basename(path))[0] + "_ms.svg"  # backward_tc.csv: backward_tc_ms.svg
    report.bar_chart(os.path.join(os.path.dirname(path), svg),
                     "Backward pass, FP16 and BF16: median time, ms (d=64: B=4 H=32 N=4096; d=128: B=1 H=16 N=8192)",
                     rows[0]["device"] + "; lower is better", groups, check=check, bars=bars, unit="ms")
    return report.plot_checked("backward.py", svg) if check else 0


def main():
    args = parse_args()
    if args.plot:
        return plot(args.plot, args.check)
    if not (args.demo and args.lib):
        print("backward.py: --demo and --lib are needed (or --plot CSV)", file=sys.stderr)
        return 2
    masks = {"no": [False], "yes": [True], "no,yes": [False, True], "yes,no": [False, True]}.get(args.causal)
    if masks is None:
        print("--causal: no, yes or no,yes", file=sys.stderr)
        return 2
    precisions = args.precision.split(",")
    if not precisions or any(x not in PRECISIONS for x in precisions) or ("fp32" in precisions and len(precisions) > 1):
        print("--precision: fp32, or fp16 and/or bf16", file=sys.stderr)
        return 2
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.backends.cuda.matmul.allow_tf32 = False  # FP32 means FP32, as in the forward rows
            torch.backends.cudnn.allow_tf32 = False
        except ImportError:
            print("PyTorch is not installed: the stage's rows only", file=sys.stderr)
    lib = ctypes.CDLL(args.lib)
    i64, u64, f32p = ctypes.c_int64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_float)
    lib.fa_inputs_fill.argtypes = [i64] * 5 + [u64, ctypes.c_float, f32p, f32p, f32p]
    lib.fa_output_gradient_fill.argtypes = [i64] * 5 + [u64, f32p]
    rows = []
    dims = [int(x) for x in args.dims.split(",")] if args.dims else None
    for b, h, n, d in (POINTS if precisions == ["fp32"] else POINTS_TC):
        if dims and d not in dims:
            continue
        for causal in masks:
            for prec in precisions:
                for demo in args.demo.split(","):
                    r, rc = run_stage(args, demo, b, h, n, d, causal, prec)
                    device, name, elem = r["device"], r["stage"], 4 if prec == "fp32" else 2
                    rows.append(dict(source="stages", name=name, precision=prec, device=device, batch=b, heads=h,
                                     seq=n, dim=d, causal=int(causal), median_ms=f"{r['median_ms']:.6g}",
                                     repeats=r["repeats"], tflops=f"{r['tflops']:.4g}",
                                     forward_ms=f"{r['forward_ms']:.6g}",
                                     extra_bytes=r["workspace_bytes"] + elem * b * h * n * d * 3,  # + dQ, dK, dV
                                     max_abs_err=f"{max(c['max_abs_err'] for c in r['checks'].values()):.3g}"
                                     if r.get("checks") else "",
                                     status="measured" if rc == 0 else "failed", note=r["result"]))
                    print(f"B={b} H={h} N={n} d={d} causal={int(causal)} {prec}\n  {name:15s} {r['median_ms']:9.3f} ms "
                          f"{r['tflops']:6.2f} TFLOP/s  (forward: {r['forward_ms']:.3f} ms)  {r['result']}",
                          flush=True)
                if torch is not None:
                    rows.extend(torch_rows(torch, lib, args, b, h, n, d, causal, device, prec))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=HEADER)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
