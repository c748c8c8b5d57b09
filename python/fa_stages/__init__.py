"""fa_stages: the repository's attention kernels as a PyTorch function.

    import fa_stages
    o = fa_stages.attention(q, k, v, causal=True)            # the fastest stage for q
    o = fa_stages.attention(q, k, v, stage="04")             # FlashAttention-1, for teaching

q, k and v are [B, H, N, d] tensors (Nq for q, Nkv for k and v), all float32, float16 or
bfloat16, all on one device: CUDA tensors run the GPU kernels on PyTorch's current stream,
CPU tensors run the very same kernels on the CPU backend (slowly, with no GPU). Gradients
come from stage 10 for float32 (CUDA cores); for float16 and bfloat16 from stage 13 (Hopper)
at d = 64 and 128 where it runs, else from stage 11 (tensor cores). python/README.md explains how
it is built.
"""

import ctypes
import math
import os
import warnings

import torch

__all__ = ["attention", "forward", "backward", "MaskPlan", "masked_attention", "FORWARD_STAGES", "BACKWARD_STAGES",
           "backward_stage", "CUSTOM_OPS", "device_name", "compiled_operator"]

#: The stages with a forward pass, and the element types each takes.
FORWARD_STAGES = {
    "01": (torch.float32,),  # naive: S and P in device memory
    "02": (torch.float32,),  # naive with the online softmax
    "03": (torch.float32,),  # one query per thread, streaming
    "04": (torch.float32,),  # FlashAttention-1
    "05": (torch.float32,),  # FlashAttention-2
    "06": (torch.float16, torch.bfloat16),  # tensor cores (mma.sync)
    "07": (torch.float16, torch.bfloat16),  # the memory pipeline (cp.async)
    "08": (torch.float16, torch.bfloat16),  # Hopper (TMA, wgmma), on an H100 or the CPU backend
}
#: The stages with a backward pass, and the element types each takes ("auto": any of them).
BACKWARD_STAGES = {
    "auto": (torch.float32, torch.float16, torch.bfloat16),
    "10": (torch.float32,),  # CUDA cores
    "11": (torch.float16, torch.bfloat16),  # tensor cores (mma.sync, cp.async)
    "13": (torch.float16, torch.bfloat16),  # Hopper (TMA, wgmma), on an H100 or the CPU backend
}
_LSE_STAGES = {"03", "05", "06", "07", "08"}  # the stages that hand back the log-sum-exp
_WORKSPACE_STAGES = {"01", "02", "04"}  # the forward stages that need device memory of their own
_STRIDED_STAGES = {"08"}  # the forward stages that read strided tensors (and the backward: stages 11 and 13)
_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


def _library_dir():
    return os.environ.get("FA_STAGES_LIB_DIR", os.path.dirname(os.path.abspath(__file__)))


class _Library:
    """libfa_stages_cpu.so or libfa_stages_cuda.so, loaded on first use."""

    def __init__(self, backend):
        path = os.path.join(_library_dir(), "libfa_stages_%s.so" % backend)
        if not os.path.exists(path):
            raise RuntimeError(
                "fa_stages: %s is missing: this build has no %s backend" % (path, "CPU" if backend == "cpu" else "CUDA")
            )
        lib = ctypes.CDLL(path)
        lib.fa_stages_error.restype = ctypes.c_char_p
        lib.fa_stages_forward.argtypes = [ctypes.c_char_p, ctypes.c_int] + [_i64] * 5 + [
            ctypes.c_double, ctypes.c_int] + [_ptr] * 8 + [ctypes.c_int, _ptr]
        lib.fa_stages_forward_workspace.argtypes = [ctypes.c_char_p, ctypes.c_int] + [_i64] * 5 + [
            ctypes.c_int, ctypes.POINTER(_i64)]
        lib.fa_stages_backward.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int] + [_i64] * 5 + [
            ctypes.c_double, ctypes.c_int] + [_ptr] * 12 + [ctypes.c_int, _ptr]
        lib.fa_stages_backward_workspace.argtypes = [ctypes.c_int] + [_i64] * 5 + [ctypes.c_int, ctypes.POINTER(_i64)]
        lib.fa_stages_device_name.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.fa_stages_backward_stage.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, _i64, ctypes.c_int,
                                                 ctypes.c_char_p, ctypes.c_int]
        lib.fa_stages_mask_plan.argtypes = [_i64, _i64, ctypes.c_int, _i64, _i64, _ptr, _i64, _ptr, _i64, _i64,
                                            ctypes.c_int, ctypes.POINTER(_ptr), _ptr]
        lib.fa_stages_mask_plan_free.argtypes = [_ptr]
        lib.fa_stages_mask_plan_free.restype = None
        lib.fa_stages_masked_forward.argtypes = [_ptr, ctypes.c_int] + [_i64] * 5 + [ctypes.c_double, ctypes.c_int] + [
            _ptr] * 6 + [ctypes.c_int, _ptr]
        lib.fa_stages_hopper_unavailable.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib = lib
        self.forward, self.backward = lib.fa_stages_forward, lib.fa_stages_backward
        self.backward_bytes = {}  # (dtype code, sizes, causal) -> the backward's workspace bytes

    def call(self, name, *args):
        self.check(getattr(self.lib, name)(*args))

    def check(self, rc):
        if rc != 0:
            message = "fa_stages: " + self.lib.fa_stages_error().decode()
            raise ValueError(message) if rc == 1 else RuntimeError(message)


_libraries = {}


def _library(device):
    backend = "cpu" if device.type == "cpu" else "cuda"
    if backend not in _libraries:
        _libraries[backend] = _Library(backend)
    return _libraries[backend]


def _device_index(device):
    return 0 if device.type == "cpu" else (device.index if device.index is not None else torch.cuda.current_device())


# PyTorch's current stream of a device as a number, without making a Stream object (the
# private call that torch.compile's generated code uses; the public one where it is absent).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _where(t):
    """The library, device index and stream for a call on tensor t."""
    index = t.get_device()  # -1 on the CPU
    if index < 0:
        return _library(t.device), 0, None
    lib = _libraries.get("cuda") or _library(t.device)
    stream = _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(t.device).cuda_stream
    return lib, index, stream or None


def device_name(device="cpu"):
    """The name the kernels' runtime gives `device` (for CPU: the CPU backend's)."""
    device = torch.device(device)
    name = ctypes.create_string_buffer(256)
    _library(device).call("fa_stages_device_name", _device_index(device), name, 256)
    return name.value.decode()


def backward_stage(dtype, head_dim, device="cpu", deterministic=False):
    """The stage backward(stage="auto", deterministic=...) runs, and attention()'s gradients
    come from, for tensors of `dtype` with head dim `head_dim` on `device`: "10", "11" or "13".
    Raises ValueError where no stage runs it deterministically."""
    device = torch.device(device)
    if dtype not in _DTYPE_CODES:
        raise TypeError("fa_stages: %s; the stages take float32, float16 or bfloat16" % (dtype,))
    name = ctypes.create_string_buffer(8)
    _library(device).call("fa_stages_backward_stage", b"auto", int(bool(deterministic)), _DTYPE_CODES[dtype],
                          int(head_dim), _device_index(device), name, 8)
    return name.value.decode()


def _hopper_available(device):
    reason = ctypes.create_string_buffer(512)
    _library(device).call("fa_stages_hopper_unavailable", _device_index(device), reason, 512)
    return reason.value == b""


_hopper_here = {}  # device -> whether stage 08 runs there (asked once: torch.compile cannot trace ctypes)


def _auto_stage(dtype, device):
    if dtype == torch.float32:
        return "05"
    key = (device.type, _device_index(device))
    if key not in _hopper_here:
        _hopper_here[key] = _hopper_available(device)
    return "08" if _hopper_here[key] else "07"


def _check(q, k, v, causal, scale, stage, who=None):
    """Raises ValueError or TypeError naming what is wrong (and `who` refuses a dtype, where it
    is not "stage <stage>"); returns the stage to run."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("fa_stages: %s must be a torch.Tensor, not %s" % (name, type(t).__name__))
        if t.dtype not in _DTYPE_CODES:
            raise TypeError("fa_stages: %s is %s; the stages take float32, float16 or bfloat16" % (name, t.dtype))
        if t.dim() != 4:
            raise ValueError("fa_stages: %s must be 4-D [B, H, N, d], not of shape %s" % (name, tuple(t.shape)))
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError("fa_stages: %s is on %s; the stages run on CUDA devices and the CPU" % (name, t.device))
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError("fa_stages: q, k and v must have one dtype, not %s, %s and %s" % (q.dtype, k.dtype, v.dtype))
    if not (q.device == k.device == v.device):
        raise ValueError("fa_stages: q, k and v must be on one device, not %s, %s and %s" % (q.device, k.device, v.device))
    b, h, nq, d = q.shape
    if k.shape[0] != b or v.shape[0] != b or k.shape[1] != h or v.shape[1] != h:
        raise ValueError("fa_stages: q, k and v must agree on B and H: %s, %s, %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    if k.shape[3] != d or v.shape[3] != d:
        raise ValueError("fa_stages: q, k and v must have one head dimension d: %s, %s, %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    if k.shape[2] != v.shape[2]:
        raise ValueError("fa_stages: k and v must have as many rows: %s and %s" % (tuple(k.shape), tuple(v.shape)))
    if q.numel() == 0 or k.numel() == 0:
        raise ValueError("fa_stages: every size must be at least 1: q %s, k %s" % (tuple(q.shape), tuple(k.shape)))
    if not isinstance(causal, bool):
        raise TypeError("fa_stages: causal must be True or False")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError("fa_stages: scale must be a positive number, not %r" % (scale,))
    if stage == "auto":
        return _auto_stage(q.dtype, q.device)
    if stage not in FORWARD_STAGES:
        raise ValueError("fa_stages: no stage %r; choose \"auto\" or one of %s" % (stage, ", ".join(FORWARD_STAGES)))
    if q.dtype not in FORWARD_STAGES[stage]:
        raise TypeError("fa_stages: %s takes %s, not %s"
                        % (who or "stage " + stage, " or ".join(str(t) for t in FORWARD_STAGES[stage]), q.dtype))
    return stage


def _ready(t):
    """Contiguous and 16-byte aligned, as the kernels read it (a copy only when it is not)."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _strides(t):
    """(batch, head, row) strides in elements by which a kernel that takes strides reads t
    where it lies, or None where it cannot: the last dimension contiguous, the start and
    every stride a whole number of 16 bytes, no stride 0 (a broadcast) and rows less than
    2^24 elements apart. A dimension of size 1 gets the stride a contiguous tensor has."""
    b, h, n, d = t.shape
    sb, sh, sn, sd = t.stride()
    if sd != 1 or t.data_ptr() % 16:
        return None
    unit = 16 // t.element_size()
    sb, sh, sn = sb if b > 1 else h * n * d, sh if h > 1 else n * d, sn if n > 1 else d
    if sb % unit or sh % unit or sn % unit or 0 in (sb, sh, sn) or sn >= 1 << 24:
        return None
    return sb, sh, sn


_STRIDE_ARRAYS = {12: _i64 * 12, 15: _i64 * 15}  # the forward's and the backward's strides


def _strided(*tensors):
    """Each tensor as the strided kernels take it: itself where they can read it, else a
    contiguous copy; and the strides of all, as the C interface takes them."""
    ready, strides = [], []
    for t in tensors:
        st = _strides(t)
        if st is None:
            t = _ready(t)
            # Still None only where a row is no whole number of 16 bytes (d = 45 in fp16):
            # the contiguous strides, and the stage refuses that head dim with its message.
            st = _strides(t) or (t.stride(0), t.stride(1), t.stride(2))
        ready.append(t)
        strides.extend(st)
    return ready, _STRIDE_ARRAYS[len(strides)](*strides)


def _output_like(q):
    """O for q: laid out [B, Nq, H, d] in memory where q is (heads interleaved in each row, as
    a linear layer's output viewed as heads gives), so that O.transpose(1, 2).reshape(B, Nq,
    H·d) needs no copy, as with scaled_dot_product_attention; contiguous otherwise."""
    b, h, n, d = q.shape
    if h > 1 and n > 1 and q.stride(1) < q.stride(2):
        return torch.empty((b, n, h, d), dtype=q.dtype, device=q.device).transpose(1, 2)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def forward(q, k, v, causal=False, scale=None, stage="auto", stats=False):
    """O and the log-sum-exp of each row ([B, H, Nq], float32) by one stage, no autograd.

    Stages 01 and 02 keep no statistics: their log-sum-exp comes from stage 03's kernel on
    the same inputs. Stage 04's is m + log(l) from the m and l it keeps in device memory.

    stats: also return stage 05's m and 1/l of each row ([B, H, Nq, 2], float32; None after
    the other stages), for backward(stats=...): at logits in the thousands they give stage
    10 its gradients without the rounding of a float32 lse (stages/10_backward/README.md).
    """
    out = _forward(q, k, v, causal, scale, _check(q, k, v, causal, scale, stage), want_stats=stats)
    return out if stats else out[:2]


def _forward(q, k, v, causal, scale, stage, want_stats=False):
    """forward() on checked input: O, lse and, for stage 05 where `want_stats`, each row's m
    and 1/l ([B, H, Nq, 2] float32; else None), from which stage 10 rebuilds P exactly at
    large logits, where a float32 lse is rounded (stages/10_backward/README.md)."""
    lib, index, stream = _where(q)
    b, h, nq, d = q.shape
    nkv = k.shape[2]
    code = _DTYPE_CODES[q.dtype]
    sizes = (b, h, nq, nkv, d)
    workspace = None
    if stage in _WORKSPACE_STAGES:
        bytes_ = _i64(0)
        lib.call("fa_stages_forward_workspace", stage.encode(), code, *sizes, int(causal), ctypes.byref(bytes_))
        workspace = torch.empty(max(bytes_.value, 16), dtype=torch.uint8, device=q.device)
    if stage in _STRIDED_STAGES:  # read where they lie
        o = _output_like(q)
        (q, k, v, o), strides = _strided(q, k, v, o)
    else:
        q, k, v = _ready(q), _ready(k), _ready(v)
        o, strides = torch.empty_like(q), None
    lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
    stats = torch.empty((b, h, nq, 2), dtype=torch.float32, device=q.device) if want_stats and stage == "05" else None
    lib.check(lib.forward(stage.encode(), code, *sizes, float(scale or 0.0), int(causal), q.data_ptr(), k.data_ptr(),
                          v.data_ptr(), o.data_ptr(), lse.data_ptr(), stats.data_ptr() if stats is not None else None,
                          strides, workspace.data_ptr() if workspace is not None else None, index, stream))
    if stage == "04":
        m_l = workspace[: 2 * b * h * nq * 4].view(torch.float32)
        lse = (m_l[: b * h * nq] + torch.log(m_l[b * h * nq:])).view(b, h, nq)
    elif stage not in _LSE_STAGES:
        _, lse, _ = _forward(q.float(), k.float(), v.float(), causal, scale, "03")
    return o, lse, stats


def backward(q, k, v, o, lse, grad_o, causal=False, scale=None, stage="auto", deterministic=False, stats=None):
    """dQ, dK and dV in q's dtype. o and grad_o are taken in q's dtype, lse in float32.

    stage: "auto" runs stage 10 for float32 (CUDA cores); for float16 and bfloat16, stage 13
    (Hopper: TMA and wgmma) at d = 64 and 128 where it runs, else stage 11 (tensor cores,
    mma.sync). "10", "11" or "13" runs that stage.

    deterministic: dQ the same bit for bit on every run (its additions in a fixed order), which
    only stage 13 does (float16 and bfloat16, d = 64 or 128, a Hopper GPU or the CPU
    backend); elsewhere ValueError. dK and dV are the same on every run in any case.

    stats: stage 05's m and 1/l of each row, from forward(..., stats=True), for stage 10
    (float32), which then rebuilds P from them in place of lse.
    """
    if stats is not None:
        b, h, nq = q.shape[:3]
        if q.dtype != torch.float32 or stage not in ("auto", "10"):
            raise ValueError("fa_stages: stats (stage 05's m and 1/l) are for backward stage 10, float32")
        if not isinstance(stats, torch.Tensor) or stats.dtype != torch.float32 or tuple(stats.shape) != (b, h, nq, 2) \
                or stats.device != q.device:
            raise ValueError("fa_stages: stats must be the float32 [%d, %d, %d, 2] tensor forward(..., stats=True) "
                             "returns, on q's device" % (b, h, nq))
    return _backward(q, k, v, o, lse, grad_o, causal, scale, stage, deterministic=deterministic, stats=stats)


def _backward(q, k, v, o, lse, grad_o, causal, scale, stage, deterministic, stats):
    """backward(), and with `stats` (stage 05's m and 1/l of each row, or None) for stage 10."""
    if stage not in BACKWARD_STAGES:
        raise ValueError("fa_stages: no backward stage %r; choose \"auto\" or one of %s"
                         % (stage, ", ".join(s for s in BACKWARD_STAGES if s != "auto")))
    if stage != "auto" and q.dtype not in BACKWARD_STAGES[stage]:
        raise TypeError("fa_stages: backward stage %s takes %s, not %s"
                        % (stage, " or ".join(str(t) for t in BACKWARD_STAGES[stage]), q.dtype))
    dtype = q.dtype
    if any(t.dtype != dtype for t in (k, v, o, grad_o)):
        k, v, o, grad_o = (t.to(dtype) for t in (k, v, o, grad_o))
    if lse.dtype != torch.float32 or not lse.is_contiguous() or lse.data_ptr() % 16:
        lse = _ready(lse.float())
    lib, index, stream = _where(q)
    b, h, nq, d = q.shape
    nkv = k.shape[2]
    sizes = (b, h, nq, nkv, d)
    code = _DTYPE_CODES[dtype]
    key = (code, sizes, causal)
    if key not in lib.backward_bytes:
        bytes_ = _i64(0)
        lib.call("fa_stages_backward_workspace", code, *sizes, int(causal), ctypes.byref(bytes_))
        lib.backward_bytes[key] = max(bytes_.value, 16)
    workspace = torch.empty(lib.backward_bytes[key], dtype=torch.uint8, device=q.device)
    if dtype == torch.float32:  # stage 10 reads contiguous tensors
        q, k, v, o, grad_o = (_ready(t) for t in (q, k, v, o, grad_o))
        strides = None
        stats = _ready(stats) if stats is not None and stats.numel() else None
    else:  # stages 11 and 13 read them where they lie
        (q, k, v, o, grad_o), strides = _strided(q, k, v, o, grad_o)
        stats = None
    dq, dk, dv = (torch.empty(t.shape, dtype=dtype, device=q.device) for t in (q, k, v))
    lib.check(lib.backward(stage.encode(), int(bool(deterministic)), code, *sizes, float(scale or 0.0), int(causal),
                           q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), grad_o.data_ptr(), lse.data_ptr(),
                           stats.data_ptr() if stats is not None else None, dq.data_ptr(), dk.data_ptr(),
                           dv.data_ptr(), strides, workspace.data_ptr(), index, stream))
    return dq, dk, dv


def _deterministic_wanted(q):
    """Whether attention()'s backward pass runs deterministically: where
    torch.use_deterministic_algorithms(True) is in force. Where no stage can (float32, or no
    stage 13 here), that raises RuntimeError, or with warn_only=True warns, as PyTorch's own
    operations do."""
    if not torch.are_deterministic_algorithms_enabled():
        return False
    key = (q.dtype, q.shape[-1], q.device.type, _device_index(q.device))
    if key not in _deterministic_here:  # asked once, as _hopper_here
        try:
            backward_stage(q.dtype, q.shape[-1], q.device, deterministic=True)
            _deterministic_here[key] = ""
        except ValueError as e:
            _deterministic_here[key] = str(e)
    why = _deterministic_here[key]
    if not why:
        return True
    message = "%s (torch.use_deterministic_algorithms is on)" % why
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(message)
        return False
    raise RuntimeError(message)


_deterministic_here = {}  # (dtype, d, device) -> "" where a deterministic backward runs, else why not


class _Attention(torch.autograd.Function):
    """The forward pass keeps O and the log-sum-exp (B·H·Nq floats), not P: the backward
    pass recomputes P = exp(scale·Q·Kᵀ − lse) tile by tile from them. After stage 05 it
    keeps each row's m and 1/l as well, from which stage 10 rebuilds P without lse's
    rounding."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, stage):
        o, lse, stats = _forward(q, k, v, causal, scale, stage, want_stats=True)  # attention() checked the input
        ctx.save_for_backward(q, k, v, o, lse, stats)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, grad_o):
        q, k, v, o, lse, stats = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, o, lse, grad_o, ctx.causal, ctx.scale, "auto",
                               deterministic=_deterministic_wanted(q), stats=stats)
        return dq, dk, dv, None, None, None


# Where PyTorch has custom operators (2.4 and later), the same two passes are registered as
# the operators fa_stages::forward and fa_stages::backward, with shape-only ("fake")
# versions, so that torch.compile traces through attention() without breaking its graph.
# Elsewhere attention() is the autograd.Function above.
CUSTOM_OPS = hasattr(torch, "library") and hasattr(torch.library, "custom_op")


def _compiling():
    """Whether torch.compile is tracing this call."""
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())

if CUSTOM_OPS:

    # The forward operator returns O, lse and stage 05's m and 1/l of each row ([B, H, Nq, 2];
    # an empty tensor after other stages), which the backward operator hands stage 10.
    @torch.library.custom_op("fa_stages::forward", mutates_args=())
    def _forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                    stage: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        o, lse, stats = _forward(q, k, v, causal, scale or None, stage, want_stats=True)
        return o, lse, stats if stats is not None else q.new_empty((0,), dtype=torch.float32)

    @_forward_op.register_fake
    def _(q, k, v, causal, scale, stage):  # O laid out as _forward lays it out
        o = _output_like(q) if stage in _STRIDED_STAGES else torch.empty_like(q, memory_format=torch.contiguous_format)
        stats_shape = (*q.shape[:3], 2) if stage == "05" else (0,)
        return o, q.new_empty(q.shape[:3], dtype=torch.float32), q.new_empty(stats_shape, dtype=torch.float32)

    @torch.library.custom_op("fa_stages::backward", mutates_args=())
    def _backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                     stats: torch.Tensor, grad_o: torch.Tensor, causal: bool, scale: float,
                     deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _backward(q, k, v, o, lse, grad_o, causal, scale or None, "auto", deterministic=deterministic,
                         stats=stats)

    @_backward_op.register_fake
    def _(q, k, v, o, lse, stats, grad_o, causal, scale, deterministic):  # contiguous, as backward() writes them
        return tuple(t.new_empty(t.shape) for t in (q, k, v))

    def _setup_context(ctx, inputs, output):
        q, k, v, causal, scale, _ = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.causal, ctx.scale = causal, scale

    def _backward_of_forward(ctx, grad_o, _grad_lse, _grad_stats):
        q, k, v, o, lse, stats = ctx.saved_tensors
        dq, dk, dv = _backward_op(q, k, v, o, lse, stats, grad_o, ctx.causal, ctx.scale, _deterministic_wanted(q))
        return dq, dk, dv, None, None, None

    _forward_op.register_autograd(_backward_of_forward, setup_context=_setup_context)


# The compiled operator (python/torch_ops.cpp, libfa_stages_torch.so where the build found
# PyTorch's C++ headers): the same forward and backward passes for the 16-bit stages, with
# the autograd node in C++, so that no Python runs in them. FA_STAGES_OPERATOR=0 turns it off.
_OPERATOR_STAGES = {"06", "07", "08"}
_use_operator = os.environ.get("FA_STAGES_OPERATOR", "1") != "0"
_operator_for = {}  # backend -> whether the compiled operator runs its tensors
_operator_loaded = False


def _bind_operator(backend):
    """Loads libfa_stages_torch.so (once) and hands it the functions of `backend`'s library;
    returns whether attention() may run that backend's tensors through it."""
    global _operator_loaded
    ready = False
    path = os.path.join(_library_dir(), "libfa_stages_torch.so")
    if os.path.exists(path):
        lib = _library(torch.device(backend)).lib
        try:
            if not _operator_loaded:
                torch.ops.load_library(path)
                _operator_loaded = True
            functions = (lib.fa_stages_forward, lib.fa_stages_backward, lib.fa_stages_backward_workspace,
                         lib.fa_stages_backward_stage, lib.fa_stages_error)
            ready = bool(torch.ops.fa_stages_ext.bind(0 if backend == "cpu" else 1,
                                                      *(ctypes.cast(f, _ptr).value for f in functions)))
        except (OSError, RuntimeError) as e:  # built against another PyTorch than this one
            warnings.warn("fa_stages: %s does not load (%s); attention() runs its Python autograd.Function"
                          % (path, e))
    _operator_for[backend] = ready
    return ready


def _operator_ready(backend):
    """Whether the compiled operator runs `backend`'s tensors ("cpu" or "cuda"), bound on first ask."""
    ready = _operator_for.get(backend)
    return _use_operator and (_bind_operator(backend) if ready is None else ready)


def compiled_operator(device="cpu"):
    """Whether attention() runs the 16-bit stages (06, 07, 08) on `device` through the compiled
    operator (python/torch_ops.cpp); if not, through the Python autograd.Function."""
    return _operator_ready("cpu" if torch.device(device).type == "cpu" else "cuda")


def attention(q, k, v, causal=False, scale=None, stage="auto"):
    """softmax(scale·Q·Kᵀ)·V, differentiable, as torch.nn.functional.scaled_dot_product_attention
    computes it with is_causal=causal (the mask aligned top-left) and scale (default 1/sqrt(d)).

    stage: "auto" (05 for float32; 08 on a Hopper GPU and the CPU backend, else 07, for
    float16 and bfloat16) or any of FORWARD_STAGES.
    """
    stage = _check(q, k, v, causal, scale, stage)
    # The custom operator is what torch.compile needs. Eagerly, the 16-bit stages run the
    # compiled operator where it was built, the rest the plain autograd.Function: each does
    # the same for less host time, which a small model's training step feels (python/README.md).
    if CUSTOM_OPS and _compiling():
        return _forward_op(q, k, v, causal, float(scale or 0.0), stage)[0]
    if stage in _OPERATOR_STAGES and _operator_ready("cuda" if q.is_cuda else "cpu"):
        return torch.ops.fa_stages_ext.attention(q, k, v, causal, float(scale or 0.0), stage)
    return _Attention.apply(q, k, v, causal, scale, stage)


class MaskPlan:
    """Stage 12's plan of a mask, for masked_attention(): its (Q tile, K/V tile) blocks of
    128 × 128 classified once as empty (skipped), partial (masked score by score) or full,
    and the tables the kernel reads, kept on `device`. Query row i sees key j when all of
    these allow it: causal (j <= i), window=(left, right) (i - left <= j <= i + right; -1
    for no bound), doc_lengths (packed documents, lengths summing to n_q = n_kv: a row sees
    its own document only), block_mask (a bool tensor of ceil(n_q / 128) x ceil(n_kv / 128)
    at block_size (128, 128), or its multiples: False drops the block). One plan serves any
    batch, heads, head dim and dtype at these lengths.

    counts: {"empty": ..., "partial": ..., "full": ...} blocks a head.
    """

    def __init__(self, n_q, n_kv, causal=False, window=(-1, -1), doc_lengths=None, block_mask=None,
                 block_size=(128, 128), device="cuda"):
        self.device = torch.device(device)
        self.n_q, self.n_kv, self.causal = int(n_q), int(n_kv), bool(causal)
        self._lib = _library(self.device)
        self._handle = None
        left, right = window
        docs = None
        if doc_lengths is not None:
            docs = (_i64 * len(doc_lengths))(*[int(n) for n in doc_lengths])
        keep = None
        if block_mask is not None:
            keep = torch.as_tensor(block_mask, dtype=torch.bool).to("cpu", torch.uint8).contiguous()
            want = (-(-self.n_q // block_size[0]), -(-self.n_kv // block_size[1]))
            if tuple(keep.shape) != want:
                raise ValueError("fa_stages: block_mask must be %s for these lengths and blocks, not %s"
                                 % (want, tuple(keep.shape)))
        counts = (_i64 * 3)()
        handle = _ptr()
        self._keep = keep  # the flags live until the plan is made
        self._lib.call("fa_stages_mask_plan", self.n_q, self.n_kv, int(self.causal), int(left), int(right), docs,
                       len(doc_lengths) if doc_lengths is not None else 0,
                       keep.data_ptr() if keep is not None else None, int(block_size[0]), int(block_size[1]),
                       _device_index(self.device), ctypes.byref(handle), counts)
        self._handle = handle
        self.counts = {"empty": counts[0], "partial": counts[1], "full": counts[2]}

    def density(self):
        """The fraction of blocks the kernel visits (those not empty)."""
        c = self.counts
        return (c["partial"] + c["full"]) / (c["empty"] + c["partial"] + c["full"])

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.lib.fa_stages_mask_plan_free(self._handle)
            self._handle = None


def masked_attention(q, k, v, plan, scale=None):
    """O and the log-sum-exp of each row under `plan`'s mask (a MaskPlan), by stage 12: the
    forward pass only, float16 or bfloat16, d = 64 or 128, on a Hopper GPU or the CPU
    backend. A row that sees no key gets O = 0 and log-sum-exp -inf. It has no backward
    pass: inputs that require grad are refused. The plan's first call for a number of
    batch x heads makes its schedule on the device: in a CUDA graph, make that call before
    the capture (a first call under capture is refused)."""
    if not isinstance(plan, MaskPlan):
        raise TypeError("fa_stages: plan must be a MaskPlan, not %s" % type(plan).__name__)
    _check(q, k, v, plan.causal, scale, "08", who="masked_attention (stage 12)")
    if any(t.requires_grad for t in (q, k, v)) and torch.is_grad_enabled():
        raise ValueError("fa_stages: masked_attention has no backward pass; call it under torch.no_grad()")
    if q.device != plan.device and not (q.device.type == plan.device.type == "cuda"
                                        and _device_index(q.device) == _device_index(plan.device)):
        raise ValueError("fa_stages: the plan is on %s, the tensors on %s" % (plan.device, q.device))
    if q.shape[2] != plan.n_q or k.shape[2] != plan.n_kv:
        raise ValueError("fa_stages: the plan is for n_q = %d, n_kv = %d, not %d and %d"
                         % (plan.n_q, plan.n_kv, q.shape[2], k.shape[2]))
    lib, index, stream = _where(q)
    b, h, nq, d = q.shape
    o = _output_like(q)
    (q, k, v, o), strides = _strided(q, k, v, o)
    lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
    lib.check(lib.lib.fa_stages_masked_forward(plan._handle, _DTYPE_CODES[q.dtype], b, h, nq, k.shape[2], d,
                                               float(scale or 0.0), int(plan.causal), q.data_ptr(), k.data_ptr(),
                                               v.data_ptr(), o.data_ptr(), lse.data_ptr(), strides, index, stream))
    return o, lse
