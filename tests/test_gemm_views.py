"""T.gemm on part of a shared tile, as TileLang's kernels write it: one stage of a
multi-buffered tile (``A_s[k % 2, :, :]``, the user's own ring or a ring the kernel fills by
``T.tma_copy``) and windows of fixed slices (``Q_s[:, :d // 2]``: K halves, column panels).
Kernels run on the interpreter against numpy, pass by pass on the warp model of the lowered
code (which decodes wgmma descriptors as the hardware does) for sm_80 (ldmatrix + mma.sync)
and sm_90a (wgmma), and compile with NVRTC; views that cannot be a matrix of their buffer
are errors at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers.errors import TileError

ELF_MAGIC = b"\x7fELF"


def own_ring(M, N, K, bM=128, bN=128, bK=64, S=2, dtype="float16", threads=128):
    """The kernel keeps its own ring of S tile pairs and multiplies stage k % S."""

    @T.prim_func
    def ring(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((S, bM, bK), dtype)
            B_s = T.alloc_shared((S, bK, bN), dtype)
            acc = T.alloc_fragment((bM, bN), "float32")
            T.clear(acc)
            for k in T.serial(T.ceildiv(K, bK)):
                T.copy(A[by * bM, k * bK], A_s[k % S, :, :])
                T.copy(B[k * bK, bx * bN], B_s[k % S, :, :])
                T.gemm(A_s[k % S, :, :], B_s[k % S, :, :], acc)
            T.copy(acc, C[by * bM, bx * bN])

    return ring


def k_halves(M, N, K, bM=64, bN=64, dtype="float16"):
    """A and B (stored N x K) loaded whole along K, multiplied half by half."""
    half = K // 2

    @T.prim_func
    def halves(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, K), dtype)
            B_s = T.alloc_shared((bN, K), dtype)
            acc = T.alloc_fragment((bM, bN), "float32")
            T.copy(A[by * bM, 0], A_s)
            T.copy(B[bx * bN, 0], B_s)
            T.gemm(A_s[:, :half], B_s[:, :half], acc, transpose_B=True, clear_accum=True)
            T.gemm(A_s[:, half:], B_s[:, half:], acc, transpose_B=True)
            T.copy(acc, C[by * bM, bx * bN])

    return halves


def column_panels(M, N, K, bM=64, bN=128, bK=64, dtype="float16"):
    """A stored K x M in the left half of a wider tile, B (K x N) split into two column
    halves, each into its own accumulator (MN-major windows on whole panels)."""
    half = bN // 2

    @T.prim_func
    def panels(A: T.Tensor((K, M), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bK, 2 * bM), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            c0 = T.alloc_fragment((bM, half), "float32")
            c1 = T.alloc_fragment((bM, half), "float32")
            T.clear(c0)
            T.clear(c1)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[k * bK, by * bM], A_s[:, 0:bM])
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s[:, 0:bM], B_s[:, :half], c0, transpose_A=True)
                T.gemm(A_s[:, 0:bM], B_s[:, half:], c1, transpose_A=True)
            T.copy(c0, C[by * bM, bx * bN])
            T.copy(c1, C[by * bM, bx * bN + half])

    return panels


def pipelined_k_halves(M, N, K, bM=128, bN=128, bK=64, dtype="float16"):
    """A compiler-made pipeline (TMA and a producer warpgroup on sm_90a) whose gemms read the
    two K halves of each stage."""
    h = bK // 2

    @T.prim_func
    def piped(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            acc = T.alloc_fragment((bM, bN), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s[:, 0:h], B_s[0:h, :], acc)
                T.gemm(A_s[:, h:], B_s[h:, :], acc)
            T.copy(acc, C[by * bM, bx * bN])

    return piped


def tma_ring(M, N, K, bM=128, bN=128, bK=64, S=2, dtype="float16"):
    """TileLang's barrier pipeline: a producer warpgroup fills stage ko % S of 3-D tiles by
    T.tma_copy, the consumer multiplies that stage (examples/warp_specialize's
    gemm_barrierpipe_stage2, written anew)."""

    @T.prim_func
    def ring(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A_s = T.alloc_shared((S, bM, bK), dtype)
            B_s = T.alloc_shared((S, bK, bN), dtype)
            acc = T.alloc_fragment((bM, bN), "float32")
            bars = T.alloc_barrier([128] * (2 * S))
            with T.ws(0):
                T.clear(acc)
            for ko in T.serial(T.ceildiv(K, bK)):
                with T.ws(1):
                    T.mbarrier_wait_parity(bars[ko % S + S], ((ko // S) % 2) ^ 1)
                    T.tma_copy(A[by * bM:(by + 1) * bM, ko * bK:(ko + 1) * bK], A_s[ko % S, :, :],
                               barrier=bars[ko % S])
                    T.tma_copy(B[ko * bK:(ko + 1) * bK, bx * bN:(bx + 1) * bN], B_s[ko % S, :, :],
                               barrier=bars[ko % S])
                    T.mbarrier_arrive(bars[ko % S])
                with T.ws(0):
                    T.mbarrier_wait_parity(bars[ko % S], (ko // S) % 2)
                    T.gemm(A_s[ko % S, :, :], B_s[ko % S, :, :], acc)
                    T.mbarrier_arrive(bars[ko % S + S])
            with T.ws(0):
                T.copy(acc, C[by * bM, bx * bN])

    return ring


def rand(*shape, dtype="float16", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def inputs(factory, M, N, K, dtype="float16"):
    """(a, b) as the kernel takes them and the reference product."""
    a_t = factory is column_panels
    b_t = factory is k_halves
    a = rand(*((K, M) if a_t else (M, K)), dtype=dtype)
    b = rand(*((N, K) if b_t else (K, N)), dtype=dtype, seed=1)
    aa, bb = a.astype(np.float64), b.astype(np.float64)
    return a, b, (aa.T if a_t else aa) @ (bb.T if b_t else bb)


CASES = [
    (own_ring, (200, 136, 320), ["sm_80", "sm_90a"]),
    (k_halves, (100, 72, 128), ["sm_80", "sm_90a"]),
    (column_panels, (100, 200, 136), ["sm_80", "sm_90a"]),
    (pipelined_k_halves, (256, 200, 384), ["sm_80", "sm_90a"]),
    (tma_ring, (256, 200, 320), ["sm_90a"]),
]


@pytest.mark.parametrize("factory,mnk,arches", CASES, ids=[c[0].__name__ for c in CASES])
def test_checks_pass_by_pass(factory, mnk, arches):
    for arch in arches:
        result = tilers.testing.check_passes(factory(*mnk), arch=arch)
        assert result.ok, f"{arch}: {result.failure_message()}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("factory,mnk,arches", CASES, ids=[c[0].__name__ for c in CASES])
def test_on_the_interpreter_against_numpy(factory, mnk, arches, dtype):
    M, N, K = mnk
    a, b, ref = inputs(factory, M, N, K, "float16")
    if dtype == "bfloat16":
        import ml_dtypes

        a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
        ref = a.astype(np.float64) @ b.astype(np.float64) if factory not in (k_halves, column_panels) else (
            (a.astype(np.float64).T if factory is column_panels else a.astype(np.float64))
            @ (b.astype(np.float64).T if factory is k_halves else b.astype(np.float64)))
    for arch in arches:
        kernel = tilers.compile(factory(M, N, K, dtype=dtype), out_idx=[2], target=f"cuda:{arch}")
        assert kernel.cubin[:4] == ELF_MAGIC
        np.testing.assert_allclose(kernel(a, b).astype(np.float64), ref, rtol=2e-2, atol=2.5e-1)


def test_the_report_says_how_each_view_is_read():
    report = tilers.compile(k_halves(128, 128, 128), out_idx=[2], target="cuda:sm_90a").report()
    assert report.count("T.gemm 64x64x64 float16: wgmma.m64n64k16") == 2, report
    report = tilers.compile(tma_ring(256, 256, 256), out_idx=[2], target="cuda:sm_90a").report()
    assert "T.tma_copy A -> A_s: TMA, 1x [128, 64], 128B swizzle, 16384 bytes on bars" in report
    piped = tilers.compile(pipelined_k_halves(256, 256, 256), out_idx=[2], target="cuda:sm_90a")
    assert "TMA copies into A_s, B_s" in piped.report() and "warp-specialized" in piped.report()


def test_a_window_off_wgmmas_steps_falls_back_to_mma_sync_and_says_why():
    @T.prim_func
    def off(A: T.Tensor((64, 128), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 128), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s[:, 8:72], B_s, acc, clear_accum=True)
            T.copy(acc, C[0, 0])

    kernel = tilers.compile(off, out_idx=[2], target="cuda:sm_90a")
    report = kernel.report()
    assert "mma.sync" in report and "does not start on wgmma's 8-row, 16-column steps" in report, report
    a, b = rand(64, 128), rand(64, 64, seed=1)
    ref = a[:, 8:72].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(kernel(a, b).astype(np.float64), ref, rtol=2e-2, atol=2e-1)
    assert tilers.testing.check_passes(off, arch="sm_90a").ok


def gemm_with(a_operand, shape=(2, 64, 64), frag_a=False):
    """A kernel whose gemm's A operand is `a_operand(A_s, k)` of a shared tile of `shape`."""

    @T.prim_func
    def bad(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_fragment(shape, "float16") if frag_a else T.alloc_shared(shape, "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(B[0, 0], B_s)
            for k in T.serial(2):
                T.gemm(a_operand(A_s, k), B_s, acc)  # the line errors point at
            T.copy(acc, C[0, 0])

    return bad


@pytest.mark.parametrize("operand,shape,frag,message", [
    (lambda s, k: s[:, k * 16:k * 16 + 64], (64, 128), False, "must have fixed bounds"),
    (lambda s, k: s[:, 64:192], (64, 128), False, "outside its 128 elements"),
    (lambda s, k: s, (2, 64, 64), False, "must be a 2-D shared or fragment tile"),
    (lambda s, k: s[k, 0, :], (2, 64, 64), False, "is indexed"),
    (lambda s, k: s[:, 0:64], (64, 128), True, "part of fragment"),
    (lambda s, k: s[k % 2, :, 4:68], (2, 64, 128), False, "not on a 16-byte boundary"),
])
def test_views_that_are_no_matrix_are_errors_at_the_gemm(operand, shape, frag, message):
    with pytest.raises(TileError) as e:
        tilers.compile(gemm_with(operand, shape, frag), out_idx=[2], target="cuda:sm_90a")
    assert message in str(e.value), str(e.value)
    assert "the line errors point at" in str(e.value), str(e.value)
