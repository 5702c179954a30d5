"""A T.Parallel loop that reads a fragment laid out for other threads (a per-row scale made
by one loop, read by a loop over a tile laid out by a copy) reads a copy converted through
shared memory: the interpreter against numpy, every pass on the warp model for sm_90a and
sm_80, the report's line; writes in another layout stay errors at the line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing


def scaled_rows(M=64, D=128, S=4, threads=128):
    """O = P * exp2(max over splits of L), per row: TileLang's flash-decoding combine."""

    @T.prim_func
    def combine(L: T.Tensor((S, M), "float32"), P: T.Tensor((M, D), "float16"), O: T.Tensor((M, D), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            lse = T.alloc_fragment((S, M), "float32")
            mx = T.alloc_fragment((M,), "float32")
            sc = T.alloc_fragment((M,), "float32")
            p = T.alloc_fragment((M, D), "float16")
            o = T.alloc_fragment((M, D), "float32")
            T.copy(L, lse)
            T.reduce_max(lse, mx, dim=0, clear=True)
            for i in T.Parallel(M):
                sc[i] = T.exp2(mx[i])
            T.copy(P, p)
            for i, j in T.Parallel(M, D):
                o[i, j] = p[i, j] * sc[i] + mx[i]
            T.copy(o, O)

    return combine


def want(L, P):
    mx = L.max(0)
    return P.astype(np.float32) * np.exp2(mx)[:, None] + mx[:, None]


@pytest.mark.parametrize("M,D,S,threads", [(64, 128, 4, 128), (128, 64, 3, 256), (32, 256, 16, 128)])
def test_the_interpreter_agrees_with_numpy(M, D, S, threads):
    rng = np.random.default_rng(0)
    L = rng.random((S, M), dtype=np.float32)
    P = rng.random((M, D)).astype(np.float16)
    k = tilers.compile(scaled_rows(M, D, S, threads), out_idx=[2], target="interp")
    assert np.abs(np.asarray(k(L, P)) - want(L, P)).max() < 1e-5


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("M,D,S,threads", [(64, 128, 4, 128), (128, 64, 3, 256)])
def test_every_pass_agrees(arch, M, D, S, threads):
    testing.check_passes(scaled_rows(M, D, S, threads), arch=arch, check=True)


def test_the_report_names_the_conversion():
    k = tilers.compile(scaled_rows(), target="cuda:sm_90a")
    lines = [x for x in k.report().splitlines() if "made through shared memory" in x]
    assert len(lines) == 2, lines  # sc and mx, both laid out by the reduction's threads
    assert any("'sc'" in x and "'sc_relayout'" in x for x in lines)
    assert k.cubin[:4] == b"\x7fELF"


def transposed(shift=0):
    """O[i, j] = P[j, i] (+ a row shift): a read by other indices than the loop's, from the
    shared copy."""

    @T.prim_func
    def moved(P: T.Tensor((64, 64), "float16"), O: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            p = T.alloc_fragment((64, 64), "float16")
            o = T.alloc_fragment((32, 64), "float32")
            T.copy(P, p)
            for i, j in T.Parallel(32, 64):
                o[i, j] = p[j, i + shift]
            T.copy(o, O)

    return moved


@pytest.mark.parametrize("shift", [0, 32])
def test_a_transposed_or_shifted_read_reads_the_shared_copy(shift):
    P = np.random.default_rng(2).random((64, 64)).astype(np.float16)
    k = tilers.compile(transposed(shift), out_idx=[1], target="interp")
    assert np.array_equal(np.asarray(k(P)), P.T[shift:shift + 32].astype(np.float32))
    testing.check_passes(transposed(shift), arch="sm_90a", check=True)
    testing.check_passes(transposed(shift), arch="sm_80", check=True)
    k = tilers.compile(transposed(shift), target="cuda:sm_90a")
    assert any("it reads a copy in shared memory ('p_relayout')" in x for x in k.report().splitlines())


def test_a_write_in_another_layout_stays_an_error():
    @T.prim_func
    def bad(P: T.Tensor((64, 64), "float16"), O: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            p = T.alloc_fragment((64, 64), "float16")
            o = T.alloc_fragment((64, 64), "float32")
            T.copy(P, p)
            T.fill(o, 0)
            for i, j in T.Parallel(64, 64):
                o[j, i] = p[i, j]
            T.copy(o, O)

    with pytest.raises(TileError, match="layout conflict on fragment 'o'"):
        tilers.compile(bad, target="cuda:sm_90a")


# ---------------------------------------------------------------------------------------
# a T.copy between fragments laid out over other threads: TileLang's backward attention
# (`T.copy(qkT, qkT_cast)`, an accumulator whose columns are split over warps, into the A
# operand of the next gemm, which every warp holds whole)


def two_gemms(M=64, N=32, D=128, threads=256):
    @T.prim_func
    def f(A: T.Tensor((M, D), "float16"), B: T.Tensor((N, D), "float16"), V: T.Tensor((N, D), "float16"),
          O: T.Tensor((M, D), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            a = T.alloc_shared((M, D), "float16")
            b = T.alloc_shared((N, D), "float16")
            v = T.alloc_shared((N, D), "float16")
            s = T.alloc_fragment((M, N), "float32")
            p = T.alloc_fragment((M, N), "float16")
            o = T.alloc_fragment((M, D), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.copy(V, v)
            T.clear(s)
            T.gemm(a, b, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(s, p)
            T.clear(o)
            T.gemm(p, v, o, policy=T.GemmWarpPolicy.FullRow)
            T.copy(o, O)

    return f


def two_gemms_inputs(M=64, N=32, D=128):
    rng = np.random.default_rng(3)
    A = (rng.standard_normal((M, D)) / 8).astype(np.float16)
    B = (rng.standard_normal((N, D)) / 8).astype(np.float16)
    V = rng.standard_normal((N, D)).astype(np.float16)
    s = (A.astype(np.float32) @ B.astype(np.float32).T).astype(np.float16).astype(np.float32)
    return A, B, V, s @ V.astype(np.float32)


def test_a_fragment_copy_between_layouts_goes_through_shared_memory():
    A, B, V, want2 = two_gemms_inputs()
    k = tilers.compile(two_gemms(), out_idx=[3], target="interp")
    np.testing.assert_allclose(np.asarray(k(A, B, V)), want2, rtol=2e-3, atol=2e-3)
    k = tilers.compile(two_gemms(), target="cuda:sm_90a")
    assert any("T.copy from 's' to 'p'" in x and "'s_relayout'" in x for x in k.report().splitlines())


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_fragment_copy_passes_every_stage(arch):
    testing.check_passes(two_gemms(), arch=arch, check=True)


def accumulator_windows(M=64, N=64, K=64, rows=32, guarded=True, device_loop=False):
    """C = A @ B^T stored `rows` rows at a time through a small shared stage, each window read
    from the accumulator `s * rows` rows on by a loop over all M rows guarded by `i < rows`
    (TileLang's sparse MLA backward writes its dKV halves so)."""

    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            stage = T.alloc_shared((rows, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=True)
            for s in (T.serial(M // rows) if device_loop else range(M // rows)):
                if guarded:
                    for i, j in T.Parallel(M, N):
                        if i < rows:
                            stage[i, j] = acc[i + s * rows, j]
                else:
                    for i, j in T.Parallel(rows, N):
                        stage[i, j] = acc[i + s * rows, j]
                for i, j in T.Parallel(rows, N):
                    C[i + s * rows, j] = stage[i, j]

    return f


def window_inputs(seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((64, 64)).astype(np.float16)
    B = rng.standard_normal((64, 64)).astype(np.float16)
    return A, B, A.astype(np.float32) @ B.astype(np.float32).T


@pytest.mark.parametrize("rows,guarded,device_loop", [(32, True, False), (16, True, False), (32, False, False),
                                                       (16, True, True), (32, False, True)])
def test_accumulator_windows(rows, guarded, device_loop):
    f = accumulator_windows(rows=rows, guarded=guarded, device_loop=device_loop)
    A, B, ref = window_inputs()
    C = np.zeros((64, 64), np.float32)
    tilers.compile(f, target="interp")(A, B, C)
    np.testing.assert_allclose(C, ref, rtol=1e-5, atol=1e-4)
    for arch in ("sm_90a", "sm_80"):
        testing.check_passes(f, arch=arch, check=True)
    report = tilers.compile(f, target="cuda:sm_90a").report()
    if guarded:
        # the guarded loop runs over the accumulator's own rows: no shared copy of it
        assert "reads a window of 'acc' some rows on: it runs over the fragment's own rows (no copy)" in report
        assert "acc_relayout" not in report
    else:
        assert "acc_relayout" in report
