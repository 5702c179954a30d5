"""A shared tile that a T.Pipelined loop multi-buffers (a buffer per stage in flight) keeps
its meaning outside the loop: after the loop it holds the last iteration's tile, before it
what the threads wrote (stage 0, which a loop of no iterations leaves alone); a second loop
refilling the same tiles with a different number of stages shares the buffers. Each is run
by every pass on the CPU model (which compares each stage with the tile-level program, so a
wrong stage or a missing barrier is a mismatch), by the interpreter against numpy, and
compiled by NVRTC for sm_80 and sm_90a. A use no stage can be named for is an error at the
user's line (it was an internal compiler error)."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing
from tilers.errors import TileError

M, N, K, BK = 64, 64, 320, 64  # 5 tiles: the last is stage 1 of 2, stage 1 of 4, 4 % 3 of 3
TILES = K // BK


def after_the_loop(stages, dynamic, tiles_=TILES):
    """C = A @ B^T over the first n K tiles, plus the n-th tile's product again (read from
    the ring after the loop) and, for n = 0, the product of the tiles the threads loaded
    before the loop (A's and B's last K tile)."""

    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), tiles: T.Tensor((1,), "int32"),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, BK), "float16")
            B_s = T.alloc_shared((N, BK), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            n = tiles_
            if dynamic:
                n = T.alloc_var("int32")
                n = T.max(T.min(tiles[0], TILES), 0)  # check_passes feeds random integers
            for i, j in T.Parallel(M, BK):
                A_s[i, j] = A[i, K - BK + j]
            for i, j in T.Parallel(N, BK):
                B_s[i, j] = B[i, K - BK + j]
            T.clear(acc)
            for k in T.Pipelined(n, num_stages=stages):
                T.copy(A[0, k * BK], A_s)
                T.copy(B[0, k * BK], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C)

    return f


def expected_after(a, b, n):
    a, b = a.astype(np.float32), b.astype(np.float32)
    c = a[:, :n * BK] @ b[:, :n * BK].T
    last = slice((n - 1) * BK, n * BK) if n else slice(K - BK, K)
    return c + a[:, last] @ b[:, last].T


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((M, K)).astype(np.float16), rng.standard_normal((N, K)).astype(np.float16))


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_a_ring_tile_read_after_its_loop_holds_the_last_tile(stages):
    f = after_the_loop(stages, dynamic=False)
    for arch in ("sm_80", "sm_90a"):
        testing.check_passes(f, arch=arch, check=True)
    a, b = inputs()
    c = np.zeros((M, N), np.float32)
    tilers.compile(f, target="interp")(a, b, np.array([TILES], np.int32), c)
    np.testing.assert_allclose(c, expected_after(a, b, TILES), rtol=1e-3, atol=5e-2)
    for arch in ("sm_80", "sm_90a"):
        kernel = tilers.compile(f, target=f"cuda:{arch}")
        assert len(kernel.cubin) > 0
    # on sm_90a the loop stays on cp.async: a TMA producer would refill the tiles early
    assert "its tile 'A_s' is also used outside the loop" in kernel.report()


@pytest.mark.parametrize("n", [0, 1, 2, 3, TILES])
def test_any_trip_count(n):
    # a trip count fixed at trace time: every pass runs it (from memory, below)
    f = after_the_loop(3, dynamic=False, tiles_=n)
    testing.check_passes(f, arch="sm_80", check=True)
    g = after_the_loop(3, dynamic=True)
    a, b = inputs(1)
    for kernel in (f, g):
        c = np.zeros((M, N), np.float32)
        tilers.compile(kernel, target="interp")(a, b, np.array([n], np.int32), c)
        np.testing.assert_allclose(c, expected_after(a, b, n), rtol=1e-3, atol=5e-2)


def test_a_trip_count_read_from_memory():
    testing.check_passes(after_the_loop(3, dynamic=True), arch="sm_80", check=True)
    assert len(tilers.compile(after_the_loop(3, dynamic=True), target="cuda:sm_90a").cubin) > 0


def two_loops():
    """The first half of K through a 3-stage loop, the product of its last tile scaled by 2
    (the threads double A's tile in place after the loop), then the second half through a
    2-stage loop refilling the same tiles."""

    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, BK), "float16")
            B_s = T.alloc_shared((N, BK), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.clear(acc)
            for k in T.Pipelined(3, num_stages=3):
                T.copy(A[0, k * BK], A_s)
                T.copy(B[0, k * BK], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            for i, j in T.Parallel(M, BK):
                A_s[i, j] = A_s[i, j] * 2
            T.gemm(A_s, B_s, acc, transpose_B=True)
            for k in T.Pipelined(TILES - 3, num_stages=2):
                T.copy(A[0, (k + 3) * BK], A_s)
                T.copy(B[0, (k + 3) * BK], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C)

    return f


def test_two_loops_refill_the_same_tiles():
    f = two_loops()
    for arch in ("sm_80", "sm_90a"):
        testing.check_passes(f, arch=arch, check=True)
        assert len(tilers.compile(f, target=f"cuda:{arch}").cubin) > 0
    a, b = inputs(2)
    c = np.zeros((M, N), np.float32)
    tilers.compile(f, target="interp")(a, b, c)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    want = af @ bf.T + 2 * af[:, 2 * BK:3 * BK] @ bf[:, 2 * BK:3 * BK].T
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=5e-2)
    # one buffer per stage of the deeper loop
    src = tilers.compile(f, target="cuda:sm_80").get_kernel_source()
    assert "// [3, 64, 64]" in src


def test_a_use_after_a_nested_loop_is_an_error_at_its_line():
    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), C: T.Tensor((M, M), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, BK), "float16")
            acc = T.alloc_fragment((M, M), "float32")
            T.clear(acc)
            for r in T.serial(2):
                for k in T.Pipelined(TILES, num_stages=3):
                    T.copy(A[0, k * BK], A_s)
                    T.gemm(A_s, A_s, acc, transpose_B=True)
            T.gemm(A_s, A_s, acc, transpose_B=True)  # USE
            T.copy(acc, C)

    with pytest.raises(TileError, match=r"'A_s' is multi-buffered by the T.Pipelined loop at .*:\d+ .*only in the loop's own block") as e:
        tilers.compile(f, target="cuda:sm_80")
    assert f"{__file__.rsplit('/', 1)[-1]}:{line_of('# USE')}" in str(e.value)


def test_a_reduction_of_a_ring_tile_after_its_loop():
    """Row sums of the last K tile, read from the ring after a loop that also accumulates
    every tile (a reduction of a shared tile goes through a fragment)."""

    @T.prim_func
    def f(A: T.Tensor((M, K), "float32"), out: T.Tensor((M,), "float32"), acc_out: T.Tensor((M, BK), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, BK), "float32")
            total = T.alloc_fragment((M,), "float32")
            acc = T.alloc_fragment((M, BK), "float32")
            T.clear(acc)
            for k in T.Pipelined(TILES, num_stages=2):
                T.copy(A[0, k * BK], A_s)
                for i, j in T.Parallel(M, BK):
                    acc[i, j] += A_s[i, j]
            T.reduce_sum(A_s, total, dim=1)
            T.copy(total, out)
            T.copy(acc, acc_out)

    testing.check_passes(f, arch="sm_80", check=True)
    assert len(tilers.compile(f, target="cuda:sm_90a").cubin) > 0
    a = np.random.default_rng(4).standard_normal((M, K)).astype(np.float32)
    out, acc = np.zeros(M, np.float32), np.zeros((M, BK), np.float32)
    tilers.compile(f, target="interp")(a, out, acc)
    np.testing.assert_allclose(out, a[:, K - BK:].sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(acc, a.reshape(M, TILES, BK).sum(1), rtol=1e-5, atol=1e-4)


def line_of(marker):
    with open(__file__) as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(marker))
