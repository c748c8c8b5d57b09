#!/usr/bin/env python3
"""What a training step of python/examples/train_gpt.py's GPT costs with each attention, the
steps taken in turns in one process, so that the host's drift over time touches each alike.

For each attention, three medians:
  step: the wall time of one step (forward, backward, clipping, AdamW), synchronised on
        both sides, as train_gpt.py times it;
  host: the time the Python thread spends issuing the step (before the closing
        synchronisation): a step whose host time exceeds its GPU time is bound by the host;
  GPU:  the step's time on the GPU, from CUDA events, with the step queued behind a sleeping
        kernel so that the events time the kernels back to back, not the host.

Attentions: "sdpa" (its FlashAttention-2 backend, by name, as train_gpt.py's baseline),
"fa_stages" (the compiled operator, python/torch_ops.cpp, where the build made it), "none"
(O = q, a floor: the rest of the model alone), "fa_stages_autograd" (fa_stages through its
Python autograd.Function, the compiled operator turned off), and "fa_stages_python": the
latter with its two C calls (forward, backward) replaced by calls that do nothing, so that its
host time is the module's Python alone (its outputs, gradients and GPU time mean nothing).

    PYTHONPATH=build/python python3 benchmarks/gpt_step.py [--batch 16] [--turns 150] [--graph]

--graph: each attention's step captured in a CUDA graph and replayed (as train_gpt.py --graph).
"""

import argparse
import importlib.util
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("train_gpt", os.path.join(ROOT, "python", "examples", "train_gpt.py"))
train_gpt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_gpt)


def _nothing(*args):
    """Stands in for a C call of fa_stages ("fa_stages_python"): returns success at once."""
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--turns", type=int, default=150, help="steps of each attention, taken in turns")
    parser.add_argument("--attentions", default="sdpa,fa_stages,none")
    parser.add_argument("--graph", action="store_true")
    args = parser.parse_args()
    if args.graph and "fa_stages_python" in args.attentions.split(","):
        parser.error("fa_stages_python times the host, which a CUDA graph takes out of the step")
    if not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device")
        return 77
    layers, heads, head_dim, context, vocab = 6, 6, 64, 1024, 131  # train_gpt.py's model and vocabulary
    device = torch.device("cuda")
    names = args.attentions.split(",")
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, vocab, (args.batch, context), generator=g).to(device)
    y = torch.randint(0, vocab, (args.batch, context), generator=g).to(device)

    steps = {}
    alive = []  # a graph replays on its model's and optimiser's memory: they must outlive it
    for name in names:
        torch.manual_seed(0)
        attention = (lambda q, k, v: q) if name == "none" else train_gpt.attention_of(
            "fa_stages" if name.startswith("fa_stages") else name)
        model = train_gpt.GPT(vocab, context, layers, heads, head_dim, attention).to(device)
        optimiser = train_gpt.optimiser_for(model, 1e-4, args.graph)

        def step(model=model, optimiser=optimiser, name=name):
            if name not in ("fa_stages_autograd", "fa_stages_python"):
                train_gpt.train_step(model, optimiser, x, y, vocab, args.graph)
                return
            fa_stages = train_gpt.fa_stages
            lib = fa_stages._library(device)
            calls, operator = (lib.forward, lib.backward), fa_stages._use_operator
            fa_stages._use_operator = False  # the Python autograd.Function
            if name == "fa_stages_python":
                lib.forward = lib.backward = _nothing
            try:
                train_gpt.train_step(model, optimiser, x, y, vocab, args.graph)
            finally:
                (lib.forward, lib.backward), fa_stages._use_operator = calls, operator

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (off the default stream, as CUDA graphs ask)
            for _ in range(10):
                step()
        torch.cuda.current_stream().wait_stream(side)
        if args.graph:
            graph = torch.cuda.CUDAGraph()
            optimiser.zero_grad(set_to_none=True)
            with torch.cuda.graph(graph):
                step()
            step = graph.replay
            alive.append((model, optimiser, graph))
        steps[name] = step
    torch.cuda.synchronize()

    wall = {name: [] for name in names}
    host = {name: [] for name in names}
    for turn in range(args.turns):
        for name in (names if turn % 2 == 0 else names[::-1]):
            torch.cuda.synchronize()
            start = time.perf_counter()
            steps[name]()
            host[name].append(time.perf_counter() - start)
            torch.cuda.synchronize()
            wall[name].append(time.perf_counter() - start)
    gpu = {name: [] for name in names}
    for _ in range(15):
        for name in names:
            torch.cuda.synchronize()
            torch.cuda._sleep(100_000_000)  # about 50 ms: longer than the host takes to queue a step
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            steps[name]()
            end.record()
            torch.cuda.synchronize()
            gpu[name].append(begin.elapsed_time(end))

    print("%s, torch %s; GPT of %d layers, %d heads of d = %d, context %d, batch %d, bfloat16 autocast%s; "
          "medians of %d steps each, taken in turns"
          % (torch.cuda.get_device_name(), torch.__version__, layers, heads, head_dim, context, args.batch,
             ", CUDA graphs" if args.graph else "", args.turns))
    for name in names:
        print("%-18s step %6.2f ms   host %6.2f ms   GPU %6.2f ms"
              % (name, 1e3 * statistics.median(wall[name]), 1e3 * statistics.median(host[name]),
                 statistics.median(gpu[name])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
