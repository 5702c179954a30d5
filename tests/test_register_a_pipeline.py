"""A pipelined loop whose wgmma reads a register-A fragment that the loop body writes (a
scaled or transposed tile, TileLang's mamba_chunk_state): the gemm may not stay in flight
into the next iteration, whose write would land under the group still reading it. The CPU
model of every pass catches the hazard (it did: "writes element 0 of 'xt' while a wgmma that
uses it is pending"); the interpreter agrees with numpy."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing


def scaled_a(M=64, N=128, K=256, bm=64, bn=128, bk=64, stages=3, transposed=False, threads=128):
    """C = (A * s[k]) @ B with A given as (K, M) when transposed (read back as its transpose)."""
    a_shape = (K, M) if transposed else (M, K)

    @T.prim_func
    def kern(
        A: T.Tensor(a_shape, "float16"),
        S: T.Tensor((K,), "float32"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            a_s = T.alloc_shared((bk, bm) if transposed else (bm, bk), "float16")
            a_f = T.alloc_fragment((bk, bm) if transposed else (bm, bk), "float16")
            at = T.alloc_fragment((bm, bk), "float16")
            s_s = T.alloc_shared((bk,), "float32")
            s_f = T.alloc_fragment((bk,), "float32")
            b_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if transposed:
                    T.copy(A[k * bk, by * bm], a_s)
                else:
                    T.copy(A[by * bm, k * bk], a_s)
                T.copy(S[k * bk], s_s)
                T.copy(B[k * bk, bx * bn], b_s)
                T.copy(s_s, s_f)
                T.copy(a_s, a_f)
                for i, j in T.Parallel(bm, bk):
                    if transposed:
                        at[i, j] = a_f[j, i] * s_f[j]
                    else:
                        at[i, j] = a_f[i, j] * s_f[j]
                T.gemm(at, b_s, acc)
            T.copy(acc, C[by * bm, bx * bn])

    return kern


def inputs(M, N, K, transposed, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((K, M) if transposed else (M, K)) * 0.5).astype(np.float16)
    s = rng.random(K, dtype=np.float32) + 0.5
    b = (rng.standard_normal((K, N)) * 0.5).astype(np.float16)
    return a, s, b


def want(a, s, b, transposed):
    a32 = a.astype(np.float32).T if transposed else a.astype(np.float32)
    at = (a32 * s[None, :]).astype(np.float16).astype(np.float32)  # the kernel rounds to fp16
    return at @ b.astype(np.float32)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_every_pass_agrees_on_sm_90a(stages, transposed):
    testing.check_passes(scaled_a(stages=stages, transposed=transposed), arch="sm_90a", check=True)


@pytest.mark.parametrize("transposed", [False, True])
def test_every_pass_agrees_on_sm_80(transposed):
    testing.check_passes(scaled_a(stages=3, transposed=transposed), arch="sm_80", check=True)


@pytest.mark.parametrize("transposed", [False, True])
def test_ragged_sizes_and_more_than_one_block(transposed):
    # M, N, K off the tiles: the last blocks are ragged, K's last tile is part-filled
    testing.check_passes(
        scaled_a(M=100, N=200, K=200, stages=3, transposed=transposed), arch="sm_90a", blocks="all", check=True
    )


@pytest.mark.parametrize("transposed", [False, True])
def test_the_interpreter_agrees_with_numpy(transposed):
    M, N, K = 64, 128, 192
    a, s, b = inputs(M, N, K, transposed)
    k = tilers.compile(scaled_a(M, N, K, transposed=transposed), out_idx=[3], target="interp")
    got = np.asarray(k(a, s, b))
    assert np.abs(got - want(a, s, b, transposed)).max() < 1e-2
