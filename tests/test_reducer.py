"""T.alloc_reducer / T.reducer_init / T.reducer_update / T.finalize_reducer (TileLang's
reducers, both its styles): an update inside T.Parallel that leaves out loop variables is a
reduction over them. The interpreter against numpy, every pass on the CPU model, NVRTC for
sm_90a and sm_80, misuse at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing


def gemv(M=256, N=512, bm=128, bn=128, op="sum", style="v1", threads=256):
    """o = reduce_op over j of A[i, j] * x[j] — TileLang's gemv_alloc_reducer, ragged sizes."""

    @T.prim_func
    def f(A: T.Tensor((M, N), "float16"), X: T.Tensor((N,), "float16"), O: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            acc = T.alloc_reducer(bm, "float32", op=op, replication="all" if style == "v1" else None)
            if style == "v1":
                T.clear(acc)
            else:
                T.reducer_init(acc)
            for k in T.Pipelined(T.ceildiv(N, bn), num_stages=2):
                a = T.alloc_fragment((bm, bn), "float16")
                x = T.alloc_fragment((bn,), "float16")
                T.copy(A[bx * bm, k * bn], a, pad=0 if op == "sum" else -60000.0)
                T.copy(X[k * bn], x, pad=1.0)
                for i, j in T.Parallel(bm, bn):
                    if style == "v1":
                        if op == "sum":
                            acc[i] += T.cast(a[i, j], "float32") * T.cast(x[j], "float32")
                        else:
                            acc[i] = T.max(acc[i], T.cast(a[i, j], "float32") * T.cast(x[j], "float32"))
                    else:
                        T.reducer_update(acc[i], T.cast(a[i, j], "float32") * T.cast(x[j], "float32"))
            if style == "v1":
                T.finalize_reducer(acc)
                T.copy(acc, O[bx * bm])
            else:
                out = T.alloc_fragment((bm,), "float32")
                T.finalize_reducer(acc, out)
                T.copy(out, O[bx * bm])

    return f


def inputs(M, N):
    rng = np.random.default_rng(0)
    return rng.standard_normal((M, N)).astype(np.float16), rng.standard_normal(N).astype(np.float16)


def want(A, X, op):
    p = A.astype(np.float32) * X.astype(np.float32)
    return {"sum": p.sum(1), "max": p.max(1), "min": p.min(1)}[op]


CASES = [(op, style, M, N) for op, style in [("sum", "v1"), ("sum", "v2"), ("max", "v1"), ("max", "v2")]
         for M, N in [(256, 512), (200, 300)]] + [("min", "v2", 256, 512)]  # (padding is for max)


@pytest.mark.parametrize("op,style,M,N", CASES)
def test_the_interpreter_agrees_with_numpy(op, style, M, N):
    A, X = inputs(M, N)
    got = np.asarray(tilers.compile(gemv(M, N, op=op, style=style), out_idx=[2], target="interp")(A, X))
    np.testing.assert_allclose(got, want(A, X, op), rtol=1e-4, atol=1e-3)


def test_two_left_out_dimensions():
    @T.prim_func
    def f(A: T.Tensor((8, 16, 32), "float32"), O: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_reducer(16, "float32")
            T.reducer_init(acc)
            a = T.alloc_fragment((8, 16, 32), "float32")
            T.copy(A, a)
            for i, j, k in T.Parallel(8, 16, 32):
                acc[j] += a[i, j, k]
            T.copy(acc, O)

    A = np.random.default_rng(2).standard_normal((8, 16, 32)).astype(np.float32)
    got = np.asarray(tilers.compile(f, out_idx=[1], target="interp")(A))
    np.testing.assert_allclose(got, A.sum((0, 2)), rtol=1e-5, atol=1e-4)
    testing.check_passes(f, arch="sm_90a", check=True)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("op,style", [("sum", "v1"), ("max", "v2")])
def test_every_pass_agrees(arch, op, style):
    testing.check_passes(gemv(200, 300, op=op, style=style), arch=arch, check=True)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_nvrtc_compiles_it(arch):
    pytest.importorskip("cuda.bindings")
    k = tilers.compile(gemv(), target=f"cuda:{arch}")
    assert len(k.cubin) > 0
    assert any("reduce_sum" in line for line in k.report().splitlines())


def _error(body):
    @T.prim_func
    def f(A: T.Tensor((16, 16), "float32"), O: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            body(A, O)

    with pytest.raises(TileError) as err:
        tilers.compile(f, target="interp")
    return str(err.value)


def test_misuse_is_an_error_at_the_line():
    def bad_index(A, O):
        acc = T.alloc_reducer(16, "float32")
        T.clear(acc)
        for i, j in T.Parallel(16, 16):
            acc[0] += A[i, j]  # the line

    assert "must index it by loop variables" in _error(bad_index)

    def out_of_order(A, O):
        acc = T.alloc_reducer((16, 16), "float32")
        T.clear(acc)
        for i, j, k in T.Parallel(16, 16, 2):
            acc[j, i] += A[i, j]

    assert "out of the loop's order" in _error(out_of_order)

    def bitwise(A, O):
        T.alloc_reducer(16, "int32", op="bitor")

    assert "tilers reduces with" in _error(bitwise)

    def not_a_reducer(A, O):
        x = T.alloc_fragment(16, "float32")
        T.reducer_init(x)

    assert "takes a buffer made by T.alloc_reducer" in _error(not_a_reducer)


@pytest.mark.parametrize("op", ["max", "min"])
def test_an_integer_reducer_starts_at_the_dtype_limit(op):
    @T.prim_func
    def f(A: T.Tensor((8, 16), "int32"), O: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            acc = T.alloc_reducer(8, "int32", op=op)
            T.reducer_init(acc)
            a = T.alloc_fragment((8, 16), "int32")
            T.copy(A, a)
            for i, j in T.Parallel(8, 16):
                T.reducer_update(acc[i], a[i, j])
            T.copy(acc, O)

    A = np.random.default_rng(0).integers(-100, 100, (8, 16)).astype(np.int32)
    got = np.asarray(tilers.compile(f, out_idx=[1], target="interp")(A))
    np.testing.assert_array_equal(got, A.max(1) if op == "max" else A.min(1))
