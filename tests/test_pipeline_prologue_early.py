"""A pipelined loop's first stages' copies start before the statements above the loop that
they do not depend on (a tile the threads fill from memory, an accumulator cleared), so that
their memory latency overlaps that work; a statement they depend on keeps them after it: one
that writes a tensor they read, a variable their loop bound reads, or their shared tile.
Every pass on the CPU model (which runs the copies where the pass put them), the interpreter
against numpy, the report, the order in the generated CUDA, NVRTC for sm_80 and sm_90a."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing

M, N, K, BK = 64, 64, 256, 64
ISSUED = "(issued ahead by the pipeline)"


def kernel(before):
    """C = A @ B^T over K tiles plus H @ H^T, H the first K tile of A's first M/2 rows, with `before` choosing what precedes the loop:
    "independent": A's rows 0..M/2 into a tile by the threads, the accumulator cleared; the
    others put first a statement the copies depend on: "writes_source" (the threads zero B's
    first K tile, which the copies read), "writes_bound" (the tile count comes from a
    variable set from memory), "writes_tile" (the threads clear B's shared tile, which the
    copies fill)."""

    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), tiles: T.Tensor((1,), "int32"),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, BK), "float16")
            B_s = T.alloc_shared((N, BK), "float16")
            head = T.alloc_shared((M, BK), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            n = T.alloc_var("int32", init=K // BK)
            if before == "writes_source":
                for i, j in T.Parallel(N, BK):  # DEP writes_source
                    B[i, j] = 0
            if before == "writes_tile":
                T.clear(B_s)  # DEP writes_tile
            if before == "writes_bound":
                # bounded: check_passes feeds random integers
                n = T.min(tiles[0], K // BK)
            for i, j in T.Parallel(M, BK):  # HEAD
                head[i, j] = T.if_then_else(i < M // 2, A[i, j], 0)
            T.clear(acc)
            for k in T.Pipelined(n, num_stages=3):
                T.copy(A[0, k * BK], A_s)
                T.copy(B[0, k * BK], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.gemm(head, head, acc, transpose_B=True)
            T.copy(acc, C)

    return f


def expected(a, b, before, tiles):
    a = a.astype(np.float32)
    b = b.astype(np.float32).copy()
    if before == "writes_source":
        b[:, :BK] = 0
    c = a[:, :tiles * BK] @ b[:, :tiles * BK].T
    head = a[:, :BK].copy()
    head[M // 2:] = 0
    return c + head @ head.T


@pytest.mark.parametrize("before", ["independent", "writes_source", "writes_bound", "writes_tile"])
def test_prologue_runs_before_what_it_does_not_depend_on(before):
    f = kernel(before)
    for arch in ("sm_80", "sm_90a"):
        testing.check_passes(f, arch=arch, check=True)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    tiles = 3 if before == "writes_bound" else K // BK
    c = np.zeros((M, N), np.float32)
    tilers.compile(f, target="interp")(a, b.copy(), np.array([tiles], np.int32), c)
    np.testing.assert_allclose(c, expected(a, b, before, tiles), rtol=1e-3, atol=5e-2)

    kernel_ = tilers.compile(f, target="cuda:sm_80")
    src, report = kernel_.get_kernel_source(), kernel_.report()
    first_copy = src.index(ISSUED)
    # the copies move above the head tile's fill and the clear, not above what they depend on
    assert first_copy < src.index(f"{FILE}:{line_of('# HEAD')}:")
    assert "the first stages' copies are issued before the 2 statement(s) above the loop" in report
    if before == "writes_bound":  # a variable's assignment carries no line comment
        assert src.index("n[0] = tl_min(tiles[0]") < first_copy
    elif before != "independent":
        assert src.index(f"{FILE}:{line_of(f'# DEP {before}')}:") < first_copy
    assert len(kernel_.cubin) > 0
    assert len(tilers.compile(f, target="cuda:sm_90a").cubin) > 0


FILE = __file__.rsplit("/", 1)[-1]


def line_of(marker):
    """The line of this file's statement marked `marker`."""
    with open(__file__) as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(marker))
