"""A kernel's own asynchronous copies, as TileLang's hand-pipelined kernels write them:
``T.ptx_cp_async(T.access_ptr(S[..], "w", n), T.access_ptr(G[..], "r", n), n)`` by each
thread, closed with ``T.ptx_commit_group`` and waited for with ``T.ptx_wait_group``, or
handed to consumers through an mbarrier with ``T.cp_async_barrier_noinc``. The interpreter
against numpy, every pass on the CPU model (the copies land at the wait or the arrival),
NVRTC, misuse at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing


def gather_rows(N, D, R, dtype="float16", elems=8, threads=128, valid=None, indexed=True):
    """O[r] = X[I[r]] through shared memory, each thread copying `elems` elements at a time;
    with `valid`, rows from `valid` on are zero-filled by the copy's predicate. Not
    `indexed`: rows (7 r + 3) % N, for the CPU model's random inputs."""

    @T.prim_func
    def f(X: T.Tensor((N, D), dtype), I: T.Tensor((R,), "int32"), O: T.Tensor((R, D), dtype)):
        with T.Kernel(1, threads=threads) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((R, D), dtype)
            per_row = D // elems
            for s in T.serial(T.ceildiv(R * per_row, threads)):
                c = s * threads + tx
                if c < R * per_row:
                    r = c // per_row
                    j = c % per_row * elems
                    row = I[r] if indexed else (r * 7 + 3) % N
                    if valid is None:
                        T.ptx_cp_async(T.access_ptr(S[r, j], "w", elems), T.access_ptr(X[row, j], "r", elems), elems)
                    else:
                        T.ptx_cp_async(
                            T.access_ptr(S[r, j], "w", elems),
                            T.access_ptr(X[row, j], "r", elems),
                            elems,
                            predicate=r < valid,
                        )
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.sync_threads()
            T.copy(S, O)

    return f


def gather_inputs(N, D, R, dtype="float16", seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)).astype(dtype)
    I = rng.integers(0, N, R).astype(np.int32)
    return X, I, np.zeros((R, D), dtype)


def staged_rows(tiles, D, rows=16, stages=2, dtype="float16", producer_first=False):
    """O = X + bias, rows by rows: a producer warpgroup fills `stages` shared slots with
    cp.async and hands each to the consumers with cp.async.mbarrier.arrive.noinc; the
    consumers add the bias (a shared tile the whole block filled before the roles split)
    and free the slot. `producer_first`: the producer's branch comes first (`if tx >= 128`),
    the consumers' in its `else`."""

    @T.prim_func
    def f(X: T.Tensor((tiles * rows, D), dtype), Bias: T.Tensor((D,), dtype),
          O: T.Tensor((tiles * rows, D), dtype)):
        with T.Kernel(1, threads=256) as bx:
            S = T.alloc_shared((stages, rows, D), dtype)
            bias = T.alloc_shared((D,), dtype)
            ready = T.alloc_barrier([128] * stages)
            free = T.alloc_barrier([128] * stages)
            tx = T.get_thread_binding()
            T.copy(Bias, bias)

            def consume():
                for t in T.serial(tiles):
                    T.barrier_wait(ready[t % stages], (t // stages) & 1)
                    for i, j in T.Parallel(rows, D):
                        O[t * rows + i, j] = S[t % stages, i, j] + bias[j]
                    T.barrier_arrive(free[t % stages])

            def produce():
                for t in T.serial(tiles):
                    T.barrier_wait(free[t % stages], ((t // stages) & 1) ^ 1)
                    for s in T.serial(rows * D // 8 // 128):
                        c = s * 128 + (tx - 128)
                        r = c // (D // 8)
                        j = c % (D // 8) * 8
                        T.ptx_cp_async(
                            T.access_ptr(S[t % stages, r, j], "w", 8),
                            T.access_ptr(X[t * rows + r, j], "r", 8),
                            8,
                        )
                    T.cp_async_barrier_noinc(ready[t % stages])

            if producer_first:
                with T.If(tx >= 128):
                    produce()
                with T.Else():
                    consume()
            else:
                with T.If(tx < 128):
                    consume()
                with T.Else():
                    produce()

    return f


@pytest.mark.parametrize("dtype,elems", [("float16", 8), ("float16", 4), ("float32", 1), ("int32", 2)])
def test_gather_on_the_interpreter(dtype, elems):
    N, D, R = 50, 64, 24
    X, I, O = gather_inputs(N, D, R, dtype)
    tilers.compile(gather_rows(N, D, R, dtype, elems), target="interp")(X, I, O)
    np.testing.assert_array_equal(O, X[I])


def test_predicate_zero_fills():
    N, D, R = 50, 64, 24
    X, I, O = gather_inputs(N, D, R)
    O[:] = 7
    tilers.compile(gather_rows(N, D, R, valid=10), target="interp")(X, I, O)
    want = X[I]
    want[10:] = 0
    np.testing.assert_array_equal(O, want)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees(arch):
    testing.check_passes(gather_rows(50, 64, 24, indexed=False), arch=arch, check=True)
    testing.check_passes(gather_rows(50, 64, 24, "float32", 1, indexed=False), arch=arch, check=True)
    testing.check_passes(gather_rows(50, 64, 24, valid=10, indexed=False), arch=arch, check=True)


@pytest.mark.parametrize("producer_first", [False, True])
def test_mbarrier_hand_over_agrees(producer_first):
    # the regions run concurrently: the reference is the CPU model of the lowered code (a
    # block-wide barrier inside the consumers' `else` would be a deadlock there)
    r = testing.check_passes(staged_rows(5, 64, producer_first=producer_first), arch="sm_90a", check=True)
    assert "the reference (on the CPU model)" in r.table()


def test_interpreter_refuses_the_hand_over_instead_of_a_wrong_answer():
    # program order runs the consumers' loop before the producers': its first wait can
    # never return there
    X = np.zeros((5 * 16, 64), np.float16)
    with pytest.raises(TileError, match="would wait forever here") as err:
        tilers.compile(staged_rows(5, 64), target="interp")(X, np.zeros(64, np.float16), X.copy())
    assert "test_cp_async.py" in str(err.value)


def test_the_cuda_says_what_it_does():
    src = tilers.compile(gather_rows(50, 64, 24, elems=4), target="cuda:sm_90a").get_kernel_source()
    assert "cp.async.ca.shared.global [%0], [%1], 8;" in src
    assert "cp.async.commit_group;" in src and "cp.async.wait_group 0;" in src
    src = tilers.compile(gather_rows(50, 64, 24, valid=10), target="cuda:sm_90a").get_kernel_source()
    assert "cp.async.cg.shared.global [%0], [%1], 16, %2;" in src
    src = tilers.compile(staged_rows(5, 64), target="cuda:sm_90a").get_kernel_source()
    assert "cp.async.mbarrier.arrive.noinc.shared::cta.b64" in src


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_nvrtc_compiles_it(arch):
    pytest.importorskip("cuda.bindings")
    kernels = [gather_rows(50, 64, 24), gather_rows(50, 64, 24, "float32", 1), gather_rows(50, 64, 24, valid=10)]
    if arch == "sm_90a":
        kernels.append(staged_rows(5, 64))
    for f in kernels:
        assert len(tilers.compile(f, target=f"cuda:{arch}").cubin) > 0


def uniform_copy(rows=4, D=64):
    """cp.async at addresses that do not read the thread index: once per block (thread 0
    issues it, as a store outside T.Parallel is made), then waited for and read by all."""

    @T.prim_func
    def f(X: T.Tensor((rows, D), "float16"), O: T.Tensor((rows, D), "float16")):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_shared((rows, D), "float16")
            for r in T.serial(rows):
                for c in T.serial(D // 8):
                    T.ptx_cp_async(T.access_ptr(S[r, c * 8], "w", 8), T.access_ptr(X[r, c * 8], "r", 8), 8)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.copy(S, O)

    return f


def test_a_copy_every_thread_would_make_alike_is_made_once():
    X = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float16)
    O = np.zeros_like(X)
    tilers.compile(uniform_copy(), target="interp")(X, O)
    np.testing.assert_array_equal(O, X)
    # on the CPU model: 128 threads copying into the same bytes would be copies in flight
    # into bytes another copy writes
    testing.check_passes(uniform_copy(), arch="sm_90a", check=True)
    src = tilers.compile(uniform_copy(), target="cuda:sm_90a").get_kernel_source()
    lines = src.splitlines()
    at = next(k for k, line in enumerate(lines) if "cp.async.cg" in line)
    assert lines[at - 1].strip() == "if ((tid == 0)) {"


def _error(body):
    @T.prim_func
    def f(A: T.Tensor((256,), "float16"), B: T.Tensor((256,), "float32"), O: T.Tensor((256,), "float16")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((256,), "float16")
            body(A, B, O, S, tx)

    with pytest.raises(TileError) as err:
        tilers.compile(f, target="interp")
    msg = str(err.value)
    assert "test_cp_async.py" in msg
    return msg


def test_misuse_is_an_error_at_the_line():
    msg = _error(lambda A, B, O, S, tx: T.ptx_cp_async(T.access_ptr(O[tx], "w", 8), T.access_ptr(S[tx], "r", 8), 8))
    assert "parameter 'dst_access_ptr': expected an address in shared memory" in msg
    msg = _error(lambda A, B, O, S, tx: T.ptx_cp_async(T.access_ptr(S[tx], "w", 8), T.access_ptr(A[tx], "r", 8), 3))
    assert "3 elements of float16 are 6 bytes" in msg
    msg = _error(lambda A, B, O, S, tx: T.ptx_cp_async(T.access_ptr(S[tx], "w", 4), T.access_ptr(B[tx], "r", 4), 4))
    assert "one dtype" in msg
    msg = _error(lambda A, B, O, S, tx: T.ptx_cp_async(S[tx], A[tx], 8))
    assert "expected a T.access_ptr(...) address, got Load" in msg
    msg = _error(lambda A, B, O, S, tx: T.ptx_cp_async(T.access_ptr(S[tx], "r", 8), T.access_ptr(A[tx], "r", 8), 8))
    assert "was taken for access 'r'; the copy writes it" in msg
    msg = _error(lambda A, B, O, S, tx: T.ptx_wait_group(9))
    assert "parameter 'num': expected a Python int from 0 to 7, got 9" in msg
    msg = _error(lambda A, B, O, S, tx: T.cp_async_barrier_noinc(S))
    assert "takes a barrier from T.alloc_barrier" in msg


def test_misaligned_copy_is_caught_by_the_cpu_model():
    # 8 halves = 16 bytes starting at column 4: the source is not 16-byte aligned
    @T.prim_func
    def f(X: T.Tensor((4, 64), "float16"), O: T.Tensor((4, 64), "float16")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((4, 64), "float16")
            if tx < 4:
                T.ptx_cp_async(T.access_ptr(S[tx, 0], "w", 8), T.access_ptr(X[tx, 4], "r", 8), 8)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.copy(S, O)

    with pytest.raises(Exception, match="not 16-byte aligned"):
        testing.check_passes(f, arch="sm_90a", check=True)
