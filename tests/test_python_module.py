#!/usr/bin/env python3
"""fa_stages, the stages as a PyTorch function: every stage's forward pass and the
gradients against float64 math on fresh seeded inputs, and every bad input refused with a
message. Runs on CPU tensors (the CPU backend) and, where PyTorch has CUDA, on the GPU.

    PYTHONPATH=build/python python3 tests/test_python_module.py [--device cpu|cuda] [--quick]

Exit 0: passed; 1: failed; 77: skipped (no PyTorch, or no GPU for --device cuda).
"""

import argparse
import math
import os
import sys
import warnings

try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed (Debian: apt-get install python3-torch)")
    sys.exit(77)

import fa_stages

FAILURES = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILURES.append(what)


def reference(q, k, v, causal, scale):
    """softmax(scale·Q·Kᵀ)·V in float64, the causal mask aligned top-left (as is_causal=True)."""
    s = torch.matmul(q.double(), k.double().transpose(-1, -2)) * scale
    if causal:
        nq, nkv = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nkv, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v.double())


def same_precision_baseline(q, k, v, causal, scale):
    """What a plain matmul-softmax-matmul in the inputs' dtype gives: for half precision,
    P rounded to the dtype, products accumulated in float32, O rounded (the yardstick)."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if causal:
        nq, nkv = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nkv, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    p = torch.softmax(s, dim=-1).to(q.dtype).float()
    return torch.matmul(p, v.float()).to(q.dtype)


def inputs(shape_q, shape_kv, dtype, device, seed, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(shape_q, generator=g).to(device=device, dtype=dtype)
    k = torch.randn(shape_kv, generator=g).to(device=device, dtype=dtype)
    v = torch.randn(shape_kv, generator=g).to(device=device, dtype=dtype)
    grad_o = torch.randn(shape_q, generator=g).to(device=device, dtype=dtype)
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v, grad_o


def max_error(got, want):
    return (got.double() - want.double()).abs().max().item()


def check_stage(stage, dtype, device, b, h, nq, nkv, d, causal, seed, scale=None, backward_stage="auto",
                deterministic=False):
    """attention() by `stage` and its gradients against float64 autograd; with a
    backward_stage other than "auto", forward() and then backward() by that stage."""
    what = "stage %s%s %s B%d H%d Nq%d Nkv%d d%d%s%s" % (
        stage,
        ("" if backward_stage == "auto" else " backward " + backward_stage) + (" deterministic" if deterministic else ""),
        str(dtype).replace("torch.", ""), b, h, nq, nkv, d, " causal" if causal else "",
        "" if scale is None else " scale %g" % scale)
    q, k, v, grad_o = inputs((b, h, nq, d), (b, h, nkv, d), dtype, device, seed)
    used_scale = scale if scale is not None else 1.0 / math.sqrt(d)
    if backward_stage == "auto":
        o = fa_stages.attention(q, k, v, causal=causal, scale=scale, stage=stage)
        o.backward(grad_o)
        grads = (q.grad, k.grad, v.grad)
    else:
        with torch.no_grad():
            o, lse = fa_stages.forward(q, k, v, causal=causal, scale=scale, stage=stage)
            grads = fa_stages.backward(q, k, v, o, lse, grad_o, causal=causal, scale=scale, stage=backward_stage,
                                       deterministic=deterministic)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = reference(q64, k64, v64, causal, used_scale)
    ref.backward(grad_o.double())
    # Forward: fp32 within 2e-5 of float64 (unit-scale inputs); half within twice the error of
    # a plain half-precision computation of the same inputs, plus one rounding of O.
    base = same_precision_baseline(q.detach(), k.detach(), v.detach(), causal, used_scale)
    if dtype == torch.float32:  # large logits: a few times fp32's own error of the same math
        o_tol = max(2e-5, 4 * max_error(base, ref))
    else:
        o_tol = 2 * max_error(base, ref) + (2 ** -10 if dtype == torch.float16 else 2 ** -7)
    check(o.dtype == dtype and o.shape == q.shape and max_error(o, ref) <= o_tol,
          "%s: O within %.2g of float64 (%.2g)" % (what, o_tol, max_error(o, ref)))
    # Gradients: from stage 10 in fp32, within 2e-4 of the largest (plus 1); from stage 11 or
    # 13 for half inputs, within twice the error of the same baseline's autograd (P and the
    # gradients rounded to the dtype) plus one rounding of the largest gradient (plus 1: with
    # one key, dQ and dK are 0 exactly, and a kernel's dP − D leaves ~1e-7).
    if dtype == torch.float32:
        g_tols = [2e-4 * (want.abs().max().item() + 1.0) for want in (q64.grad, k64.grad, v64.grad)]
    else:
        qb, kb, vb = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        same_precision_baseline(qb, kb, vb, causal, used_scale).backward(grad_o)
        unit = 2 ** -11 if dtype == torch.float16 else 2 ** -8
        g_tols = [2 * max_error(b, want) + unit * (want.abs().max().item() + 1.0)
                  for b, want in ((qb.grad, q64.grad), (kb.grad, k64.grad), (vb.grad, v64.grad))]
    for name, got, want, g_tol in zip(("dQ", "dK", "dV"), grads, (q64.grad, k64.grad, v64.grad), g_tols):
        err = max_error(got, want)
        check(got.dtype == dtype and err <= g_tol,
              "%s: %s within %.2g of float64 (%.2g)" % (what, name, g_tol, err))


def large_logits(device):
    """float32 at logits in the thousands (inputs in [-30, 30], d = 64): attention()'s
    gradients hold the norm of their error against float64 to 2.5 times that of PyTorch's
    own float32 autograd on the same inputs. Stage 05 hands stage 10 each row's m and 1/l: a
    float32 log-sum-exp alone is rounded by up to 3e-5 there, which moves a whole row of P
    and fails this bound in dV (stages/10_backward/README.md, large logits)."""
    g = torch.Generator().manual_seed(4242)
    for causal in (False, True):
        shape = (1, 2, 100, 64)
        q, k, v = (torch.rand(shape, generator=g, dtype=torch.float64) * 60 - 30 for _ in range(3))
        grad_o = torch.randn(shape, generator=g, dtype=torch.float64)
        grads = {}
        # float64 math, and the same math in float32 (same_precision_baseline at float32).
        for name, dtype, formulas in (("float64", torch.float64, reference),
                                   ("float32 autograd", torch.float32, same_precision_baseline)):
            leaves = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
            formulas(*leaves, causal, 1.0 / 8.0).backward(grad_o.to(dtype))
            grads[name] = [t.grad.double() for t in leaves]
        leaves = [t.float().to(device).requires_grad_(True) for t in (q, k, v)]
        fa_stages.attention(*leaves, causal=causal).backward(grad_o.float().to(device))
        grads["fa_stages"] = [t.grad.double().cpu() for t in leaves]
        # The same by hand: forward(stats=True), then backward(stats=...).
        with torch.no_grad():
            o, lse, stats = fa_stages.forward(*leaves, causal=causal, stats=True)
            manual = fa_stages.backward(*leaves, o, lse, grad_o.float().to(device), causal=causal, stats=stats)
        grads["fa_stages by hand"] = [t.double().cpu() for t in manual]
        for i, name in enumerate(("dQ", "dK", "dV")):
            want = grads["float64"][i]
            base = (grads["float32 autograd"][i] - want).norm().item()
            for way in ("fa_stages", "fa_stages by hand"):
                err = (grads[way][i] - want).norm().item()
                check(err <= 2.5 * base, "float32 at logits in the thousands%s, %s: %s's error %.3g, within 2.5 times "
                      "float32 autograd's (%.3g)" % (" causal" if causal else "", way, name, err, base))
    # What backward(stats=...) refuses.
    q, k, v, grad_o = inputs((1, 2, 8, 64), (1, 2, 8, 64), torch.float32, device, 5)
    with torch.no_grad():
        o, lse, stats = fa_stages.forward(q, k, v, stats=True)
        check(stats is not None and tuple(stats.shape) == (1, 2, 8, 2), "forward(stats=True): m and 1/l of each row")
        check(fa_stages.forward(q, k, v, stage="03", stats=True)[2] is None, "forward(stats=True): None after stage 03")
        expect_error(ValueError, "must be the float32 [1, 2, 8, 2] tensor",
                     lambda: fa_stages.backward(q, k, v, o, lse, grad_o, stats=stats[:, :, :4]),
                     "stats of another shape")
        expect_error(ValueError, "for backward stage 10, float32",
                     lambda: fa_stages.backward(*(t.half() for t in (q, k, v, o)), lse, grad_o.half(), stats=stats),
                     "stats with float16 tensors")


def auto_backward(device):
    """backward(stage="auto"), and so attention()'s gradients: stage 10 for float32; stage 13
    at d = 64 and 128 where it runs (a Hopper, or the CPU backend), else stage 11."""
    hopper = fa_stages._hopper_available(torch.device(device))
    for dtype, d, want in ((torch.float32, 64, "10"), (torch.float32, 128, "10"),
                           (torch.float16, 64, "13" if hopper else "11"), (torch.bfloat16, 64, "13" if hopper else "11"),
                           (torch.float16, 128, "13" if hopper else "11"),
                           (torch.bfloat16, 128, "13" if hopper else "11"), (torch.float16, 32, "11")):
        got = fa_stages.backward_stage(dtype, d, device)
        check(got == want, "backward_stage(%s, %d) is %s (%s)" % (str(dtype).split(".")[1], d, want, got))


def deterministic_backward(device):
    """backward(deterministic=True): stage 13's fixed order of dQ's additions, where stage 13
    runs (else ValueError); and torch.use_deterministic_algorithms, which attention() follows."""
    hopper = fa_stages._hopper_available(torch.device(device))
    q, k, v, grad_o = inputs((1, 2, 70, 64), (1, 2, 300, 64), torch.bfloat16, device, 41, requires_grad=False)
    o, lse = fa_stages.forward(q, k, v)
    if not hopper:
        expect_error(ValueError, "only stage 13",
                     lambda: fa_stages.backward(q, k, v, o, lse, grad_o, deterministic=True),
                     "deterministic without stage 13")
        return
    for d in (64, 128):
        check_stage("08", torch.bfloat16, device, 1, 2, 70, 300, d, True, 50 + d, backward_stage="13",
                    deterministic=True)
        check(fa_stages.backward_stage(torch.bfloat16, d, device, deterministic=True) == "13",
              "backward_stage(bfloat16, %d, deterministic=True) is 13" % d)
    runs = [fa_stages.backward(q, k, v, o, lse, grad_o, deterministic=True) for _ in range(3)]
    check(all(torch.equal(r[0], runs[0][0]) and torch.equal(r[1], runs[0][1]) for r in runs),
          "deterministic: dQ and dK the same bits in three runs")
    bwd = fa_stages.backward
    expect_error(ValueError, "no deterministic mode",
                 lambda: bwd(q, k, v, o, lse, grad_o, stage="11", deterministic=True), "deterministic by stage 11")
    f = tuple(t.float() for t in (q, k, v))
    o32, lse32 = fa_stages.forward(*f)
    expect_error(ValueError, "no deterministic backward pass for fp32",
                 lambda: bwd(*f, o32, lse32, grad_o.float(), deterministic=True), "deterministic in float32")
    # torch.use_deterministic_algorithms: attention()'s gradients follow it, by the Python
    # autograd.Function (asked here) and by the compiled operator (its results and refusals).
    try:
        torch.use_deterministic_algorithms(True)
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        asked, real = [], fa_stages._backward
        fa_stages._backward = lambda *a, **kw: (asked.append(kw.get("deterministic")), real(*a, **kw))[1]
        operator, fa_stages._use_operator = fa_stages._use_operator, False
        try:
            fa_stages.attention(qg, kg, vg).backward(grad_o)
        finally:
            fa_stages._backward, fa_stages._use_operator = real, operator
        want = fa_stages.backward(q, k, v, o, lse, grad_o, deterministic=True)
        check(asked == [True] and torch.equal(qg.grad, want[0]),
              "use_deterministic_algorithms: attention()'s backward pass is the deterministic mode (%s)" % asked)
        if fa_stages.compiled_operator(device):
            qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
            fa_stages.attention(qg, kg, vg).backward(grad_o)
            check(all(torch.equal(g, w) for g, w in zip((qg.grad, kg.grad, vg.grad), want)),
                  "use_deterministic_algorithms, the compiled operator: the deterministic mode's gradients")
            h32 = tuple(t[..., :32].clone().requires_grad_(True) for t in (q, k, v))
            expect_error(RuntimeError, "use_deterministic_algorithms is on",
                         lambda: fa_stages.attention(*h32, stage="06").backward(grad_o[..., :32]),
                         "use_deterministic_algorithms, the compiled operator at d = 32 (no stage 13)")
        fg = tuple(t.clone().requires_grad_(True) for t in f)
        expect_error(RuntimeError, "use_deterministic_algorithms is on",
                     lambda: fa_stages.attention(*fg).backward(grad_o.float()), "use_deterministic_algorithms, float32")
        torch.use_deterministic_algorithms(True, warn_only=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fg = tuple(t.clone().requires_grad_(True) for t in f)
            fa_stages.attention(*fg).backward(grad_o.float())
        check(fg[0].grad is not None and any("no deterministic backward pass" in str(w.message) for w in caught),
              "use_deterministic_algorithms(warn_only=True), float32: a warning, and the gradients")
        if fa_stages.compiled_operator(device):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                h32 = tuple(t[..., :32].clone().requires_grad_(True) for t in (q, k, v))
                fa_stages.attention(*h32, stage="06").backward(grad_o[..., :32])
            check(h32[0].grad is not None and any("use_deterministic_algorithms is on" in str(w.message)
                                                  for w in caught),
                  "use_deterministic_algorithms(warn_only=True), the compiled operator at d = 32: a warning, "
                  "and the gradients")
    finally:
        torch.use_deterministic_algorithms(False)


def operator_paths(device):
    """attention() for the 16-bit stages runs the compiled operator (python/torch_ops.cpp)
    where the build made one (ctest says so: FA_EXPECT_OPERATOR=1), and the Python
    autograd.Function where it is turned off. The two give O and the gradients bit for bit
    the same: the same kernels on the same tensors."""
    has = fa_stages.compiled_operator(device)
    if os.environ.get("FA_EXPECT_OPERATOR") == "1":
        check(has, "the compiled operator is built and runs %s tensors" % device)
    if not has:
        print("the compiled operator is not there: attention() is the Python autograd.Function")
        return
    cases = [("08", torch.bfloat16, (2, 3, 37, 53), 64, True), ("07", torch.float16, (1, 2, 70, 45), 128, False),
             ("06", torch.float16, (1, 1, 1, 1), 32, True)]
    for n, (stage, dtype, (b, h, nq, nkv), d, causal) in enumerate(cases):
        q, k, v, grad_o = inputs((b, h, nq, d), (b, h, nkv, d), dtype, device, 300 + n, requires_grad=False)
        if stage == "08":  # q as a view of a [B, N, H, d] tensor, read where it lies
            q = q.transpose(1, 2).contiguous().transpose(1, 2)
        runs = []
        for use in (True, False):
            fa_stages._use_operator = use
            try:
                leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
                o = fa_stages.attention(*leaves, causal=causal, stage=stage)
                node = type(o.grad_fn).__name__
                o.backward(grad_o)
            finally:
                fa_stages._use_operator = True  # on: compiled_operator() said so above
            runs.append((node, o.detach(), *(t.grad for t in leaves)))
        what = "stage %s %s B%d H%d Nq%d Nkv%d d%d%s" % (stage, str(dtype).replace("torch.", ""), b, h, nq, nkv, d,
                                                        " causal" if causal else "")
        check(runs[0][0] != runs[1][0] and runs[1][0] == "_AttentionBackward",
              "%s: the compiled operator's autograd node (%s), then Python's (%s)" % (what, runs[0][0], runs[1][0]))
        check(all(torch.equal(a, b) for a, b in zip(runs[0][1:], runs[1][1:])),
              "%s: O, dQ, dK and dV the same bits by the compiled operator and by Python" % what)
    # Called directly, past attention()'s checks, the operator still refuses what would read
    # outside the tensors or misread them.
    q, k, v, _ = inputs((1, 2, 5, 64), (1, 2, 7, 64), torch.float16, device, 310, requires_grad=False)
    op = torch.ops.fa_stages_ext.attention
    expect_error(TypeError, "float16 or bfloat16", lambda: op(q.float(), k.float(), v.float(), False, 0.0, "08"),
                 "the compiled operator, float32")
    expect_error(ValueError, "one B, H and d", lambda: op(q, k[:, :1], v[:, :1], False, 0.0, "08"),
                 "the compiled operator, heads differ")
    expect_error(ValueError, "one B, H and d", lambda: op(q, k, v[:, :, :6], False, 0.0, "08"),
                 "the compiled operator, Nk != Nv")


def expect_error(kind, text, call, what):
    try:
        call()
    except kind as e:
        check(text in str(e), "%s: %s says %r (%s)" % (what, kind.__name__, text, e))
        return
    except Exception as e:  # noqa: BLE001 - the wrong kind is a failure, with its message
        check(False, "%s: expected %s, got %s: %s" % (what, kind.__name__, type(e).__name__, e))
        return
    check(False, "%s: expected %s, nothing was raised" % (what, kind.__name__))


def bad_inputs(device):
    q, k, v, _ = inputs((1, 2, 5, 64), (1, 2, 7, 64), torch.float32, device, 1, requires_grad=False)
    att = fa_stages.attention
    expect_error(TypeError, "float32, float16 or bfloat16", lambda: att(q.double(), k.double(), v.double()),
                 "float64 inputs")
    expect_error(TypeError, "one dtype", lambda: att(q, k.half(), v), "mixed dtypes")
    expect_error(TypeError, "must be a torch.Tensor", lambda: att(q.tolist(), k, v), "a list for q")
    expect_error(ValueError, "must be 4-D", lambda: att(q[0], k[0], v[0]), "3-D inputs")
    expect_error(ValueError, "agree on B and H", lambda: att(q, k[:, :1], v[:, :1]), "heads differ")
    expect_error(ValueError, "one head dimension", lambda: att(q, k[..., :32], v[..., :32]), "d differs")
    expect_error(ValueError, "as many rows", lambda: att(q, k, v[:, :, :6]), "Nk != Nv")
    expect_error(ValueError, "at least 1", lambda: att(q[:, :, :0], k, v), "no queries")
    expect_error(ValueError, "at least 1", lambda: att(q, k[:, :, :0], v[:, :, :0]), "no keys")
    expect_error(ValueError, "head dim 48 is not supported", lambda: att(q[..., :48], k[..., :48], v[..., :48]),
                 "d = 48")
    expect_error(ValueError, "no stage '11'", lambda: att(q, k, v, stage="11"), "an unknown stage")
    expect_error(TypeError, "stage 06 takes", lambda: att(q, k, v, stage="06"), "fp32 to a tensor-core stage")
    expect_error(TypeError, "stage 05 takes", lambda: att(q.half(), k.half(), v.half(), stage="05"),
                 "fp16 to an fp32 stage")
    expect_error(ValueError, "positive number", lambda: att(q, k, v, scale=-1.0), "a negative scale")
    expect_error(ValueError, "positive number", lambda: att(q, k, v, scale=float("nan")), "a NaN scale")
    expect_error(TypeError, "True or False", lambda: att(q, k, v, causal=1), "causal as an int")
    if device == "cuda":
        expect_error(ValueError, "one device", lambda: att(q, k.cpu(), v), "q on the GPU, k on the CPU")
    # Stage 08 runs d = 64 and 128 only (06 and 07 also run 16 and 32).
    h = (q[..., :32].half(), k[..., :32].half(), v[..., :32].half())
    expect_error(ValueError, "head dim 32 is not supported", lambda: att(*h, stage="08"), "d = 32 to stage 08")
    # A head dim whose rows are no whole number of 16 bytes: refused by the stage, not misread.
    h45 = (q[..., :45].half(), k[..., :45].half(), v[..., :45].half())
    expect_error(ValueError, "head dim 45 is not supported", lambda: att(*h45), "d = 45 in fp16")
    # The backward stages: an unknown one, a dtype the stage does not take, d = 32 to stage 13.
    o, lse = fa_stages.forward(q, k, v)
    bwd = fa_stages.backward
    expect_error(ValueError, "no backward stage '12'", lambda: bwd(q, k, v, o, lse, o, stage="12"),
                 "an unknown backward stage")
    expect_error(TypeError, "backward stage 13 takes", lambda: bwd(q, k, v, o, lse, o, stage="13"),
                 "fp32 to stage 13")
    expect_error(TypeError, "backward stage 10 takes", lambda: bwd(*(t.half() for t in (q, k, v, o)), lse, o.half(),
                                                                 stage="10"), "fp16 to stage 10")
    h = tuple(t.half() for t in (q[..., :32], k[..., :32], v[..., :32]))
    o32, lse32 = fa_stages.forward(*h, stage="07")
    expect_error(ValueError, "stage 13: head dim 32 is not supported",
                 lambda: bwd(*h, o32, lse32, o32, stage="13"), "d = 32 to backward stage 13")


def layouts(device):
    """Views that are not contiguous, or not 16-byte aligned, are copied, not misread."""
    q, k, v, _ = inputs((2, 3, 40, 64), (2, 3, 40, 64), torch.float32, device, 5, requires_grad=False)
    want = fa_stages.attention(q, k, v)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # same values, strides of [B, N, H, d]
    check(not qt.is_contiguous() and torch.equal(fa_stages.attention(qt, k, v), want), "a transposed view of q")
    flat = torch.cat([torch.zeros(1, device=device), q.flatten()])
    shifted = flat[1:].view_as(q)  # 4 bytes past an aligned address
    check(shifted.data_ptr() % 16 != 0 and torch.equal(fa_stages.attention(shifted, k, v), want),
          "q at an address that is not 16-byte aligned")


def strided_views(device):
    """Stages 08 and 11 read views where they lie: q, k and v as a linear layer's output
    viewed as heads, and dO as the gradient of O.transpose(1, 2).reshape(B, N, H·d) comes
    back. O and the gradients equal those of contiguous copies, and O is laid out [B, N, H, d],
    as scaled_dot_product_attention lays it out, so that the reshape copies nothing."""
    b, n, h, d = 2, 70, 3, 64
    for dtype in (torch.float16, torch.bfloat16):
        g = torch.Generator().manual_seed(31)
        x = torch.randn(b, n, 3 * h * d, generator=g).to(device=device, dtype=dtype)
        grad = torch.randn(b, n, h * d, generator=g).to(device=device, dtype=dtype)

        def run(copies):
            leaf = x.clone().requires_grad_(True)
            q, k, v = leaf.view(b, n, 3, h, d).permute(2, 0, 3, 1, 4)
            if copies:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            o = fa_stages.attention(q, k, v, causal=True)
            o.transpose(1, 2).reshape(b, n, h * d).backward(grad)
            return o, leaf.grad.view(b, n, 3, h, d)

        o_view, g_view = run(False)
        o_copy, g_copy = run(True)
        what = "%s, q, k and v views of one [B, N, 3·H·d] tensor: " % str(dtype).replace("torch.", "")
        check(torch.equal(o_view, o_copy), what + "O as from contiguous copies")
        if fa_stages._auto_stage(dtype, torch.device(device)) == "08":
            check(o_view.transpose(1, 2).is_contiguous(), what + "O laid out [B, N, H, d]")
        check(torch.equal(g_view[:, :, 1:], g_copy[:, :, 1:]), what + "dK and dV as from contiguous copies")
        dq_err = (g_view[:, :, 0].float() - g_copy[:, :, 0].float()).abs().max().item()
        check(dq_err <= 0.01 * g_copy[:, :, 0].float().abs().max().item(),  # atomics add dQ in any order
              what + "dQ as from contiguous copies (largest difference %.3g)" % dq_err)
    q, k, v, _ = inputs((2, 2, 40, 64), (1, 2, 50, 64), torch.float16, device, 6, requires_grad=False)
    want = fa_stages.attention(q, k.expand(2, -1, -1, -1).contiguous(), v.expand(2, -1, -1, -1).contiguous())
    check(torch.equal(fa_stages.attention(q, k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1)), want),
          "float16, k and v broadcast over the batch (stride 0): copied, as TMA cannot read them")


def streams_and_graphs(device):
    """On a GPU the kernels launch on PyTorch's current stream: a call on a side stream reads
    what that stream queued before it, and a CUDA graph captures a forward and backward pass
    whose replay on new inputs gives the eager O and gradients (float32: stages 05 and 10;
    bfloat16: the fastest stages here)."""
    if device != "cuda":
        return
    b, h, n, d = 2, 3, 200, 64
    main_stream = torch.cuda.current_stream()
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).replace("torch.", "")
        q, k, v, grad_o = inputs((b, h, n, d), (b, h, n, d), dtype, device, 41, requires_grad=False)
        want = fa_stages.attention(q, k, v, causal=True)
        side = torch.cuda.Stream()
        late_q = torch.zeros_like(q)
        side.wait_stream(main_stream)
        with torch.cuda.stream(side):  # PyTorch's streams do not wait for the default stream
            torch.cuda._sleep(20_000_000)  # about 10 ms: q lands late on this stream
            late_q.copy_(q)
            got = fa_stages.attention(late_q, k, v, causal=True)
        main_stream.wait_stream(side)
        check(torch.equal(got, want), "%s: a call on a side stream reads what that stream queued first" % name)

        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        static_grad = grad_o.clone()

        def step():
            o = fa_stages.attention(*leaves, causal=True)
            o.backward(static_grad)
            return o

        side.wait_stream(main_stream)
        with torch.cuda.stream(side):  # warm up off the default stream, as CUDA graphs ask
            for _ in range(2):
                step()
                for t in leaves:
                    t.grad = None
        main_stream.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                static_o = step()
        except RuntimeError as e:
            check(False, "%s: a forward and backward pass captured in a CUDA graph (%s)" % (name, e))
            continue
        q2, k2, v2, grad2 = inputs((b, h, n, d), (b, h, n, d), dtype, device, 42)
        with torch.no_grad():
            for t, new in zip(leaves + [static_grad], (q2, k2, v2, grad2)):
                t.copy_(new)
        graph.replay()
        o2 = fa_stages.attention(q2, k2, v2, causal=True)
        o2.backward(grad2)
        torch.cuda.synchronize()
        check(torch.equal(static_o, o2), "%s: a CUDA graph's replay on new inputs gives the eager O" % name)
        check(torch.equal(leaves[1].grad, k2.grad) and torch.equal(leaves[2].grad, v2.grad),
              "%s: ... and the eager dK and dV" % name)
        dq_err = max_error(leaves[0].grad, q2.grad)
        check(dq_err <= 0.01 * q2.grad.float().abs().max().item(),  # atomics add dQ in any order
              "%s: ... and the eager dQ (largest difference %.3g)" % (name, dq_err))


def compiled(device):
    """Under torch.compile, attention() is one operator in the graph (no break), and the
    compiled function's O and gradients are the eager ones: float32 (stage 05, whose m and
    1/l pass from the forward operator to the backward one) and, on a GPU, bfloat16."""
    if not fa_stages.CUSTOM_OPS:
        print("skip  torch.compile: PyTorch %s has no custom operators (2.4 and later)" % torch.__version__)
        return
    from torch import _dynamo  # noqa: PLC0415 - only where torch.compile exists

    # Only operations that round the same in every implementation around the operator (q · 0.5
    # is exact, so + 1 rounds once, fused or not): a transcendental such as tanh may differ by
    # an ulp between eager and generated code, and then O would too.
    def layer(q, k, v):
        return fa_stages.attention(q * 0.5 + 1, k * 2, v, causal=True) * 3

    for dtype in (torch.float32,) if device == "cpu" else (torch.float32, torch.bfloat16):
        what = "torch.compile, %s: " % str(dtype).replace("torch.", "")
        q, k, v, grad_o = inputs((1, 2, 64, 64), (1, 2, 64, 64), dtype, device, 9)
        want = layer(q, k, v)  # eager (also asks once which stage "auto" means here)
        want.backward(grad_o)
        grads = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        _dynamo.reset()
        explained = _dynamo.explain(layer)(q, k, v)
        check(explained.graph_break_count == 0, what + "no graph break (%d)" % explained.graph_break_count)
        got = torch.compile(layer, fullgraph=True)(q, k, v)
        got.backward(grad_o)
        check(torch.equal(got, want), what + "the same O as eager (largest difference %.3g)" % max_error(got, want))
        # dQ is summed with atomics, in no fixed order: equal up to a rounding of the dtype.
        tol = 1e-5 if dtype == torch.float32 else 2 ** -7
        check(all(torch.allclose(t.grad, g, rtol=tol, atol=tol) for t, g in zip((q, k, v), grads)),
              what + "the same gradients, up to the order of dQ's atomic additions")
        ops = torch.ops.fa_stages
        args = (q.detach(), k.detach(), v.detach(), True, 0.0, "05" if dtype == torch.float32 else "07")
        torch.library.opcheck(ops.forward.default, args, test_utils=("test_schema", "test_faketensor"))
        o, lse, stats = ops.forward.default(*args)
        check(stats.shape == ((1, 2, 64, 2) if dtype == torch.float32 else (0,)),
              what + "the forward operator's m and 1/l (%s)" % (tuple(stats.shape),))
        torch.library.opcheck(ops.backward.default, (*args[:3], o, lse, stats, grad_o, True, 0.0, False),
                              test_utils=("test_schema", "test_faketensor"))
        check(True, what + "torch.library.opcheck: fa_stages::forward's and ::backward's schemas and fake versions")


def masks(device):
    """fa_stages.masked_attention (stage 12) under a window, packed documents and a block mask,
    against float64 math with the same mask; and what it refuses."""
    b, h, n, d = 1, 2, 300, 64
    lengths = [100, 1, 199]
    doc = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = torch.tensor([[True, False, True], [True, True, False], [False, True, True]])
    cases = [("window (50, -1), causal", dict(causal=True, window=(50, -1)), (j <= i) & (i - j <= 50)),
             ("documents", dict(doc_lengths=lengths), doc[:, None] == doc[None, :]),
             ("a block mask", dict(block_mask=keep), keep[i // 128, j // 128])]
    for dtype in (torch.float16, torch.bfloat16):
        for name, args, visible in cases:
            q, k, v, _ = inputs((b, h, n, d), (b, h, n, d), dtype, device, 31, requires_grad=False)
            plan = fa_stages.MaskPlan(n, n, device=device, **args)
            o, lse = fa_stages.masked_attention(q, k, v, plan)
            s = torch.matmul(q.double(), k.double().transpose(-1, -2)) / math.sqrt(d)
            s = s.masked_fill(~visible.to(s.device), float("-inf"))
            want_lse = torch.logsumexp(s, dim=-1)
            want = torch.nan_to_num(torch.softmax(s, dim=-1)).matmul(v.double())  # a row with no key: O = 0
            err, lse_err = max_error(o, want), (lse.double() - want_lse).abs().nan_to_num(0.0).max().item()
            tol = 2e-2 if dtype == torch.bfloat16 else 3e-3
            check(o.dtype == dtype and err <= tol and lse_err <= 1e-4 and torch.equal(lse.isinf(), want_lse.isinf()),
                  "masked_attention %s %s: O within %.0e (%.2g), lse within 1e-4 (%.2g)"
                  % (str(dtype).split(".")[1], name, tol, err, lse_err))
    q, k, v, _ = inputs((1, 1, 300, 64), (1, 1, 300, 64), torch.float16, device, 5, requires_grad=False)
    plan = fa_stages.MaskPlan(300, 300, window=(10, 10), device=device)
    expect_error(ValueError, "plan is for n_q = 300", lambda: fa_stages.masked_attention(q[:, :, :200], k, v, plan),
                 "masked_attention: a plan for other lengths")
    expect_error(TypeError, "masked_attention (stage 12) takes torch.float16 or torch.bfloat16, not torch.float32",
                 lambda: fa_stages.masked_attention(q.float(), k.float(), v.float(), plan), "masked_attention: float32")
    expect_error(ValueError, "no backward pass",
                 lambda: fa_stages.masked_attention(q.requires_grad_(), k, v, plan), "masked_attention: requires_grad")
    expect_error(ValueError, "sum to 200, not to N = 300",
                 lambda: fa_stages.MaskPlan(300, 300, doc_lengths=[100, 100], device=device), "documents that do not fill N")
    expect_error(ValueError, "must be (3, 3)",
                 lambda: fa_stages.MaskPlan(300, 300, block_mask=torch.ones(2, 3, dtype=torch.bool), device=device),
                 "a block mask of the wrong shape")
    expect_error(ValueError, "whole tiles",
                 lambda: fa_stages.MaskPlan(300, 300, block_mask=torch.ones(5, 5, dtype=torch.bool), block_size=(64, 64),
                                            device=device), "a block mask of 64 x 64 blocks")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--quick", action="store_true", help="fewer shapes (the CPU backend is slow)")
    args = parser.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device")
        return 77
    print("torch %s; kernels on: %s" % (torch.__version__, fa_stages.device_name(device)))
    seed = 100
    # Ragged shapes: one query, one key, lengths that are no multiple of any tile.
    shapes = [(1, 1, 1, 1), (2, 3, 37, 53), (1, 2, 70, 70), (1, 1, 130, 67)]
    if args.quick:
        shapes = shapes[:3]
    for stage in ("01", "02", "03", "04", "05"):
        for (b, h, nq, nkv) in shapes:
            for causal in (False, True):
                for d in ((16, 64) if stage == "05" else (64,)):
                    seed += 1
                    check_stage(stage, torch.float32, device, b, h, nq, nkv, d, causal, seed)
    half_shapes = [(1, 1, 1, 1), (1, 2, 37, 53)] if args.quick else [(1, 1, 1, 1), (2, 2, 37, 53), (1, 1, 150, 200)]
    for stage in ("06", "07", "08"):
        for dtype in (torch.float16, torch.bfloat16):
            for (b, h, nq, nkv) in half_shapes:
                for causal in (False, True):
                    for d in (64, 128):
                        seed += 1
                        check_stage(stage, dtype, device, b, h, nq, nkv, d, causal, seed)
    for stage in ("06", "07"):
        for d in (16, 32):
            seed += 1
            check_stage(stage, torch.float16, device, 1, 2, 29, 41, d, True, seed)
    check_stage("auto", torch.float32, device, 1, 2, 33, 45, 128, True, seed + 1, scale=0.3)
    check_stage("auto", torch.bfloat16, device, 1, 2, 33, 45, 64, False, seed + 2)
    # Each backward stage by name, beside "auto" (13 at d = 128 where it runs, else 11).
    for backward_stage in ("11", "13"):
        for d in (64, 128):
            seed += 1
            check_stage("08", torch.bfloat16, device, 1, 2, 70, 45, d, True, seed, backward_stage=backward_stage)
    check_stage("05", torch.float32, device, 1, 1, 20, 33, 64, False, seed + 4, backward_stage="10")
    auto_backward(device)
    deterministic_backward(device)
    # Large-magnitude logits: scale 8 on unit inputs (logits of order 10²).
    check_stage("05", torch.float32, device, 1, 2, 40, 90, 64, False, seed + 3, scale=8.0)
    large_logits(device)
    operator_paths(device)
    bad_inputs(device)
    layouts(device)
    strided_views(device)
    streams_and_graphs(device)
    compiled(device)
    masks(device)
    print("%d failed" % len(FAILURES) if FAILURES else "all passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
