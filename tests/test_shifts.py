"""Shifts by counts at or past the operand's width (or negative): every bit is shifted out,
as PTX's shl/shr clamp the count and as the simplifier folds constants — the interpreter
used to mask the count (1 << 33 was 2 there, 0 on the GPU). tests/test_shifts_gpu.py runs
the same kernels on the GPU against the interpreter."""

import numpy as np
import pytest
import tilers
import tilers.language as T

COUNTS = [0, 1, 7, 31, 32, 33, 40, 63, 64, 100, -1]


def shifts(dtype):
    n = len(COUNTS)

    @T.prim_func
    def k(A: T.Tensor((n,), dtype), S: T.Tensor((n,), dtype), L: T.Tensor((n,), dtype),
          R: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(n):
                L[i] = A[i] << S[i]
                R[i] = A[i] >> S[i]

    return k


def inputs(dtype):
    value = {"int32": -12345, "uint32": 0xF000_0001, "int64": -(2**40) - 3, "uint64": 2**63 + 5,
             "int8": -7, "int16": 300}[dtype]
    a = np.full(len(COUNTS), value, dtype=dtype)
    s = np.array(COUNTS, dtype=np.int64).astype(dtype)
    return a, s


def expected(dtype, a, s):
    bits = 64 if np.dtype(dtype).itemsize == 8 else 32  # C promotes narrower types to int
    out_l, out_r = [], []
    for x, c in zip(a.tolist(), s.astype(np.int64).tolist()):
        if np.dtype(dtype).kind == "u" and np.dtype(dtype).itemsize == 8:
            c = c % 2**64
        inside = 0 <= c < bits
        out_l.append((x << c) if inside else 0)
        out_r.append((x >> c) if inside else (-1 if x < 0 else 0))
    def wrap(values):  # two's complement in the dtype's width
        size = 2 ** (8 * np.dtype(dtype).itemsize)
        unsigned = np.dtype(dtype).str.replace("i", "u")
        return np.array([v % size for v in values], dtype=np.uint64).astype(unsigned).view(dtype)

    return wrap(out_l), wrap(out_r)


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64", "uint64", "int8", "int16"])
def test_the_interpreter_shifts_every_bit_out_past_the_width(dtype):
    a, s = inputs(dtype)
    left, right = np.zeros_like(a), np.zeros_like(a)
    tilers.compile(shifts(dtype), target="interp")(a, s, left, right)
    want_l, want_r = expected(dtype, a, s)
    np.testing.assert_array_equal(left, want_l)
    np.testing.assert_array_equal(right, want_r)
