"""T.vectorized(n): TileLang's vectorized loop, an unrolled sequential loop in tilers."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing


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


@pytest.mark.parametrize("n,dtype", [(3, "float32"), (6, "float16"), (5, "float32"), (12, "float16")])
def test_a_chunk_of_no_power_of_two_elements_is_read_in_power_of_two_vectors(n, dtype):
    """A copy of n elements into a fragment every thread holds whole (FlashDecoding's
    combine reads its splits' log-sum-exps so): vectors of 2, 4, 8 or 16 bytes that divide
    the chunk, never 12 (an internal error before)."""

    @T.prim_func
    def f(L: T.Tensor((2, 5, n), dtype), O: T.Tensor((2, 5, n), dtype)):
        with T.Kernel(5, 2, threads=128) as (h, b):
            row = T.alloc_fragment((n,), dtype)
            m = T.alloc_fragment((1,), dtype)
            T.copy(L[b, h, :], row)
            T.reduce_max(row, m, dim=0)
            for s in T.Parallel(n):
                O[b, h, s] = row[s] - m[0]

    L = np.random.default_rng(0).standard_normal((2, 5, n)).astype(dtype)
    O = np.zeros_like(L)
    tilers.compile(f, target="interp")(L, O)
    np.testing.assert_allclose(O, L - L.max(axis=2, keepdims=True), rtol=1e-3, atol=1e-3)
    testing.check_passes(f, arch="sm_90a", check=True)
    src = tilers.compile(f, target="cuda:sm_90a").get_kernel_source()
    assert "uint3" not in src and "float3" not in src
