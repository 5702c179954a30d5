"""SIMT code on the thread index, as TileLang kernels write it: a statement outside
T.Parallel that reads the thread index (T.get_thread_binding / T.thread_binding) runs on
every thread, each with its own values — its stores and atomics are each thread's, a
T.alloc_var it sets holds each thread's own value. The interpreter against numpy, every
pass on the CPU model, NVRTC for sm_90a and sm_80, misuse at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing


def mask_rows(M, N, threads=128, block=512):
    """TileLang's clean_and_maintain_logits: per row, +inf at ks and ke - 1, -inf outside
    [ks, ke), others untouched — a strided loop over the thread index."""

    @T.prim_func
    def f(L: T.Tensor((M, N), "float32"), KS: T.Tensor((M,), "int32"), KE: T.Tensor((M,), "int32")):
        with T.Kernel(M, threads=threads) as bx:
            tx = T.thread_binding(0, threads, thread="threadIdx.x")
            ks = KS[bx]
            ke = KE[bx]
            for n in T.Pipelined(T.ceildiv(N, block)):
                for k in T.serial(block // threads):
                    idx = n * block + k * threads + tx
                    if idx == ks or idx == ke - 1:
                        L[bx, idx] = T.infinity("float32")
                    if idx < ks or idx >= ke:
                        L[bx, idx] = -T.infinity("float32")

    return f


def mask_inputs(M, N, seed=0):
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((M, N)).astype(np.float32)
    ks = rng.integers(0, N // 2, M).astype(np.int32)
    ke = np.minimum(ks + rng.integers(1, N, M), N).astype(np.int32)
    return L, ks, ke


def mask_want(L, ks, ke):
    out = L.copy()
    n = np.arange(L.shape[1])[None, :]
    out[(n < ks[:, None]) | (n >= ke[:, None])] = -np.inf
    rows = np.arange(L.shape[0])
    out[rows, ks] = np.inf
    out[rows, ke - 1] = np.inf
    return out


def histogram(N, bins=64, threads=128):
    """Each thread counts its elements into a shared histogram with atomics, one thread per
    bin writes it out; a per-thread T.alloc_var carries a value across a barrier."""

    @T.prim_func
    def f(X: T.Tensor((N,), "int32"), H: T.Tensor((bins,), "int32"), P: T.Tensor((bins,), "int32")):
        with T.Kernel(1, threads=threads) as bx:
            tx = T.get_thread_binding()
            h = T.alloc_shared((bins,), "int32")
            v = T.alloc_var("int32")
            T.fill(h, 0)
            for s in T.serial(T.ceildiv(N, threads)):
                i = s * threads + tx
                if i < N:
                    T.atomic_add(h[X[i] % bins], 1)
            T.sync_threads()
            if tx < bins:
                v = h[tx]  # each thread's own bin
            T.sync_threads()
            if tx < bins:
                H[tx] = v
                # an inclusive prefix by hand: every thread sums the bins up to its own
                acc = T.alloc_var("int32", init=0)
                for j in T.serial(tx + 1):
                    acc = acc + h[j]
                P[tx] = acc

    return f


def test_strided_masking_on_the_interpreter():
    M, N = 6, 1000
    L, ks, ke = mask_inputs(M, N)
    got = L.copy()
    tilers.compile(mask_rows(M, N), target="interp")(got, ks, ke)
    np.testing.assert_array_equal(got, mask_want(L, ks, ke))


def test_histogram_on_the_interpreter():
    N = 1000
    X = np.random.default_rng(1).integers(0, 1 << 20, N).astype(np.int32)
    H = np.zeros(64, np.int32)
    P = np.zeros(64, np.int32)
    tilers.compile(histogram(N), target="interp")(X, H, P)
    want = np.bincount(X % 64, minlength=64)
    np.testing.assert_array_equal(H, want)
    np.testing.assert_array_equal(P, np.cumsum(want))


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees(arch):
    testing.check_passes(mask_rows(4, 1000), arch=arch, check=True)
    testing.check_passes(histogram(1000), arch=arch, check=True)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_nvrtc_compiles_it(arch):
    pytest.importorskip("cuda.bindings")
    for f in (mask_rows(4, 1000), histogram(1000)):
        k = tilers.compile(f, target=f"cuda:{arch}")
        assert len(k.cubin) > 0


def test_per_thread_stores_have_no_thread_zero_guard():
    src = tilers.compile(mask_rows(4, 1000), target="cuda:sm_90a").get_kernel_source()
    # the masked stores are each thread's (bounds-checked), not thread 0's
    assert "tid == 0" not in src
    assert src.count("L[(bx) * 1000 + ((tid + (n * 512)) + (k * 128))] =") == 2


def _error(body, threads=128):
    @T.prim_func
    def f(A: T.Tensor((256,), "float32"), O: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            body(A, O)

    with pytest.raises(TileError) as err:
        tilers.compile(f, target="interp")
    return str(err.value)


def test_misuse_is_an_error_at_the_line():
    def tile_op_per_thread(A, O):
        tx = T.get_thread_binding()
        s = T.alloc_shared((128,), "float32")
        with T.If(tx == 3):
            T.copy(A[0:128], s)  # a tile op under a per-thread condition

    msg = _error(tile_op_per_thread)
    assert "T.copy under a statement that runs on each thread" in msg and "test_simt.py" in msg

    def tid_in_parallel(A, O):
        tx = T.get_thread_binding()
        for i in T.Parallel(128):
            O[i] = A[tx]

    assert "inside a T.Parallel loop" in _error(tid_in_parallel)

    @T.prim_func
    def per_thread_var_in_parallel(A: T.Tensor((256,), "float32"), O: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_var("float32")
            v = A[tx]
            for i in T.Parallel(128):
                O[i] = v

    with pytest.raises(TileError) as err:
        tilers.compile(per_thread_var_in_parallel, target="interp")
    msg = str(err.value)
    assert "holds a value of each thread's own" in msg and "test_simt.py" in msg


def first_above(R, N, threads=128):
    """Each thread finds the first element of its row above 0.5: a per-thread `break`."""

    @T.prim_func
    def f(A: T.Tensor((R, N), "float32"), O: T.Tensor((R,), "int32")):
        with T.Kernel(T.ceildiv(R, threads), threads=threads) as bx:
            tx = T.get_thread_binding()
            row = bx * threads + tx
            pos = T.alloc_var("int32", init=-1)
            for j in T.serial(N):
                if A[row, j] > 0.5:
                    pos = j
                    break
            if row < R:
                O[row] = pos

    return f


def countdown(N):
    """A block-wide `break` on a value read from memory (TileLang's topk tail rounds)."""

    @T.prim_func
    def f(L: T.Tensor((1,), "int32"), Y: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            left = T.alloc_var("int32")
            left = L[0]
            for r in T.serial(N):
                if left <= 0:
                    break
                Y[r] = left
                left = left - 3

    return f


def test_per_thread_break_on_the_interpreter_and_every_pass():
    R, N = 200, 37
    A = np.random.default_rng(2).random((R, N)).astype(np.float32) * 0.6
    O = np.zeros(R, np.int32)
    tilers.compile(first_above(R, N), target="interp")(A, O)
    hit = A > 0.5
    want = np.where(hit.any(1), hit.argmax(1), -1)
    np.testing.assert_array_equal(O, want)
    for arch in ("sm_90a", "sm_80"):
        testing.check_passes(first_above(R, N), arch=arch, check=True)


@pytest.mark.parametrize("start", [10, 0, 100])
def test_block_wide_break(start):
    N = 8
    Y = np.zeros(N, np.int32)
    tilers.compile(countdown(N), target="interp")(np.array([start], np.int32), Y)
    want = np.zeros(N, np.int32)
    for r in range(N):
        v = start - 3 * r
        if v <= 0:
            break
        want[r] = v
    np.testing.assert_array_equal(Y, want)
    testing.check_passes(countdown(N), arch="sm_90a", check=True)


def test_break_compiles_to_a_c_break():
    pytest.importorskip("cuda.bindings")
    for arch in ("sm_90a", "sm_80"):
        for f in (first_above(200, 37), countdown(8)):
            k = tilers.compile(f, target=f"cuda:{arch}")
            assert "break;" in k.get_kernel_source() and len(k.cubin) > 0


def test_break_misuse_is_an_error_at_the_line():
    @T.prim_func
    def in_parallel(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                if A[i] > 0:
                    break

    @T.prim_func
    def python_loop(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in range(4):
                if A[i] > 0:
                    break
                A[i] = 1.0

    @T.prim_func
    def unrolled(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.unroll(4):
                if A[i] > 0:
                    break

    @T.prim_func
    def cont(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.serial(4):
                if A[i] > 0:
                    if A[i] > 1:  # (a continue ending an if of the loop body itself is fine)
                        continue
                    A[i] = 2.0
                A[i] = 1.0

    for f, words in [(in_parallel, "inside a T.Parallel block"), (python_loop, "out of a Python loop"),
                     (unrolled, "inside a T.unroll block"), (cont, "`continue` inside an `if` on a traced value")]:
        with pytest.raises(TileError) as err:
            tilers.compile(f, target="interp")
        assert words in str(err.value) and "test_simt.py" in str(err.value), str(err.value)
