"""A T.Pipelined loop inside another loop (stream-K's tile loop: the same K pipeline runs
again for the next tile, from a start that depends on the outer loop): the next pass's
prologue copies into the stages the last pass's gemm may still be reading, so a barrier goes
before it. The interpreter against numpy, every pass on the CPU model (which reported the
race before the fix), for both the cp.async and the TMA paths."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing


def repeated_pipelines(passes=3, k_tiles=4, use_while=False):
    """Y^T += W[:, t*64:] @ X[:, t*64:]^T for t in 0..passes-1: pass t runs the K pipeline from
    tile t on (an outer loop, or a device while loop over a T.alloc_var)."""
    M, N, K, bm, bn, bk = 16, 64, 64 * k_tiles, 16, 64, 64

    @T.prim_func
    def f(X: T.Tensor((M, K), "float16"), W: T.Tensor((N, K), "float16"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as pid:
            W_s = T.alloc_shared((bn, bk), "float16")
            X_s = T.alloc_shared((bm, bk), "float16")
            acc = T.alloc_fragment((bn, bm), "float32")

            def one_pass(t):
                T.clear(acc)
                for k in T.Pipelined(t, k_tiles, num_stages=2):
                    T.copy(W[0, k * bk], W_s)
                    T.copy(X[0, k * bk], X_s)
                    T.gemm(W_s, X_s, acc, transpose_B=True)
                for i, j in T.Parallel(bn, bm):
                    T.atomic_add(Y[j, i], acc[i, j])

            if use_while:
                t = T.alloc_var("int32", init=0)
                while t < passes:
                    one_pass(t)
                    t = t + 1
            else:
                for t in T.serial(passes):
                    one_pass(t)

    return f


def expected(X, W, passes, k_tiles):
    Xf, Wf = X.astype(np.float64), W.astype(np.float64)
    return sum(Xf[:, t * 64:] @ Wf[:, t * 64:].T for t in range(passes))


@pytest.mark.parametrize("use_while", [False, True])
def test_against_numpy_and_every_pass(use_while):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((16, 256)).astype(np.float16)
    W = rng.standard_normal((64, 256)).astype(np.float16)
    Y = np.zeros((16, 64), np.float32)
    f = repeated_pipelines(use_while=use_while)
    tilers.compile(f, target="interp")(X, W, Y)
    np.testing.assert_allclose(Y, expected(X, W, 3, 4), rtol=1e-3, atol=1e-2)
    for arch in ("sm_80", "sm_90a"):
        testing.check_passes(f, arch=arch, check=True)


def test_the_barrier_is_before_the_prologue():
    ir = tilers.compile(repeated_pipelines(), target="cuda:sm_80").ir("after:insert_syncs")
    loop = ir[ir.index("for %t"):]
    # the outer loop's body: the accumulator cleared, then a barrier before the prologue's copies
    assert loop.index("sync") < loop.index("by cp.async")
