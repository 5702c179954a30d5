"""Python control flow on traced values inside a kernel body (the rewrite of tilers/_rewrite.py),
`T.alloc_var`, `T.get_thread_binding` for warp-role conditions, `T.macro`, and TileLang's
small spellings (`T.Cast`, `.astype`, `T.Serial`, `T.clamp`, `T.floordiv`, `T.floormod`).
Kernels run on the interpreter against numpy; misuse is an error at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers.errors import TileError


def rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def run(func, *arrays, out_idx=None, **params):
    return tilers.compile(func, out_idx=out_idx, target="interp", **params)(*arrays)


def test_if_on_a_traced_value_is_a_device_branch_and_on_a_python_value_a_compile_time_one():
    def make(wide):
        @T.prim_func
        def k(A: T.Tensor((4, 64), "float32"), B: T.Tensor((4, 64), "float32")):
            with T.Kernel(4, threads=64) as bx:
                for j in T.Parallel(64):
                    if bx < 2:  # traced: a branch per block
                        B[bx, j] = A[bx, j] * 2.0
                    elif bx == 2:
                        B[bx, j] = -A[bx, j]
                    else:
                        B[bx, j] = A[bx, j] + (100.0 if wide else 1.0)  # Python: chosen now

        return k

    a = rand(4, 64)
    for wide in (True, False):
        b = np.zeros_like(a)
        tilers.compile(make(wide), target="interp")(a, b)
        np.testing.assert_allclose(b[:2], a[:2] * 2, rtol=1e-6)
        np.testing.assert_allclose(b[2], -a[2], rtol=1e-6)
        np.testing.assert_allclose(b[3], a[3] + (100.0 if wide else 1.0), rtol=1e-6)
    program = tilers.compile(make(True), target="interp").program_json
    assert program.count('"op":"if"') >= 2


def test_and_or_not_ternaries_and_chained_comparisons_on_traced_values():
    n = 50

    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                inside = 0 <= i < n
                B[i] = T.if_then_else(inside and not (i % 2 == 0 or i > 40), A[i], 0.0)
                if i >= 60 or (i < 2 and A[i] > 0):
                    B[i] = 7.0
                B[i] = B[i] + (1.0 if i < 10 else 0.0)

    a = rand(64)
    b = np.zeros_like(a)
    tilers.compile(k, target="interp")(a, b)
    i = np.arange(64)
    want = np.where((i < n) & ~((i % 2 == 0) | (i > 40)), a, 0.0)
    want = np.where((i >= 60) | ((i < 2) & (a > 0)), 7.0, want) + np.where(i < 10, 1.0, 0.0)
    np.testing.assert_allclose(b, want.astype(np.float32), rtol=1e-6)


def test_python_values_keep_pythons_meaning():
    items = [1, 2, 3]

    @T.prim_func
    def k(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            scale = 2.0 if len(items) > 2 else 3.0
            first = items and items[0]
            flag = not items
            for i in T.Parallel(8):
                A[i] = A[i] * scale + first + (10.0 if flag else 0.0)

    a = rand(8)
    want = a * 2.0 + 1
    tilers.compile(k, target="interp")(a)
    np.testing.assert_allclose(a, want, rtol=1e-6)


def test_alloc_var_assignment_stores_into_it():
    @T.prim_func
    def k(A: T.Tensor((100,), "float32"), S: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            total = T.alloc_var(T.float32, init=0.0)
            count = T.alloc_var("int32")
            count = 0
            for j in T.serial(100):
                if A[j] > 0:
                    total = total + A[j]
                    count += 1
            S[0] = total
            S[1] = T.Cast("float32", count)

    a = rand(100)
    s = np.zeros(2, np.float32)
    tilers.compile(k, target="interp")(a, s)
    np.testing.assert_allclose(s[0], a[a > 0].sum(), rtol=1e-5)
    assert s[1] == (a > 0).sum()
    assert tilers.compile(k, target="cuda:sm_90a").cubin[:4] == b"\x7fELF"


def test_clear_and_fill_write_an_alloc_var():
    # TileLang's split-K combine: T.clear(v) then v += ...
    @T.prim_func
    def k(A: T.Tensor((16,), "float32"), S: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            total = T.alloc_var(T.float32)
            top = T.alloc_var(T.float32)
            T.clear(total)
            T.fill(top, -T.infinity(T.float32))
            for j in T.serial(16):
                total += A[j]
                top = T.max(top, A[j])
            S[0] = total
            S[1] = top

    a = rand(16)
    s = np.zeros(2, np.float32)
    tilers.compile(k, target="interp")(a, s)
    np.testing.assert_allclose(s, [a.sum(), a.max()], rtol=1e-5)
    result = tilers.testing.check_passes(k, arch="sm_90a")
    assert result.ok, result.failure_message()


def test_an_alloc_var_read_before_any_write_is_an_error_at_the_read():
    @T.prim_func
    def k(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_var(T.float32)
            A[0] = x + 1.0  # <- read before write

    with pytest.raises(TileError, match="T.alloc_var 'x' is read before any value is written") as info:
        tilers.compile(k, target="interp")
    assert "A[0] = x + 1.0" in str(info.value)


@pytest.mark.parametrize("bind", ["get_thread_binding", "thread_binding"])
def test_get_thread_binding_selects_warp_role_regions(bind):
    @T.prim_func
    def k(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            # TileLang's two spellings of the thread index
            tx = T.get_thread_binding() if bind == "get_thread_binding" else T.thread_binding(
                0, 256, thread="threadIdx.x")
            if tx < 128:
                for i in T.Parallel(128):
                    B[i] = A[i] + 1.0
            if tx >= 128:
                for i in T.Parallel(128):
                    B[128 + i] = A[128 + i] * 2.0

    kernel = tilers.compile(k, target="cuda:sm_90a")
    assert "T.ws region on threads 0-127" in kernel.report()
    a = rand(256)
    b = np.zeros_like(a)
    kernel(a, b)
    np.testing.assert_allclose(b, np.concatenate([a[:128] + 1, a[128:] * 2]), rtol=1e-6)
    assert tilers.testing.check_passes(k, arch="sm_90a").ok


def test_the_thread_index_elsewhere_runs_per_thread_and_is_an_error_in_a_parallel_loop():
    @T.prim_func
    def k(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            tx = T.get_thread_binding()
            A[tx] = 1.0  # <- per-thread code outside a parallel loop: every thread's store

    a = np.zeros(256, np.float32)
    tilers.compile(k, target="interp")(a)
    np.testing.assert_array_equal(a, np.ones(256, np.float32))

    @T.prim_func
    def bad(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            tx = T.get_thread_binding()
            for i in T.Parallel(256):
                A[i] = A[tx]  # <- which thread runs iteration i is the compiler's choice

    with pytest.raises(TileError, match="the thread index .* inside a T.Parallel loop") as info:
        tilers.compile(bad, target="cuda:sm_90a")
    assert "A[i] = A[tx]" in str(info.value)


def test_a_macro_is_traced_at_each_call():
    @T.macro
    def axpy(dst, src, alpha, n):
        for i in T.Parallel(n):
            if alpha > 0:
                dst[i] = dst[i] + src[i] * alpha
            else:
                dst[i] = src[i]

    @T.prim_func
    def k(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32"), a: T.float32):
        with T.Kernel(1, threads=64) as bx:
            axpy(Y, X, a, 64)
            axpy(Y, X, 1.0, 64)

    x, y = rand(64), rand(64, seed=1)
    want = y + x * 0.5 + x
    tilers.compile(k, target="interp")(x, y, 0.5)
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_small_spellings():
    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float16"), C: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                B[i] = T.clamp(A[i], -1.0, 1.0).astype("float16")
                C[i] = T.floordiv(i - 32, 5) * 100 + T.floormod(i - 32, 5)
            for k2 in T.Serial(2):
                C[k2] = C[k2] + 1

    a = rand(64) * 3
    b = np.zeros(64, np.float16)
    c = np.zeros(64, np.int32)
    tilers.compile(k, target="interp")(a, b, c)
    np.testing.assert_allclose(b, np.clip(a, -1, 1).astype(np.float16))
    i = np.arange(64) - 32
    want = (i // 5) * 100 + i % 5
    want[:2] += 1
    np.testing.assert_array_equal(c, want)


def collatz_steps(N):
    """Per block, the Collatz steps from X[bx] down to 1: a `while` on a T.alloc_var."""

    @T.prim_func
    def k(X: T.Tensor((N,), "int32"), S: T.Tensor((N,), "int32")):
        with T.Kernel(N, threads=32) as bx:
            x = T.alloc_var("int32", init=X[bx])
            steps = T.alloc_var("int32", init=0)
            while x != 1:
                if x % 2 == 0:
                    x = x // 2
                else:
                    x = 3 * x + 1
                steps = steps + 1
            S[bx] = steps

    return k


def chunked_copy(N, block=64):
    """B = 2 A by chunks of `block` in a `while` over a T.alloc_var offset, tile ops inside
    (a ragged last chunk when N is no multiple of it), and a Python `while` unrolled at trace
    time beside it."""

    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((block,), "float32")
            start = T.alloc_var("int32", init=0)
            while start < N:
                T.copy(A[start], s)
                for i in T.Parallel(block):
                    s[i] = s[i] * 2.0
                T.copy(s, B[start])
                start = start + block
            unrolled = 0
            while unrolled < 2:  # a Python value: runs at trace time
                B[unrolled] = B[unrolled] + 0.0
                unrolled += 1

    return k


def collatz_want(X):
    out = []
    for x in X:
        n = 0
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            n += 1
        out.append(n)
    return np.array(out, np.int32)


def test_while_on_a_traced_value_is_a_device_loop():
    X = np.array([1, 2, 3, 6, 7, 27, 97, 871], np.int32)
    S = np.zeros(8, np.int32)
    run(collatz_steps(8), X, S)
    np.testing.assert_array_equal(S, collatz_want(X))
    for N in (64, 200, 37):
        A = rand(N)
        B = np.zeros(N, np.float32)
        run(chunked_copy(N), A, B)
        np.testing.assert_array_equal(B, 2 * A)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_device_while_agrees_pass_by_pass(arch):
    from tilers import testing

    testing.check_passes(chunked_copy(200), arch=arch, check=True)
    src = tilers.compile(collatz_steps(8), target=f"cuda:{arch}").get_kernel_source()
    assert "2147483647" in src and "break;" in src


def test_while_misuse_is_an_error_at_the_line():
    @T.prim_func
    def k(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            n = 0
            while n < 3:
                n = A[0] if n == 1 else n + 1  # turns traced
    with pytest.raises(TileError, match="was a Python value and is now a traced one") as err:
        tilers.compile(k, target="interp")
    assert "test_control_flow.py" in str(err.value)


@tilers.jit
def eager_relu_shift(A, shift=1.0):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
        for i in T.Parallel(128):
            x = A[bx * 128 + i]
            if x > 0 and shift != 0:
                B[bx * 128 + i] = x + shift
            else:
                B[bx * 128 + i] = 0.0
    return B


def test_the_eager_style_has_the_same_control_flow():
    a = rand(300)
    np.testing.assert_allclose(eager_relu_shift(a), np.where(a > 0, a + 1.0, 0.0), rtol=1e-6)
    np.testing.assert_allclose(eager_relu_shift(a, 0.0), np.zeros_like(a))


def test_tile_ops_inside_a_device_branch_get_their_barriers():
    # a copy into shared memory and a read of it, both inside `if` on a traced value: the
    # barrier between them goes inside the branch (the condition is the block's)
    @T.prim_func
    def k(A: T.Tensor((256, 64), "float32"), B: T.Tensor((256, 64), "float32"), n: T.int32):
        with T.Kernel(4, threads=128) as bx:
            S = T.alloc_shared((64, 64), "float32")
            if bx < n:
                T.copy(A[bx * 64, 0], S)
                for i, j in T.Parallel(64, 64):
                    B[bx * 64 + i, j] = S[63 - i, j] * 2.0
            else:
                T.copy(A[bx * 64, 0], S)
                for i, j in T.Parallel(64, 64):
                    B[bx * 64 + i, j] = S[i, 63 - j]

    result = tilers.testing.check_passes(k, arch="sm_90a")
    assert result.ok, result.failure_message()
    source = tilers.compile(k, target="cuda:sm_90a").source
    body = source[source.index("if ((bx < n))"):]
    assert body.count("__syncthreads();") >= 2


def test_barriers_the_kernel_places():
    @T.prim_func
    def k(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            S = T.alloc_shared((256,), "float32")
            for i in T.Parallel(256):
                S[i] = A[i]
            T.sync_threads()
            for i in T.Parallel(256):
                B[i] = S[255 - i]
            T.sync_threads(3, 128)
            T.wait_wgmma(0)

    kernel = tilers.compile(k, target="cuda:sm_90a")
    assert "bar.sync 3, 128;" in kernel.source and "__syncthreads();" in kernel.source
    a = rand(256)
    b = np.zeros_like(a)
    tilers.compile(k, target="interp")(a, b)
    np.testing.assert_array_equal(b, a[::-1])
    with pytest.raises(TileError, match="a named barrier is an id from 0 to 15"):
        @T.prim_func
        def bad(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.sync_threads(3, 100)

        tilers.compile(bad, target="interp")


def test_tilelangs_hint_keywords_are_accepted_and_unsupported_ones_named():
    @T.prim_func
    def k(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 64), "float16"),
          C: T.Tensor((128, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((128, 64), "float16", "shared")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((128, 64), "float32")
            T.fill(acc, 0, annotations={})
            T.copy(A, A_s, disable_tma=True, coalesced_width=8)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, k_pack=1, wg_wait=0)
            for i, j in T.Parallel(128, 64, annotations={}):
                T.atomic_add(C[i, j], acc[i, j], memory_order="relaxed")

    a, b = rand(128, 64, dtype="float16"), rand(64, 64, dtype="float16", seed=1)
    c = np.zeros((128, 64), np.float32)
    tilers.compile(k, target="interp")(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-2, atol=2e-2)

    @T.prim_func
    def ordered(C: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                T.atomic_add(C[i], 1.0, memory_order="release")

    ones = np.zeros(8, np.float32)
    tilers.compile(ordered, target="interp")(ones)  # stronger orders: tests/test_atomics.py
    np.testing.assert_array_equal(ones, 1.0)


def test_a_jump_out_of_a_device_branch_is_an_error_at_the_jump():
    @T.prim_func
    def k(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.serial(8):
                if A[i] > 0:
                    if A[i] > 2:
                        continue  # <- leaves the traced loop
                    A[i] = 2.0
                A[i] = 1.0

    # (a `continue` ending a branch of an `if` of the loop's own body is TileLang's
    # `continue`: tests/test_call_and_compile_checks.py; one deeper is still an error)
    with pytest.raises(TileError, match="`continue` inside an `if` on a traced value") as info:
        tilers.compile(k, target="interp")
    assert "continue  # <- leaves the traced loop" in str(info.value)

    @T.prim_func
    def python_jump(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in range(4):  # a Python loop: its `continue` is Python's
                if i % 2:
                    continue
                A[i] = 1.0

    a = np.zeros(8, np.float32)
    tilers.compile(python_jump, target="interp")(a)
    np.testing.assert_array_equal(a, [1, 0, 1, 0, 0, 0, 0, 0])


def test_thread_binding_must_span_the_block():
    @T.prim_func
    def wrong(L: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.thread_binding(0, 64, thread="threadIdx.x")
            if tx < 64:
                for i in T.Parallel(256):
                    L[i] = 0.0

    with pytest.raises(TileError, match="must span the block's threads"):
        tilers.compile(wrong, target="interp")
