#!/usr/bin/env python3
"""libfa_inputs (what torch_sdpa.py loads) must give exactly the inputs the demos use.

  test_inputs_capi.py LIB NPY_DIR B H NQ NKV D

NPY_DIR holds q.npy, k.npy, v.npy written by a demo's --save with the default seed, and
do.npy when the demo is stage 10's (checked against fa_output_gradient_fill).
Exit status 0 when all of them match bit for bit, 1 otherwise.
"""
import array
import ctypes
import os
import sys


def load_npy(path):
    """The float32 payload of a little-endian .npy file (version 1 header)."""
    data = open(path, "rb").read()
    header_len = int.from_bytes(data[8:10], "little")
    values = array.array("f")
    values.frombytes(data[10 + header_len:])
    return list(values)


def main():
    lib_path, npy_dir = sys.argv[1], sys.argv[2]
    b, h, nq, nkv, d = (int(x) for x in sys.argv[3:8])
    lib = ctypes.CDLL(lib_path)
    f32p, i64 = ctypes.POINTER(ctypes.c_float), ctypes.c_int64
    lib.fa_inputs_fill.argtypes = [i64] * 5 + [ctypes.c_uint64, ctypes.c_float, f32p, f32p, f32p]
    q, k, v = (ctypes.c_float * (b * h * nq * d))(), (ctypes.c_float * (b * h * nkv * d))(), \
        (ctypes.c_float * (b * h * nkv * d))()
    if lib.fa_inputs_fill(b, h, nq, nkv, d, 2024, 1.0, q, k, v) != 0:
        print("fa_inputs_fill rejected the shape")
        return 1
    ok = True
    for name, got in (("q", q), ("k", k), ("v", v)):
        same = load_npy(f"{npy_dir}/{name}.npy") == list(got)
        print(f"{name}: {'identical' if same else 'DIFFERENT'}")
        ok = ok and same
    if os.path.exists(f"{npy_dir}/do.npy"):
        lib.fa_output_gradient_fill.argtypes = [i64] * 5 + [ctypes.c_uint64, f32p]
        g = (ctypes.c_float * (b * h * nq * d))()
        same = lib.fa_output_gradient_fill(b, h, nq, nkv, d, 2024, g) == 0 and load_npy(f"{npy_dir}/do.npy") == list(g)
        print(f"do: {'identical' if same else 'DIFFERENT'}")
        ok = ok and same
    # A shape the project rejects is refused, not filled.
    if lib.fa_inputs_fill(b, h, nq, nkv, 48, 2024, 1.0, q, k, v) != -1:
        print("head dim 48 was not refused")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
