"""A pipelined loop whose trip count is read from a tensor the kernel only reads (a sequence
length per batch entry, as decoding kernels take it) gets the warp-specialized TMA pipeline
on sm_90a: the producer warpgroup reads the bound for itself. A bound the kernel computes
into a variable first stays on cp.async, and the report says why. Every pass on the CPU
model at lengths of 0, 1, one tile + 1 and more (blocks whose loops run 0 times beside
others), the interpreter against numpy, NVRTC."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing

B, S, D, BN = 4, 256, 64, 64


def kernel(bound):
    """O[b] = sum over the first lengths[b] rows of X[b] (D columns) of X[b, n, :] * 2, by
    tiles of BN rows through shared memory, a block per batch entry."""

    @T.prim_func
    def f(X: T.Tensor((B, S, D), "float16"), lengths: T.Tensor((B,), "int32"), O: T.Tensor((B, 64, D), "float32")):
        with T.Kernel(B, threads=128) as b:
            X_s = T.alloc_shared((BN, D), "float16")
            W_s = T.alloc_shared((64, BN), "float16")
            acc = T.alloc_fragment((64, D), "float32")
            for i, j in T.Parallel(64, BN):
                W_s[i, j] = 2
            T.clear(acc)
            if bound == "tensor":
                n = T.ceildiv(T.max(T.min(lengths[b], S), 0), BN)
            else:
                n = T.alloc_var("int32")
                n = T.ceildiv(T.max(T.min(lengths[b], S), 0), BN)
            for k in T.Pipelined(n, num_stages=3):
                T.copy(X[b, k * BN:(k + 1) * BN, :], X_s)
                T.gemm(W_s, X_s, acc)
            T.copy(acc, O[b, :, :])

    return f


def expected(x, lengths):
    out = np.zeros((B, 64, D), np.float32)
    for b, n in enumerate(lengths):
        tiles = -(-max(min(n, S), 0) // BN)
        out[b] = 2 * x[b, :tiles * BN].astype(np.float32).sum(0)
    return out


@pytest.mark.parametrize("bound", ["tensor", "variable"])
def test_bounds_from_a_tensor_take_tma(bound):
    f = kernel(bound)
    report = tilers.compile(f, target="cuda:sm_90a").report()
    if bound == "tensor":
        assert "TMA copies into X_s" in report and "warp-specialized" in report
        assert "not persistent: the pipelined loop's trip count depends on the block" in report
    else:
        assert "stays on cp.async, not TMA: its bounds read memory that the kernel writes" in report
    testing.check_passes(f, arch="sm_90a", blocks="all", check=True)
    testing.check_passes(f, arch="sm_80", blocks="all", check=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, S, D)).astype(np.float16)
    lengths = np.array([0, 1, BN + 1, S], np.int32)
    out = np.zeros((B, 64, D), np.float32)
    tilers.compile(f, target="interp")(x, lengths, out)
    np.testing.assert_allclose(out, expected(x, lengths), rtol=1e-3, atol=1e-2)
    assert len(tilers.compile(f, target="cuda:sm_90a").cubin) > 0
