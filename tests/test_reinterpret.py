"""T.reinterpret(value, dtype): a value's bits read as another type of the same width
(TileLang's radix top-k reads float keys as unsigned ints). On the interpreter against numpy's
views, for every pair of widths; through every pass; NVRTC for sm_90a and sm_80; misuse."""

import numpy as np
import pytest
import tilers
import tilers.language as T

PAIRS = [("float32", "uint32"), ("float32", "int32"), ("uint32", "float32"), ("int32", "float32"),
         ("float16", "uint16"), ("float16", "int16"), ("bfloat16", "uint16"), ("uint16", "float16"),
         ("int16", "bfloat16"), ("float64", "int64"), ("uint64", "float64"), ("int32", "uint32"),
         ("uint8", "int8")]


def bits_kernel(n, src, dst):
    @T.prim_func
    def f(A: T.Tensor((n,), src), B: T.Tensor((n,), dst)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    B[bx * 128 + i] = T.reinterpret(A[bx * 128 + i], dst)

    return f


def numpy_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def inputs(n, src):
    rng = np.random.default_rng(1)
    if src.startswith(("float", "bfloat")):
        x = rng.standard_normal(n) * 100
        x[:4] = [0.0, -0.0, np.inf, -np.inf]
        x = x.astype(numpy_dtype(src))
        if x.itemsize == 2:
            # quiet NaNs with payloads, both signs: a 16-bit reinterpret keeps their bits (a
            # float in between would not: cvt.rn.bf16.f32 writes the canonical NaN)
            x.view(np.uint16)[4:8] = [0x7E01, 0xFE3C, 0x7E7F, 0xFFC1] if src == "float16" else [
                0x7FC1, 0xFFE3, 0x7FD2, 0x7FFE]
        return x
    info = np.iinfo(src)
    # keep the float outputs finite: exclude all-ones exponents by drawing small values
    hi = min(info.max, 2**30) if src in ("int32", "uint32") else info.max
    lo = max(info.min, -(2**30)) if src in ("int32",) else info.min
    if src in ("uint16", "int16"):
        # every pattern, NaNs with payloads included: stored as a 16-bit float, the bits stay
        lo, hi = info.min, info.max
    if src == "uint64":
        return rng.integers(0, 2**62, n, dtype=np.uint64)
    x = rng.integers(lo, hi, n, dtype=src)
    if src in ("uint16", "int16"):
        # signaling NaNs made quiet: the interpreter holds values as doubles, and converting
        # to one quiets them (the GPU keeps them)
        u = x.view(np.uint16)
        for exp_mask, quiet in ((0x7C00, 0x0200), (0x7F80, 0x0040)):
            nan = ((u & exp_mask) == exp_mask) & ((u & (exp_mask ^ 0x7FFF)) != 0)
            u[nan & ((u & quiet) == 0)] |= quiet
    return x


@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda p: p if isinstance(p, str) else None)
def test_the_bits_on_the_interpreter(src, dst):
    n = 300
    a = inputs(n, src)
    got = np.asarray(tilers.compile(bits_kernel(n, src, dst), out_idx=[1], target="interp")(a))
    want = a.view(numpy_dtype(dst))
    assert got.dtype == want.dtype
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("src,dst", [("float32", "uint32"), ("bfloat16", "int16"), ("float16", "uint16"),
                                     ("uint32", "float32"), ("float64", "uint64")])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees_and_nvrtc_compiles(src, dst, arch):
    f = bits_kernel(300, src, dst)
    r = tilers.testing.check_passes(f, arch=arch)
    assert r.ok, r.failure_message()
    assert tilers.compile(f, out_idx=[1], target=f"cuda:{arch}").cubin[:4] == b"\x7fELF"


def test_the_older_argument_order():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "uint32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                B[i] = T.reinterpret("uint32", A[i]) >> 31  # the sign bit

    a = np.linspace(-1, 1, 128, dtype=np.float32)
    got = np.asarray(tilers.compile(f, out_idx=[1], target="interp")(a))
    assert np.array_equal(got, (a < 0).astype(np.uint32) | ((a == 0) & np.signbit(a)))


@pytest.mark.parametrize("dst", ["uint16", "float64", "bool"])
def test_widths_must_match(dst):
    with pytest.raises(tilers.TileError, match="same width") as e:
        tilers.compile(bits_kernel(128, "float32", dst), out_idx=[1], target="interp")
    assert "test_reinterpret.py" in str(e.value)
