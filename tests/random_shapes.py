#!/usr/bin/env python3
"""Every stage's demo on shapes drawn at random, each checked against the float64 reference.

    python3 tests/random_shapes.py --bin build/bin --cpu --seconds 120      # the CPU twins
    python3 tests/random_shapes.py --bin build/bin --seconds 300            # the GPU demos
    python3 tests/random_shapes.py --bin build/bin --stages 12,13 --cases 50 --seed 7

The tests run each stage on shapes chosen when they were written. This draws new ones: batch,
heads, query and key lengths (from 1 up, tile sizes and their neighbours more often), head
dim, dtype, causal or not, the inputs' magnitude (logits in the hundreds at times), one of
the stage's variants now and then, and for stage 09 the key/value heads and each sequence's
cache length, for stage 12 a window, packed documents or a random block mask. Each case runs
the demo (which compares its output, and the backward stages their gradients, with the float64
reference) and is judged by its exit code (common/errors.h):

  0  passed;  2  refused with a message (a dtype or head dim the stage does not run, say):
  not a failure, but the refusals are listed so that a valid shape refused shows;
  77 no GPU: the whole run stops there and exits 77 (CTest's skipped);
  anything else (a check that failed, no memory, a CUDA error, a crash, a hang): a failure.

A (stage, dtype, head dim) that was refused is not drawn again. Every case's command line
is printed, so a failure can be run again by hand. Exit status: 1 if any case failed.
"""
import argparse
import math
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict

EDGES = [1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257]


def length(rng, most):
    """A sequence length in [1, most]: an edge of a tile one time in three, else log-uniform."""
    if rng.random() < 1 / 3:
        edges = [e for e in EDGES if e <= most]
        return rng.choice(edges)
    return max(1, min(most, int(math.exp(rng.uniform(0, math.log(most))))))


def demos(bin_dir, cpu):
    """The stage demos in bin_dir: {"07": path}, the CPU twins with cpu, else the GPU ones."""
    out = {}
    for name in sorted(os.listdir(bin_dir)):
        m = re.fullmatch(r"stage(\d\d)_[a-z0-9_]+?(_cpu)?", name)
        if not m or bool(m.group(2)) != cpu:
            continue
        path = os.path.join(bin_dir, name)
        if os.access(path, os.X_OK):
            out[m.group(1)] = path
    return out


def stage_help(path):
    """The dtypes and variants a demo's --help lists."""
    text = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60).stdout
    dtypes = ["fp32", "fp16", "bf16"] if "--dtype" in text else [None]  # stage 02: fp32, no --dtype
    m = re.search(r"--dtype TYPE\s+element type[^:]*: ([^(\n]*)", text)
    if m:
        dtypes = [t for t in ("fp32", "fp16", "bf16") if t in m.group(1)]
    variants = re.findall(r"^\s{20,}([a-z0-9_]+): ", text, flags=re.M)
    return dtypes, [v for v in variants if v != "tuned"]


def draw(rng, stage, dtypes, variants, refused, big):
    """One case for a stage: the demo's arguments, or None if every dtype/dim was refused."""
    dims = [d for d in (16, 32, 64, 128) for _ in range(1 if d < 64 else 3)]
    pairs = [(t, d) for t in dtypes for d in dims if (t, d) not in refused]
    if not pairs:
        return None
    dtype, dim = rng.choice(pairs)
    most = 3000 if big else 200
    backward = stage in ("10", "11", "13")
    if backward:
        most = 1500 if big else 130
    b, h = rng.randint(1, 3), rng.randint(1, 4)
    nq, nkv = length(rng, most), length(rng, most)
    causal = stage != "02" and rng.random() < 0.4  # stage 02 is a softmax of a given matrix
    args = (["--dtype", dtype] if dtype else []) + ["--dim", str(dim), "--batch", str(b)]
    if stage == "09":  # decoding: a few query rows, grouped key/value heads, ragged caches
        hkv = rng.choice([1, 2, 4])
        h = hkv * rng.choice([1, 2, 4])
        nq = rng.choice([1, 1, 1, 2, 4, 8])
        nkv = length(rng, 8000 if big else 400)
        nkv = max(nkv, nq)  # causal: the new queries are the last Nq positions of each cache
        lens = [str(rng.randint(nq if causal else 1, nkv)) for _ in range(b - 1)] + [str(nkv)]
        rng.shuffle(lens)
        args += ["--kv-heads", str(hkv), "--kv-lens", ",".join(lens), "--splits", str(rng.choice([0, 0, 1, 3, 8]))]
    if stage == "12":  # one of the masks, or none
        kind = rng.choice(["window", "window", "docs", "blocks", "none"])
        if kind == "window":
            left = rng.choice([None, 0, 1, length(rng, most), length(rng, most)])
            right = None if causal else rng.choice([None, 0, length(rng, most)])
            if left is None and right is None:
                left = length(rng, most)
            args += ["--window-left", str(left)] if left is not None else []
            args += ["--window-right", str(right)] if right is not None else []
        elif kind == "docs":
            nkv = nq
            args += ["--docs", str(rng.randint(1, max(1, min(nq, 6))))]
        elif kind == "blocks":
            args += ["--block-density", str(rng.choice([0.1, 0.3, 0.5, 0.9]))]
    args += ["--heads", str(h), "--seq-q", str(nq), "--seq-kv", str(nkv)]
    if causal:
        args.append("--causal")
    magnitude = rng.choice([1, 1, 1, 0.1, 4, 30])
    args += ["--magnitude", str(magnitude), "--seed", str(rng.randint(1, 10**6))]
    # A variant now and then, where variants run: fp16 (fp32 for stage 10), d = 64 and 128.
    if variants and dim in (64, 128) and dtype in (None, "fp32", "fp16") and rng.random() < 0.2:
        args += ["--variant", rng.choice(variants)]
    if backward:
        args += ["--check-heads", "2"]
    return dtype, dim, args


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin", help="where the demos are (default: build/bin)")
    ap.add_argument("--cpu", action="store_true", help="the CPU twins (stageNN_*_cpu), small shapes")
    ap.add_argument("--stages", default="", help="comma-separated stage numbers (default: every demo found)")
    ap.add_argument("--cases", type=int, default=0, help="stop after this many cases (0: no limit)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: no limit)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the draws (default: 1)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a case may take (default: 300)")
    a = ap.parse_args()
    if a.cases <= 0 and a.seconds <= 0:
        ap.error("give --cases or --seconds")
    found = demos(a.bin, a.cpu)
    wanted = [s.zfill(2) for s in a.stages.split(",") if s] or sorted(found)
    missing = [s for s in wanted if s not in found]
    if missing or not wanted:
        sys.exit(f"no demo for stage(s) {', '.join(missing) or '(any)'} in {a.bin}")
    info = {s: stage_help(found[s]) for s in wanted}
    rng = random.Random(a.seed)
    refused, refusals = defaultdict(set), Counter()
    failures, passed, start, n = [], Counter(), time.time(), 0
    while (a.cases <= 0 or n < a.cases) and (a.seconds <= 0 or time.time() - start < a.seconds):
        stage = wanted[n % len(wanted)]
        n += 1
        dtypes, variants = info[stage]
        case = draw(rng, stage, dtypes, variants, refused[stage], big=not a.cpu)
        if case is None:
            continue
        dtype, dim, args = case
        cmd = [found[stage]] + args + ["--brief"]
        shown = " ".join([os.path.basename(cmd[0])] + cmd[1:])
        t0 = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            rc, out = r.returncode, (r.stdout + r.stderr).strip()
        except subprocess.TimeoutExpired:
            rc, out = "timeout", f"no result after {a.timeout:.0f} s"
        took = time.time() - t0
        last = out.splitlines()[-1] if out else ""
        if rc == 77:  # no GPU (common/errors.h): skipped, as CTest reads 77
            print(f"skipped: {last}")
            return 77
        if rc == 0:
            passed[stage] += 1
            print(f"ok      {took:6.1f} s  {shown}", flush=True)
        elif rc == 2:
            message = re.sub(r"^\S+: error: ", "", last)
            refusals[(stage, message)] += 1
            if "--variant" not in args:  # (a variant's limits are its own, not the stage's)
                if re.search(r"head dim", message):
                    refused[stage].add((dtype, dim))
                elif re.search(r"only, not " + str(dtype), message):
                    refused[stage].update((dtype, d) for d in (16, 32, 64, 128))
            print(f"refused {took:6.1f} s  {shown}\n        {message}", flush=True)
        else:
            failures.append((shown, rc, out))
            print(f"FAILED  {took:6.1f} s  {shown}  (exit {rc})\n" + "\n".join("        " + l for l in out.splitlines()[-15:]),
                  flush=True)
    print(f"\n{n} cases in {time.time() - start:.0f} s, seed {a.seed}: {sum(passed.values())} passed, "
          f"{sum(refusals.values())} refused, {len(failures)} failed")
    for stage in wanted:
        print(f"  stage {stage}: {passed[stage]} passed")
    for (stage, message), count in sorted(refusals.items()):
        print(f"  stage {stage} refused {count}x: {message}")
    for shown, rc, _ in failures:
        print(f"  FAILED (exit {rc}): {shown}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
