"""T.vectorized(n): TileLang's vectorized loop, an unrolled sequential loop in tilers."""

import numpy as np
import pytest
import tilers
import tilers.language as T


def scale_by_eight():
    @T.prim_func
    def f(A: T.Tensor((1024,), "float16"), B: T.Tensor((1024,), "float16")):
        with T.Kernel(1, threads=128) as bx:
            for t in T.Parallel(128):
                for v in T.vectorized(8):
                    B[t * 8 + v] = A[t * 8 + v] * 2

    return f


def test_on_the_interpreter_and_every_pass():
    a = np.random.default_rng(0).standard_normal(1024).astype(np.float16)
    got = tilers.compile(scale_by_eight(), out_idx=[1], target="interp")(a)
    assert np.array_equal(np.asarray(got), a * 2)
    assert tilers.testing.check_passes(scale_by_eight(), arch="sm_90a").ok
    src = tilers.compile(scale_by_eight(), out_idx=[1], target="sm_90a").get_kernel_source()
    assert "#pragma unroll" in src


def test_its_extent_must_be_an_int():
    @T.prim_func
    def f(A: T.Tensor((1024,), "float16"), n: T.int32):
        with T.Kernel(1, threads=128) as bx:
            for v in T.vectorized(1.5):
                A[v] = 0

    with pytest.raises(tilers.TileError, match="vectorized"):
        tilers.compile(f, target="interp")
