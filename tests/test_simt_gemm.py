"""T.gemm of dtypes no tensor-core instruction takes (float32 x float32, float64, mixed
widths) runs on CUDA cores as an element loop, products and sums in the accumulator's dtype
(TileLang's kda kernels multiply float32 tiles): the interpreter against numpy, every pass
on the warp model for sm_90a and sm_80, the report's line; a combination with no arithmetic
stays an error (tests/test_diagnostics.py)."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing


def gemm(M, N, K, bm=32, bn=32, bk=16, ta=False, tb=False, stages=2, adt="float32", cdt="float32",
         a_fragment=False, clear_each=False, threads=128):
    ash = (K, M) if ta else (M, K)
    bsh = (N, K) if tb else (K, N)

    @T.prim_func
    def kern(A: T.Tensor(ash, adt), B: T.Tensor(bsh, adt), C: T.Tensor((M, N), cdt)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            a_s = T.alloc_shared((bk, bm) if ta else (bm, bk), adt)
            a_f = T.alloc_fragment((bk, bm) if ta else (bm, bk), adt)
            b_s = T.alloc_shared((bn, bk) if tb else (bk, bn), adt)
            c = T.alloc_fragment((bm, bn), cdt)
            part = T.alloc_fragment((bm, bn), cdt)
            T.clear(c)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if ta:
                    T.copy(A[k * bk, by * bm], a_s)
                else:
                    T.copy(A[by * bm, k * bk], a_s)
                if tb:
                    T.copy(B[bx * bn, k * bk], b_s)
                else:
                    T.copy(B[k * bk, bx * bn], b_s)
                if a_fragment:
                    T.copy(a_s, a_f)
                if clear_each:
                    # clear_accum: each k-tile's product alone, summed by the loop after it
                    T.gemm(a_f if a_fragment else a_s, b_s, part, transpose_A=ta, transpose_B=tb, clear_accum=True)
                    for i, j in T.Parallel(bm, bn):
                        c[i, j] += part[i, j]
                else:
                    T.gemm(a_f if a_fragment else a_s, b_s, c, transpose_A=ta, transpose_B=tb)
            T.copy(c, C[by * bm, bx * bn])

    return kern


def operands(M, N, K, ta, tb, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(dtype)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(dtype)
    return a, b


def want(a, b, ta, tb):
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    return (a64.T if ta else a64) @ (b64.T if tb else b64)


CASES = [
    # M, N, K, ta, tb, stages: ragged M/N/K among them
    (64, 64, 64, False, False, 2),
    (100, 70, 50, True, False, 3),
    (64, 96, 40, False, True, 1),
    (33, 64, 64, True, True, 2),
]


@pytest.mark.parametrize("a_fragment", [False, True])
@pytest.mark.parametrize("M,N,K,ta,tb,stages", CASES)
def test_the_interpreter_agrees_with_numpy(M, N, K, ta, tb, stages, a_fragment):
    a, b = operands(M, N, K, ta, tb, np.float32)
    k = tilers.compile(gemm(M, N, K, ta=ta, tb=tb, stages=stages, a_fragment=a_fragment), out_idx=[2], target="interp")
    got = np.asarray(k(a, b))
    assert np.abs(got - want(a, b, ta, tb)).max() < 1e-3 * K


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("a_fragment", [False, True])
@pytest.mark.parametrize("M,N,K,ta,tb,stages", CASES)
def test_every_pass_agrees(M, N, K, ta, tb, stages, a_fragment, arch):
    testing.check_passes(
        gemm(M, N, K, ta=ta, tb=tb, stages=stages, a_fragment=a_fragment), arch=arch, blocks="all", check=True
    )


def test_clear_accum_starts_each_product_at_zero():
    a, b = operands(64, 64, 64, False, False, np.float32)
    g = gemm(64, 64, 64, clear_each=True)
    testing.check_passes(g, arch="sm_90a", check=True)
    got = np.asarray(tilers.compile(g, out_idx=[2], target="interp")(a, b))
    assert np.abs(got - want(a, b, False, False)).max() < 1e-3 * 64


@pytest.mark.parametrize("adt,cdt", [("float64", "float64"), ("float16", "float64"), ("int16", "int32")])
def test_other_dtypes(adt, cdt):
    M = N = K = 32
    rng = np.random.default_rng(3)
    if adt.startswith("int"):
        a = rng.integers(-50, 50, (M, K)).astype(adt)
        b = rng.integers(-50, 50, (K, N)).astype(adt)
    else:
        a, b = operands(M, N, K, False, False, adt)
    g = gemm(M, N, K, adt=adt, cdt=cdt)
    testing.check_passes(g, arch="sm_90a", check=True)
    got = np.asarray(tilers.compile(g, out_idx=[2], target="interp")(a, b)).astype(np.float64)
    ref = want(a, b, False, False)
    assert np.abs(got - ref).max() <= (0 if adt.startswith("int") else 1e-6 * K)


def test_the_report_says_cuda_cores():
    k = tilers.compile(gemm(64, 64, 64), target="cuda:sm_90a")
    lines = [x for x in k.report().splitlines() if "runs on CUDA cores" in x]
    assert len(lines) == 1 and "float32 x float32 into float32" in lines[0], k.report()


def test_tensor_core_dtypes_still_take_tensor_cores():
    k = tilers.compile(gemm(64, 64, 64, adt="float16"), target="cuda:sm_90a")
    assert "runs on CUDA cores" not in k.report()
    assert "wgmma" in k.get_kernel_source() or "mma" in k.get_kernel_source()
