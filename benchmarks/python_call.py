#!/usr/bin/env python3
"""What one call of fa_stages.attention costs a training step, beside SDPA: a forward and
backward pass on q, k and v as the GPT of python/examples/train_gpt.py makes them (views
of one linear layer's output, bfloat16), its output reshaped back as the model does; by the
compiled operator (python/torch_ops.cpp, where the build made it), by the module's Python
autograd.Function (the operator turned off), and by SDPA's FlashAttention-2 backend.

Two figures, each the median of --rounds rounds of --calls calls:
  host: the time the Python thread spends issuing one forward and backward pass (no
        synchronisation inside a round; the GPU runs behind), which is what a step that
        is bound by its host feels;
  GPU:  the time one forward and backward pass takes on the GPU, from CUDA events around
        the round: the GPU first sleeps (torch.cuda._sleep) while the host queues the
        whole round, so that the events time the kernels back to back, not the host.

    PYTHONPATH=build/python python3 benchmarks/python_call.py [--batch 16 --heads 6 --seq 1024 --dim 64]
"""

import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("skipped: PyTorch is not installed")
    sys.exit(77)

import fa_stages


def sdpa_flash(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device")
        return 77
    b, h, n, d = args.batch, args.heads, args.seq, args.dim
    x = torch.randn(b, n, 3 * h * d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(b, n, h * d, device="cuda", dtype=torch.bfloat16)
    print("%s, torch %s; B=%d H=%d N=%d d=%d causal bfloat16, q, k, v views of one [B, N, 3·H·d] tensor"
          % (torch.cuda.get_device_name(), torch.__version__, b, h, n, d))
    def python_autograd(q, k, v):  # the compiled operator turned off: fa_stages' Python autograd.Function
        operator, fa_stages._use_operator = fa_stages._use_operator, False
        try:
            return fa_stages.attention(q, k, v, causal=True)
        finally:
            fa_stages._use_operator = operator

    functions = [("fa_stages.attention", lambda q, k, v: fa_stages.attention(q, k, v, causal=True)),
                 ("fa_stages, Python", python_autograd), ("SDPA flash", sdpa_flash)]
    print("fa_stages.attention runs the compiled operator: %s" % fa_stages.compiled_operator("cuda"))

    def one_pass(attention):
        q, k, v = x.view(b, n, 3, h, d).permute(2, 0, 3, 1, 4)
        y = attention(q, k, v).transpose(1, 2).reshape(b, n, h * d)
        y.backward(grad)

    for name, attention in functions:
        for _ in range(5):  # warm up: the allocator's pools, "auto"'s question, the kernels' first launch
            one_pass(attention)
        torch.cuda.synchronize()
        host, gpu = [], []
        for _ in range(args.rounds):
            start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(200_000_000)  # about 0.1 s at the H100's clock: longer than the host's round
            start_event.record()
            start = time.perf_counter()
            for _ in range(args.calls):
                one_pass(attention)
            host.append((time.perf_counter() - start) / args.calls * 1e3)
            end_event.record()
            torch.cuda.synchronize()
            gpu.append(start_event.elapsed_time(end_event) / args.calls)
            x.grad = None
        print("%-20s host %.3f ms, GPU %.3f ms a forward and backward pass (medians of %d rounds of %d)"
              % (name, statistics.median(host), statistics.median(gpu), args.rounds, args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
