#!/usr/bin/env python3
"""Accuracy of the float32 gradients at large logits: fa_stages (stage 05's forward pass, then
stage 10) against float64 autograd, beside PyTorch's own float32 autograd on the same inputs.

Inputs uniform in [-X, X] (logits up to about X² at d = 64), B = 1, H = 2,
N = 200, four seeds, causal and not. For each X it prints the error of each gradient over
PyTorch float32's error, the median over the eight runs, both as the largest element's error
and as the norm of the error, for two ways of handing the forward's statistics over:
  lse:       forward() then backward(): the float32 log-sum-exp alone;
  m and 1/l: attention(): stage 05's m and 1/l of each row as well (the finished path).
Stage 10's LOG.md (accuracy at large logits) records a run. Runs on the CPU backend (or on a
GPU with --device cuda): an accuracy measurement, not a timing.

    PYTHONPATH=build/python python3 benchmarks/large_logits.py [--device cpu]
"""

import argparse
import statistics
import sys

try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed")
    sys.exit(77)

import fa_stages

N, D = 200, 64


def errors(x, seed, causal, handover, device):
    """Each gradient's (largest error, norm of the error) over PyTorch float32's."""
    g = torch.Generator().manual_seed(seed)
    shape = (1, 2, N, D)
    q, k, v = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 * x - x for _ in range(3))
    grad_o = torch.randn(shape, generator=g, dtype=torch.float64)
    grads = {}
    for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
        leaves = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
        s = leaves[0] @ leaves[1].transpose(-1, -2) / D ** 0.5
        if causal:
            s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
        (torch.softmax(s, -1) @ leaves[2]).backward(grad_o.to(dtype))
        grads[name] = [t.grad for t in leaves]
    leaves = [t.float().to(device).requires_grad_(True) for t in (q, k, v)]
    if handover == "m and 1/l":
        fa_stages.attention(*leaves, causal=causal).backward(grad_o.float().to(device))
        got = [t.grad for t in leaves]
    else:
        with torch.no_grad():
            o, lse = fa_stages.forward(*leaves, causal=causal)
            got = fa_stages.backward(*leaves, o, lse, grad_o.float().to(device), causal=causal)
    out = []
    for mine, base, want in zip(got, grads["float32"], grads["float64"]):
        mine, base = (t.double().cpu() - want for t in (mine, base))
        out.append((mine.abs().max().item() / base.abs().max().item(), mine.norm().item() / base.norm().item()))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print("kernels on: %s; torch %s; B=1 H=2 N=%d d=%d, seeds 0-3, causal and not" % (
        fa_stages.device_name(args.device), torch.__version__, N, D))
    print("error over PyTorch float32's, median of 8 runs (worst dV in brackets)")
    print("| inputs in | handover | dQ largest | dK largest | dV largest | dQ norm | dK norm | dV norm |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for x in (3, 10, 30, 60):
        for handover in ("lse", "m and 1/l"):
            runs = [errors(x, seed, causal, handover, args.device) for causal in (False, True) for seed in range(4)]
            cells = []
            for kind in (0, 1):
                for grad in range(3):
                    each = [r[grad][kind] for r in runs]
                    cells.append("%.2f" % statistics.median(each) + (" (%.2f)" % max(each) if grad == 2 else ""))
            print("| [−%d, %d] | %s | %s |" % (x, x, handover, " | ".join(cells)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
