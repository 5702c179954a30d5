"""Several copies that fill fixed, disjoint parts of one shared tile in a T.Pipelined loop (a
tile of KV pages, a copy per page; the halves of a K tile from two tensors) all run ahead of
the loop's consumers; copies whose parts overlap or move keep the rule of one producer per
tile (the first runs ahead, the rest run in the loop, in order). The interpreter against
numpy, every pass on the CPU model, the report, NVRTC for sm_90a and sm_80."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing

M, N, K, BK = 64, 64, 256, 64


def halves(overlap=False, parts=2, stages=2, unroll=False):
    """C = A @ B^T where each K tile of B is copied into its tile in `parts` row ranges (or,
    with `overlap`, a second copy that rewrites the last part: the first must not win), in a
    Python loop (unrolled as traced) or, `unroll`, a T.unroll loop (unrolled by the compiler)."""
    rows = N // parts

    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, BK), "float16")
            B_s = T.alloc_shared((N, BK), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // BK, num_stages=stages):
                T.copy(A[0, k * BK], A_s)
                for p in T.unroll(parts) if unroll else range(parts):
                    T.copy(B[p * rows:(p + 1) * rows, k * BK:(k + 1) * BK], B_s[p * rows:(p + 1) * rows, :])
                if overlap:
                    # the last part again, from the first rows of B: the later copy must win
                    T.copy(B[0:rows, k * BK:(k + 1) * BK], B_s[N - rows:N, :])
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C)

    return f


def expected(a, b, overlap, parts):
    b = b.astype(np.float32).copy()
    if overlap:
        rows = N // parts
        b[N - rows:] = b[:rows]
    return a.astype(np.float32) @ b.T


@pytest.mark.parametrize("parts,stages,unroll", [(2, 2, False), (4, 3, False), (8, 2, False), (2, 2, True), (4, 3, True)])
def test_disjoint_parts_all_run_ahead(parts, stages, unroll):
    f = halves(parts=parts, stages=stages, unroll=unroll)
    report = tilers.compile(f, target="cuda:sm_90a").report()
    assert "copies into A_s, B_s issued" in report
    # every copy of B runs ahead: none is left in the loop as a plain copy
    assert "T.copy B -> B_s: cp.async 16 bytes" in report
    # a TMA pipeline takes one copy per tile: this one stays on cp.async, and says why
    assert "several copies fill parts of 'B_s'" in report
    testing.check_passes(f, arch="sm_90a", check=True)
    testing.check_passes(f, arch="sm_80", check=True)
    rng = np.random.default_rng(parts)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    tilers.compile(f, target="interp")(a, b, c)
    np.testing.assert_allclose(c, expected(a, b, False, parts), rtol=1e-3, atol=1e-2)
    assert len(tilers.compile(f, target="cuda:sm_80").cubin) > 0


def test_overlapping_parts_keep_their_order():
    f = halves(overlap=True, parts=2)
    testing.check_passes(f, arch="sm_90a", check=True)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    tilers.compile(f, target="interp")(a, b, c)
    np.testing.assert_allclose(c, expected(a, b, True, 2), rtol=1e-3, atol=1e-2)
    # only the first copy into B_s runs ahead; the others stay in the loop, in order
    kernel = tilers.compile(f, target="cuda:sm_90a")
    assert kernel.get_kernel_source().count("(issued ahead by the pipeline)") == 2 * 2  # A_s, B_s: prologue + loop
