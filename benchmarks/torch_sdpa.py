#!/usr/bin/env python3
"""PyTorch on the same shapes and inputs as fa_bench, in rows of the same CSV format.

For each (d, N) it draws Q, K, V with the project's own generator (libfa_inputs, through
ctypes: the very numbers fa_bench uses), then runs

  * scaled_dot_product_attention as it dispatches by itself, then with each backend
    forced in turn (flash, efficient, cudnn, math), in FP32, FP16 and BF16; a
    combination a backend does not support becomes an "unsupported" row with PyTorch's
    reason;
  * the naive matmul-softmax-matmul in FP32, FP16 and BF16.

Each is timed with CUDA events (warm-up, then the median of repeats) and compared with
the float64 reference on the rows fa_bench checks. FP32 runs with TF32 off, as fa_bench's
kernels and its cuBLAS baseline do.

  python3 benchmarks/torch_sdpa.py --lib build/lib/libfa_inputs.so --csv torch.csv
  python3 benchmarks/torch_sdpa.py --lib ... --csv c.csv --precisions fp16,bf16 --causal

Exit status: 0 done, 2 bad arguments, 77 PyTorch or a CUDA GPU is missing.
"""
import argparse
import ctypes
import csv
import math
import re
import sys
import warnings

HEADER = ("source,name,precision,backend,device,cuda,batch,heads,seq_q,seq_kv,dim,causal,median_ms,"
          "repeats,tflops,workspace_bytes,device_bytes,hbm_model_bytes,max_abs_err,checked_rows,status,"
          "note").split(",")


def int_list(text):
    values = [int(x) for x in text.split(",") if x]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("needs positive integers, e.g. 512,1024")
    return values


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True, help="path of libfa_inputs.so (built with the project)")
    ap.add_argument("--csv", required=True, help="write the rows here")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int_list, default=[64, 128])
    ap.add_argument("--seq", type=int_list, default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--causal", action="store_true", help="is_causal=True (query i sees keys j <= i)")
    ap.add_argument("--precisions", default="fp32,fp16,bf16", help="comma-separated: fp32, fp16, bf16")
    ap.add_argument("--check-rows", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10, help="most timed runs per point")
    ap.add_argument("--min-repeats", type=int, default=3, help="fewest timed runs per point")
    ap.add_argument("--seconds", type=float, default=0.5, help="timed seconds per point to aim for")
    return ap.parse_args()


class Inputs:
    """The project's inputs and checked rows, from libfa_inputs."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        i64, u64, f32p = ctypes.c_int64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_float)
        self.lib.fa_inputs_fill.argtypes = [i64] * 5 + [u64, ctypes.c_float, f32p, f32p, f32p]
        self.lib.fa_inputs_fill.restype = ctypes.c_int
        self.lib.fa_inputs_sample_rows.argtypes = [i64] * 6 + [ctypes.POINTER(i64)]
        self.lib.fa_inputs_sample_rows.restype = i64

    def qkv(self, torch, b, h, n, d, seed):
        q, k, v = (torch.empty((b, h, n, d), dtype=torch.float32) for _ in range(3))
        ptr = lambda t: ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_float))
        if self.lib.fa_inputs_fill(b, h, n, n, d, seed, 1.0, ptr(q), ptr(k), ptr(v)) != 0:
            raise ValueError(f"libfa_inputs rejected the shape B={b} H={h} N={n} d={d}")
        return q, k, v

    def rows(self, b, h, n, d, count):
        out = (ctypes.c_int64 * max(count, 2))()
        got = self.lib.fa_inputs_sample_rows(b, h, n, n, d, count, out)
        return list(out[:got])


def reference_rows(torch, q, k, v, rows, scale, causal=False):
    """float64 attention for the given flat query rows; q, k, v are fp32 [B, H, N, d].
    causal: query i sees keys j <= i (is_causal=True)."""
    b, h, n, d = q.shape
    q3, k3, v3 = (t.reshape(b * h, n, d) for t in (q, k, v))
    out = []
    for start in range(0, len(rows), 16):  # 16 rows at a time keeps the float64 copies small
        idx = torch.tensor(rows[start:start + 16], device=q.device)
        bh, i = idx // n, idx % n
        qs = q3[bh, i].double()                    # [r, d]
        ks, vs = k3[bh].double(), v3[bh].double()  # [r, N, d]
        s = torch.einsum("rd,rnd->rn", qs, ks) * scale
        if causal:
            s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > i[:, None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        out.append(torch.einsum("rn,rnd->rd", p, vs))
    return torch.cat(out)


def decline_reason(messages):
    """Why a forced SDPA backend declined, from PyTorch's warnings: without the lines
    about the backends we disabled on purpose and without source locations."""
    reasons = []
    for m in messages:
        m = " ".join(re.sub(r"\(Triggered internally at [^)]*\)", "", m).split())
        if m and "runtime disabled" not in m and not m.endswith("because:") and m not in reasons:
            reasons.append(m)
    return " ".join(reasons)[:300]


def timed(torch, fn, warmup, repeats, min_repeats, seconds):
    """Median ms of fn() over repeats (CUDA events), after warm-up."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    torch.cuda.synchronize()
    first = start.elapsed_time(stop)
    reps = max(min_repeats, min(repeats, int(seconds * 1000.0 / max(first, 1e-3))))
    for _ in range(warmup if first < 250 else min(warmup, 1)):
        fn()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    mid = len(times) // 2
    return (times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])), reps


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"torch_sdpa.py: PyTorch is not installed here ({e}); no PyTorch rows", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("torch_sdpa.py: no CUDA GPU is available to PyTorch; no PyTorch rows", file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 means FP32, as in fa_bench
    torch.backends.cudnn.allow_tf32 = False
    try:
        inputs = Inputs(args.lib)
    except OSError as e:
        print(f"torch_sdpa.py: cannot load {args.lib} ({e}); build it with "
              "`cmake --preset bench && cmake --build --preset bench`", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    all_dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    unknown = [p for p in args.precisions.split(",") if p not in all_dtypes]
    if unknown:
        print(f"torch_sdpa.py: unknown precision {unknown[0]!r} (fp32, fp16, bf16)", file=sys.stderr)
        return 2
    dtypes = {p: all_dtypes[p] for p in args.precisions.split(",")}
    causal = bool(args.causal)
    backends = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
                "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_math": SDPBackend.MATH}
    print(f"torch_sdpa.py on {name}, PyTorch {torch.__version__}, CUDA {torch.version.cuda}")

    with open(args.csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        for d in args.dim:
            for n in args.seq:
                b, h = args.batch, args.heads
                scale = 1.0 / math.sqrt(d)
                print(f"\nB={b} H={h} N={n} d={d}", flush=True)
                q32, k32, v32 = (t.to(dev) for t in inputs.qkv(torch, b, h, n, d, args.seed))
                rows = inputs.rows(b, h, n, d, args.check_rows)
                want = reference_rows(torch, q32, k32, v32, rows, scale, causal)
                flat = torch.tensor(rows, device=dev)
                flops = 4.0 * b * h * n * n * d
                for prec, dt in dtypes.items():
                    q, k, v = (t.to(dt) for t in (q32, k32, v32))
                    sdpa = lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal)
                    variants = [("sdpa_default", None, sdpa)]  # whatever SDPA picks by itself
                    variants += [(bn, (lambda be=be: sdpa_kernel(be)), sdpa) for bn, be in backends.items()]
                    if not causal:
                        variants.append(("torch_naive", None,
                                         lambda q=q, k=k, v=v: torch.softmax((q @ k.transpose(-2, -1)) * scale, -1) @ v))
                    for vname, ctx, fn in variants:
                        row = dict.fromkeys(HEADER, "")
                        row.update(source="pytorch", name=vname, precision=prec, backend="cuda", device=name,
                                   cuda=torch.version.cuda, batch=b, heads=h, seq_q=n, seq_kv=n, dim=d, causal=int(causal),
                                   repeats=0, checked_rows=0, note=f"PyTorch {torch.__version__}")
                        # The naive path and the math backend hold the N x N matrix (and more).
                        if vname in ("torch_naive", "sdpa_math"):
                            need = 3 * b * h * n * n * q.element_size()
                            free = torch.cuda.mem_get_info()[0]
                            if need > 0.9 * free:
                                row.update(status="skipped",
                                           note=f"needs about {need / 2**30:.1f} GiB for the N x N matrices; "
                                                f"{free / 2**30:.1f} GiB free")
                                out.writerow(row[c] for c in HEADER)
                                print(f"  {vname:15s} {prec}  skipped: {row['note']}", flush=True)
                                continue
                        try:
                            torch.cuda.empty_cache()
                            torch.cuda.reset_peak_memory_stats()
                            base = torch.cuda.memory_allocated()
                            with warnings.catch_warnings(record=True) as said, \
                                    (ctx() if ctx else torch.no_grad()), torch.no_grad():
                                warnings.simplefilter("always")
                                o = fn()
                                torch.cuda.synchronize()
                                peak = torch.cuda.max_memory_allocated() - base
                                got = o.reshape(-1, d)[flat].double()
                                del o
                                ms, reps = timed(torch, fn, args.warmup, args.repeats, args.min_repeats,
                                                 args.seconds)
                            inputs_bytes = 3 * q.numel() * q.element_size()
                            row.update(median_ms=f"{ms:.6g}", repeats=reps, tflops=f"{flops / ms / 1e9:.4g}",
                                       workspace_bytes=max(0, peak - q.numel() * q.element_size()),
                                       device_bytes=inputs_bytes + peak,
                                       max_abs_err=f"{(got - want).abs().max().item():.3g}",
                                       checked_rows=len(rows), status="measured")
                            print(f"  {vname:15s} {prec} {ms:10.3f} ms {flops / ms / 1e9:7.2f} TFLOP/s  "
                                  f"max err {float(row['max_abs_err']):.2e}", flush=True)
                        except torch.cuda.OutOfMemoryError as e:
                            row.update(status="skipped", note="out of memory: " + str(e).split("\n")[0][:160])
                            print(f"  {vname:15s} {prec}  skipped: out of memory", flush=True)
                        except RuntimeError as e:
                            # PyTorch says why a backend declined in warnings; the error itself is generic.
                            reason = decline_reason([str(w.message) for w in said]) or " ".join(str(e).split())[:300]
                            row.update(status="unsupported", note=reason)
                            print(f"  {vname:15s} {prec}  unsupported", flush=True)
                        out.writerow(row[c] for c in HEADER)
                        f.flush()
                    del q, k, v
                del q32, k32, v32, want
                torch.cuda.empty_cache()
    print(f"\nPyTorch rows: {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
