"""T.Layout / T.Fragment in T.annotate_layout (tilers/_user_layout.py): a buffer's elements
stored where the layout says, on the interpreter against numpy; NVRTC compiles the kernels
for sm_90a and sm_80; misuse is an error at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError


def dq_layout(buf):
    # the layout TileLang's backward attention examples give their float32 dQ accumulator
    return T.Layout(buf.shape, lambda b, l, h, d: [b, l // 8, h, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2])


def dq_storage(x):
    """numpy: where the dq layout stores each element of x (B, L, H, D), as x's own shape."""
    B, L, H, D = x.shape
    out = np.zeros(B * L * H * D, x.dtype)
    b, l, h, d = np.indices(x.shape)
    p = [b, l // 8, h, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2]
    lin = np.ravel_multi_index(p, (B, L // 8, H, D // 8, 2, 32))
    out[lin.ravel()] = x.ravel()
    return out.reshape(x.shape)


def accumulate(B, L, H, D, bl, tile_atomic):
    @T.prim_func
    def acc(X: T.Tensor((B, L, H, D), "float32"), dQ: T.Tensor((B, L, H, D), "float32")):
        with T.Kernel(T.ceildiv(L, bl), H, B, threads=128) as (bx, by, bz):
            T.annotate_layout({dQ: dq_layout(dQ)})
            x = T.alloc_fragment((bl, D), "float32")
            T.copy(X[bz, bx * bl:(bx + 1) * bl, by, :], x)
            if tile_atomic:
                T.atomic_add(dQ[bz, bx * bl:(bx + 1) * bl, by, :], x)
            else:
                for i, j in T.Parallel(bl, D):
                    T.atomic_add(dQ[bz, bx * bl + i, by, j], x[i, j])

    return acc


def postprocess(B, L, H, D, bl):
    @T.prim_func
    def post(dQ: T.Tensor((B, L, H, D), "float32"), out: T.Tensor((B, L, H, D), "float16")):
        with T.Kernel(T.ceildiv(L, bl), H, B, threads=128) as (bx, by, bz):
            T.annotate_layout({dQ: dq_layout(dQ)})
            T.copy(dQ[bz, bx * bl:(bx + 1) * bl, by, :], out[bz, bx * bl:(bx + 1) * bl, by, :])

    return post


@pytest.mark.parametrize("tile_atomic", [False, True])
def test_the_dq_layout_of_the_backward_examples(tile_atomic):
    B, L, H, D, bl = 2, 64, 2, 32, 32
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, L, H, D)).astype(np.float32)
    dq = np.zeros_like(x)
    acc = tilers.compile(accumulate(B, L, H, D, bl, tile_atomic), target="interp")
    acc(x, dq)
    acc(x, dq)
    # the storage is the layout's: element (b, l, h, d) where the layout puts it
    np.testing.assert_allclose(dq, dq_storage(2 * x), rtol=1e-6)
    post = tilers.compile(postprocess(B, L, H, D, bl), out_idx=[1], target="interp")
    np.testing.assert_allclose(np.asarray(post(dq)).astype(np.float32), 2 * x, rtol=1e-3, atol=1e-3)


def transpose_store(M, N, bm):
    @T.prim_func
    def f(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=64) as bx:
            T.annotate_layout({B: T.Layout(B.shape, lambda i, j: [j, i])})
            for i, j in T.Parallel(bm, N):
                if bx * bm + i < M:
                    B[bx * bm + i, j] = A[bx * bm + i, j] * 2

    return f


@pytest.mark.parametrize("M", [64, 50])
def test_a_transposed_global_layout_stores_column_major(M):
    N = 16
    a = np.random.default_rng(1).standard_normal((M, N)).astype(np.float32)
    b = np.zeros_like(a)
    tilers.compile(transpose_store(M, N, 32), target="interp")(a, b)
    # row-major storage of shape (N, M): B's bytes hold (2a)^T
    np.testing.assert_array_equal(b.reshape(-1), (2 * a).T.reshape(-1))


def shared_layout_kernel(M, N):
    @T.prim_func
    def f(A: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((M, N), "float16")
            # an XOR swizzle of 8-element chunks by row
            T.annotate_layout({s: T.Layout(s.shape, lambda i, j: [i, ((j // 8) ^ (i % (N // 8))) * 8 + j % 8])})
            T.copy(A, s)
            f = T.alloc_fragment((M, N), "float16")
            T.copy(s, f)
            T.copy(f, C)

    return f


def test_a_swizzled_shared_tile_round_trips():
    M, N = 32, 64
    a = np.random.default_rng(2).standard_normal((M, N)).astype(np.float16)
    got = tilers.compile(shared_layout_kernel(M, N), out_idx=[1], target="interp")(a)
    np.testing.assert_array_equal(np.asarray(got), a)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_kernels_compile_with_nvrtc(arch):
    pytest.importorskip("cuda.bindings")
    for prim in (accumulate(2, 128, 2, 64, 64, True), accumulate(2, 128, 2, 64, 64, False),
                 postprocess(2, 128, 2, 64, 64), transpose_store(100, 16, 32), shared_layout_kernel(32, 64)):
        kernel = tilers.compile(prim, target=arch)
        assert "__global__" in kernel.get_kernel_source()


def test_the_layout_passes_the_cpu_model():
    from tilers.testing import check_passes

    check_passes(accumulate(2, 64, 2, 32, 32, True), arch="sm_90a").assert_ok()
    check_passes(postprocess(2, 64, 2, 32, 32), arch="sm_90a").assert_ok()
    check_passes(shared_layout_kernel(32, 64), arch="sm_90a").assert_ok()


def test_layout_accessors():
    layout = T.Layout((64, 128), lambda i, j: [j // 8, i, j % 8])
    assert layout.get_input_shape() == [64, 128]
    assert layout.get_output_shape() == [16, 64, 8]
    assert layout.map_forward_index([3, 17]) == [2, 3, 1]


# ---------------------------------------------------------------------------------------
# misuse


def _kernel_with(layout_fn, scope="global", before=False, shape=(32, 32)):
    @T.prim_func
    def f(A: T.Tensor(shape, "float32")):
        with T.Kernel(1, threads=32) as bx:
            buf = A if scope == "global" else (
                T.alloc_shared(shape, "float32") if scope == "shared" else T.alloc_fragment(shape, "float32"))
            if before:
                buf[0, 0] = 1.0
            T.annotate_layout({buf: layout_fn(buf)})  # the line
            for i, j in T.Parallel(*shape):
                A[i, j] = 0.0

    return f


def _line_of_marker():
    import inspect

    src, start = inspect.getsourcelines(_kernel_with)
    return start + next(k for k, line in enumerate(src) if "# the line" in line)


def compile_error(prim):
    with pytest.raises(TileError) as err:
        tilers.compile(prim, target="interp")
    return str(err.value)


def test_a_layout_that_is_not_a_bijection_is_an_error_at_both_lines():
    msg = compile_error(_kernel_with(lambda b: T.Layout(b.shape, lambda i, j: [i // 2, j])))
    assert "not a bijection" in msg and f"test_user_layout.py:{_line_of_marker()}" in msg
    # a shear is a bijection: it compiles
    tilers.compile(_kernel_with(lambda b: T.Layout(b.shape, lambda i, j: [i, (i + j) % 32])), target="interp")
    msg = compile_error(_kernel_with(lambda b: T.Layout(b.shape, lambda i, j: [i, j % 16, j % 2])))
    assert "both map" in msg and "made at" in msg


def test_a_layout_for_another_shape_or_scope_or_after_a_use_is_an_error():
    assert "is for shape [16, 32]" in compile_error(_kernel_with(lambda b: T.Layout((16, 32), lambda i, j: [i, j])))
    assert "a T.Layout lays out global or shared" in compile_error(
        _kernel_with(lambda b: T.Layout(b.shape, lambda i, j: [j, i]), scope="fragment"))
    assert "used before its layout" in compile_error(
        _kernel_with(lambda b: T.Layout(b.shape, lambda i, j: [j, i]), before=True))
    assert "cannot bound" in compile_error(_kernel_with(lambda b: T.Layout(b.shape, lambda i, j: [i, j * 0.5])))
    assert "takes 3 arguments" in compile_error(_kernel_with(lambda b: T.Layout(b.shape, lambda i, j, k: [i, j])))


def test_gemm_refuses_a_tile_with_a_user_layout_naming_both_lines():
    @T.prim_func
    def f(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_shared((64, 64), "float16")
            T.annotate_layout({a: T.Layout(a.shape, lambda i, j: [j, i])})
            c = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a)
            T.clear(c)
            T.gemm(a, a, c)
            T.copy(c, C)

    msg = compile_error(f)
    assert "T.gemm cannot take 'a'" in msg and "the T.Layout made at" in msg


def test_a_fragment_hint_is_accepted_and_checked():
    @T.prim_func
    def f(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_fragment((16, 16), "float32")
            T.annotate_layout({x: T.Fragment(x.shape, forward_thread_fn=lambda i, j: (i * 16 + j) // 8,
                                             forward_index_fn=lambda i, j: j % 8)})
            T.copy(A, x)
            T.copy(x, B)

    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    np.testing.assert_array_equal(np.asarray(tilers.compile(f, out_idx=[1], target="interp")(a)), a)

    @T.prim_func
    def g(A: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((16, 16), "float32")
            T.annotate_layout({s: T.Fragment(s.shape, forward_thread_fn=lambda i, j: i)})
            T.copy(A, s)

    assert "a T.Fragment lays out a fragment" in compile_error(g)
