"""Scalar parameters of float16 and bfloat16 (`s: T.float16`): passed as their storage bits,
read in the kernel as floats. NVRTC compiles them (the generated CUDA once multiplied a float
by the storage struct), the interpreter rounds the value to the type, bad values are refused
naming the parameter."""

import numpy as np
import pytest
import tilers
import tilers.language as T


def scale(dtype):
    scalar = getattr(T, dtype)

    @T.prim_func
    def f(A: T.Tensor((256,), dtype), s: scalar, B: T.Tensor((256,), dtype)):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * s + s

    return f


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_nvrtc_compiles(dtype, arch):
    k = tilers.compile(scale(dtype), out_idx=[2], target=f"cuda:{arch}")
    assert k.cubin[:4] == b"\x7fELF"
    assert "tl_float(s)" in k.get_kernel_source()


def test_on_the_interpreter():
    k = tilers.compile(scale("float16"), out_idx=[2], target="interp")
    a = np.linspace(-4, 4, 256).astype(np.float16)
    got = np.asarray(k(a, 0.1))
    s = np.float16(0.1)  # the parameter is rounded to its type
    want = (a.astype(np.float32) * np.float32(s)).astype(np.float16).astype(np.float32) + np.float32(s)
    assert np.array_equal(got, want.astype(np.float16))


def test_a_value_past_the_range_is_refused():
    k = tilers.compile(scale("float16"), out_idx=[2], target="interp")
    with pytest.raises(OverflowError, match="parameter 's'.*float16"):
        k(np.zeros(256, np.float16), 70000.0)
