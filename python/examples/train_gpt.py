#!/usr/bin/env python3
"""A small GPT trained on the repository's own lessons, character by character, once with
fa_stages.attention and once with PyTorch's scaled_dot_product_attention: the same seed,
data and steps. Writes the loss curves (losses.csv, loss.svg) and results.json.

    PYTHONPATH=build/python python3 python/examples/train_gpt.py --out /tmp/gpt           # GPU: 6 layers, context 1024
    PYTHONPATH=build/python python3 python/examples/train_gpt.py --device cpu --tiny --out /tmp/gpt

--graph: capture one training step in a CUDA graph and replay it for every later step (in
every run), which takes the host out of the step.
--seeds N: more seeds of each (fa_stages 0..N-1, the baseline 0..N), for the spread of the losses.
--check-loss X: exit 1 unless fa_stages' final validation loss is below X.
--check-match T: train fa_stages and the baseline with seed 0 only; exit 1 unless their
validation losses agree within T at every evaluation.
"""

import argparse
import glob
import json
import math
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("skipped: PyTorch is not installed (Debian: apt-get install python3-torch)")
    sys.exit(77)

import fa_stages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def corpus():
    """Every lesson and document of the repository, in a fixed order: about 180 KB of text."""
    files = sorted(glob.glob(os.path.join(ROOT, "stages", "*", "README.md"))) + sorted(
        glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return "\n\n".join(open(f, encoding="utf-8").read() for f in files)


class Block(torch.nn.Module):
    def __init__(self, width, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = self.attention(q, k, v)  # [B, H, T, d], causal
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab, context, layers, heads, head_dim, attention):
        super().__init__()
        width = heads * head_dim
        self.tokens = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads, attention) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def math_attention(q, k, v):
    """PyTorch before 2.0 has no scaled_dot_product_attention: the same in plain operations."""
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
    return torch.matmul(torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1), v)


GRAPH_WARMUP = 3  # with --graph: the steps run as usual before one is captured

# The baseline: PyTorch's own attention.
BASELINE = "sdpa" if hasattr(F, "scaled_dot_product_attention") else "torch_math"


def attention_of(name):
    if name == "fa_stages":
        return lambda q, k, v: fa_stages.attention(q, k, v, causal=True)
    if name == "sdpa":
        try:  # its FlashAttention-2 backend, by name (PyTorch 2.3 and later)
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415
        except ImportError:
            return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def flash(q, k, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return flash
    return math_attention


def optimiser_for(model, lr, graphed):
    """AdamW; for a CUDA graph (`graphed`) it steps on the GPU and reads the learning rate
    from a tensor, so that a replayed step sees the value set before it."""
    if graphed:
        device = next(model.parameters()).device
        return torch.optim.AdamW(model.parameters(), lr=torch.tensor(lr, device=device), weight_decay=0.1,
                                 capturable=True)
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)


def loss_on(model, x, y, vocab, graphed):
    """The next-character loss of a batch; on a GPU with bfloat16 matmuls and float32 weights
    (no cache of cast weights where the step is captured in a graph)."""
    if x.device.type == "cuda":
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not graphed):
            logits = model(x)
    else:
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))


def train_step(model, optimiser, x, y, vocab, graphed):
    """One training step (forward, backward, gradients clipped to norm 1, AdamW); its loss."""
    loss = loss_on(model, x, y, vocab, graphed)
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimiser.step()
    return loss


def train(args, data, vocab, attention_name, seed):
    """One run; returns per-step training losses, validation losses and tokens per second."""
    device = torch.device(args.device)
    torch.manual_seed(seed)
    model = GPT(vocab, args.context, args.layers, args.heads, args.head_dim, attention_of(attention_name)).to(device)
    graphed = args.graph and device.type == "cuda"
    optimiser = optimiser_for(model, args.lr, graphed)
    split = int(0.9 * len(data))
    train_data, val_data = data[:split], data[split:]
    batches = torch.Generator().manual_seed(1234)  # the same batches for every run

    def batch(source, gen):
        start = torch.randint(0, len(source) - args.context - 1, (args.batch,), generator=gen)
        x = torch.stack([source[s: s + args.context] for s in start.tolist()])
        y = torch.stack([source[s + 1: s + 1 + args.context] for s in start.tolist()])
        return x.to(device), y.to(device)

    def validation():
        gen = torch.Generator().manual_seed(99)
        with torch.no_grad():
            return sum(loss_on(model, *batch(val_data, gen), vocab, graphed).item()
                       for _ in range(args.val_batches)) / args.val_batches

    def step_of(x, y):
        return train_step(model, optimiser, x, y, vocab, graphed)

    # With --graph, the first GRAPH_WARMUP steps run as usual, on a side stream (so that what
    # the libraries set up lazily is set up before the capture, as PyTorch's CUDA graph
    # documentation asks); then one step is captured in a CUDA graph, and every later step
    # copies its batch into the graph's inputs and replays it: no host work per kernel.
    side = torch.cuda.Stream(device) if graphed else None
    captured = None  # (graph, its x, its y, its loss)
    losses, vals, timed = [], [], []
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for group in optimiser.param_groups:
            if graphed:
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        x, y = batch(train_data, batches)
        if graphed and step >= GRAPH_WARMUP and captured is None:
            graph, gx, gy = torch.cuda.CUDAGraph(), x.clone(), y.clone()
            optimiser.zero_grad(set_to_none=True)
            with torch.cuda.graph(graph):
                gloss = step_of(gx, gy)
            captured = (graph, gx, gy, gloss)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        if captured is not None:
            captured[1].copy_(x)
            captured[2].copy_(y)
            captured[0].replay()
            loss = captured[3]
        elif graphed:
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                loss = step_of(x, y)
            torch.cuda.current_stream(device).wait_stream(side)
        else:
            loss = step_of(x, y)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup_timing:
            timed.append(time.perf_counter() - start)
        losses.append(loss.item())
        if (step + 1) % args.val_every == 0 or step + 1 == args.steps:
            vals.append((step + 1, validation()))
            print("%-10s seed %d step %5d  train %.4f  val %.4f" % (attention_name, seed, step + 1, losses[-1],
                                                                    vals[-1][1]), flush=True)
    tokens = args.batch * args.context
    median = sorted(timed)[len(timed) // 2] if timed else float("nan")
    return {"attention": attention_name, "seed": seed, "train": losses, "val": vals, "graph": graphed,
            "step_ms_median": median * 1e3, "tokens_per_s": tokens / median if timed else float("nan")}


def svg_plot(runs, path):
    """The training loss of each run against the step (a moving average of 20 steps)."""
    width, height, left, right, top, bottom = 760, 420, 60, 20, 20, 50
    colours = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
    curves = []
    for run in runs:
        avg, window = [], []
        for x in run["train"]:
            window = (window + [x])[-20:]
            avg.append(sum(window) / len(window))
        curves.append(avg)
    steps = max(len(c) for c in curves)
    lo, hi = min(min(c) for c in curves), max(max(c) for c in curves)
    sx = lambda i: left + (width - left - right) * i / max(1, steps - 1)  # noqa: E731
    sy = lambda v: top + (height - top - bottom) * (hi - v) / max(1e-9, hi - lo)  # noqa: E731
    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">'
         % (width, height), '<rect width="100%" height="100%" fill="white"/>']
    for i in range(6):
        v = lo + (hi - lo) * i / 5
        s.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, width - right, sy(v), sy(v)))
        s.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>' % (left - 5, sy(v) + 4, v))
    for i in range(6):
        step = (steps - 1) * i // 5
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (sx(step), height - bottom + 18, step + 1))
    s.append('<text x="%d" y="%d" text-anchor="middle">step (training loss, mean of the last 20 steps)</text>'
             % ((left + width - right) // 2, height - 10))
    for n, (run, curve) in enumerate(zip(runs, curves)):
        points = " ".join("%.1f,%.1f" % (sx(i), sy(v)) for i, v in enumerate(curve))
        dash = ' stroke-dasharray="6,4"' if run["attention"] == "fa_stages" else ""
        s.append('<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>'
                 % (colours[n % len(colours)], dash, points))
        s.append('<text x="%d" y="%d" fill="%s">%s, seed %d%s</text>'
                 % (width - right - 200, top + 16 + 16 * n, colours[n % len(colours)], run["attention"], run["seed"],
                    " (dashed)" if dash else ""))
    s.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(s) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="2 layers, 2 heads of d = 16, context 64 (CPU backend)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None, help="sequences a step (default 16; --tiny: 8)")
    parser.add_argument("--out", default=None, help="directory for losses.csv, loss.svg and results.json")
    parser.add_argument("--check-loss", type=float, default=None)
    parser.add_argument("--check-match", type=float, default=None,
                        help="also train the baseline with the same seed; exit 1 unless every validation loss of the "
                             "two runs agrees within this")
    parser.add_argument("--only", choices=["fa_stages", "baseline"], default=None, help="one run only")
    parser.add_argument("--graph", action="store_true",
                        help="capture a training step in a CUDA graph and replay it (every run; CUDA only)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="fa_stages trains with seeds 0 to N-1, the baseline with 0 to N, in turns, the baseline "
                             "first (default 1: the baseline, fa_stages, the baseline)")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.tiny:
        args.layers, args.heads, args.head_dim, args.context, args.batch = 2, 2, 16, 64, args.batch or 8
        args.steps, args.lr, args.val_batches, args.val_every = args.steps or 60, 3e-3, 2, 20
    else:
        args.layers, args.heads, args.head_dim, args.context, args.batch = 6, 6, 64, 1024, args.batch or 16
        args.steps, args.lr, args.val_batches, args.val_every = args.steps or 1000, 1e-3, 8, 100
    args.warmup, args.warmup_timing = max(1, args.steps // 20), min(10, args.steps // 2)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device")
        return 77
    text = corpus()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    print("corpus: %d characters, vocabulary %d; %d layers, %d heads of d = %d, context %d, batch %d, %d steps"
          % (len(text), len(chars), args.layers, args.heads, args.head_dim, args.context, args.batch, args.steps))
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else fa_stages.device_name("cpu")
    # The runs take turns, the baseline first and last, so that anything that warms up or
    # drifts over the process's life (measured: later runs step faster) touches both alike.
    plan = [run for seed in range(args.seeds) for run in ((BASELINE, seed), ("fa_stages", seed))]
    plan.append((BASELINE, args.seeds))
    if args.only:
        plan = [(args.only if args.only == "fa_stages" else BASELINE, 0)]
    if args.check_match is not None:
        plan = [("fa_stages", 0), (BASELINE, 0)]
    runs = [train(args, data, len(chars), name, seed) for name, seed in plan]
    runs.sort(key=lambda r: (r["attention"] != "fa_stages", r["seed"]))  # fa_stages first in every output
    for run in runs:
        print("%-10s seed %d: final val %.4f, %.1f ms a step (median), %.0f tokens/s"
              % (run["attention"], run["seed"], run["val"][-1][1], run["step_ms_median"], run["tokens_per_s"]))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "losses.csv"), "w") as f:
            f.write("step," + ",".join("%s_seed%d" % (r["attention"], r["seed"]) for r in runs) + "\n")
            for i in range(args.steps):
                f.write("%d," % (i + 1) + ",".join("%.5f" % r["train"][i] for r in runs) + "\n")
        svg_plot(runs, os.path.join(args.out, "loss.svg"))
        summary = {"device": device_name, "torch": torch.__version__, "command": " ".join(sys.argv),
                   "config": {k: getattr(args, k) for k in ("layers", "heads", "head_dim", "context", "batch",
                                                              "steps", "lr", "graph")},
                   "runs": [{k: r[k] for k in ("attention", "seed", "val", "step_ms_median", "tokens_per_s")}
                            for r in runs]}
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(summary, f, indent=1)
    failed = False
    if args.check_match is not None:
        worst = max(abs(a[1] - b[1]) for a, b in zip(runs[0]["val"], runs[1]["val"]))
        failed = not worst <= args.check_match
        print("%s: the validation losses of fa_stages and %s (seed 0) differ by at most %.4f (allowed %.4f)"
              % ("FAILED" if failed else "passed", BASELINE, worst, args.check_match))
    if args.check_loss is not None:
        final = runs[0]["val"][-1][1]
        if not final < args.check_loss:
            print("FAILED: fa_stages' final validation loss %.4f is not below %.4f" % (final, args.check_loss))
            return 1
        print("passed: fa_stages' final validation loss %.4f is below %.4f" % (final, args.check_loss))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
