"""T.gemm(clear_accum=cond) with a traced condition (TileLang's `clear_accum=(k == 0)`): C is
cleared where the condition holds at run time, then accumulated into. On the interpreter
against numpy, through every pass of the CPU model (wgmma and mma.sync), and its misuse."""

import numpy as np
import pytest
import tilers
import tilers.language as T


def gemm_cleared_at(M, N, K, bk, first, policy=T.GemmWarpPolicy.Square):
    """acc starts at 7; the loop's k == first step clears it: C = sum over k >= first."""

    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            As = T.alloc_shared((M, bk), "float16")
            Bs = T.alloc_shared((bk, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.fill(acc, 7)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[0:M, k * bk:(k + 1) * bk], As)
                T.copy(B[k * bk:(k + 1) * bk, 0:N], Bs)
                T.gemm(As, Bs, acc, clear_accum=(k == first), policy=policy)
            T.copy(acc, C)

    return f


@pytest.mark.parametrize("first", [0, 2, 9])
def test_the_step_that_clears_on_the_interpreter(first):
    M, N, K, bk = 64, 64, 128, 32
    k = tilers.compile(gemm_cleared_at(M, N, K, bk, first), out_idx=[2], target="interp")
    rng = np.random.default_rng(first)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if first < K // bk:
        want = a64[:, first * bk:] @ b64[first * bk:, :]
    else:  # never cleared: accumulated onto the 7
        want = 7 + a64 @ b64
    assert np.abs(k(a, b) - want).max() < 1e-3


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees(arch):
    r = tilers.testing.check_passes(gemm_cleared_at(64, 64, 128, 32, 1), arch=arch)
    assert r.ok, r.failure_message()


def test_the_condition_must_be_a_bool():
    @T.prim_func
    def f(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            As = T.alloc_shared((64, 32), "float16")
            Bs = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.gemm(As, Bs, acc, clear_accum=bx + 1)
            T.copy(acc, C)

    with pytest.raises(tilers.TileError, match=r"clear_accum.*bool") as e:
        tilers.compile(f, out_idx=[2], target="interp")
    assert "test_gemm_clear_condition.py" in str(e.value)
