"""Every test kernel on the reference interpreter (host numpy arrays), checked against numpy."""

import math
import os
import sys

import numpy as np
import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.dirname(__file__))
import kernels  # noqa: E402
from tilers.host import numpy_dtype  # noqa: E402

RNG = np.random.default_rng(1234)
ELF_MAGIC = b"\x7fELF"


def randn(shape, dtype):
    return RNG.standard_normal(shape).astype(numpy_dtype(dtype))


def f64(x):
    return np.asarray(x, dtype=np.float64)


def test_add_every_dtype_exact():
    for dtype, (M, N) in [("float16", (1000, 1000)), ("bfloat16", (33, 250)), ("float32", (7, 33))]:
        for factory in (kernels.add, kernels.add_tiles):
            k = tilers.compile(factory(M, N, dtype), out_idx=[2])
            a, b = randn((M, N), dtype), randn((M, N), dtype)
            assert (k(a, b) == (a + b)).all(), (factory.__name__, dtype)


def test_add_int8_wraps():
    k = tilers.compile(kernels.add(65, 100, "int8"), out_idx=[2])
    a = RNG.integers(-128, 128, (65, 100), dtype=np.int8)
    b = RNG.integers(-128, 128, (65, 100), dtype=np.int8)
    assert (k(a, b) == (a.astype(np.int64) + b).astype(np.int8)).all()


def test_bias_gelu_bf16():
    k = tilers.compile(kernels.bias_gelu(100, 300), out_idx=[2])
    x, bias = randn((100, 300), "bfloat16"), randn((300,), "bfloat16")
    v = f64(x) + f64(bias)
    want = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    assert np.allclose(f64(k(x, bias)), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "M,N,kw",
    [(1001, 1024, {}), (64, 1000, {"tile_N": 1024}), (3, 100, {"block_M": 2, "tile_N": 128})],
)
def test_softmax(M, N, kw):
    k = tilers.compile(kernels.softmax(M, N, **kw), out_idx=[1])
    x = randn((M, N), "float32") * 4
    e = np.exp(f64(x) - f64(x).max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    assert np.allclose(k(x), want, rtol=1e-5, atol=1e-7)


def test_transpose():
    for dtype in ("float32", "float16"):
        k = tilers.compile(kernels.transpose(1000, 700, dtype), out_idx=[1])
        a = randn((1000, 700), dtype)
        assert (k(a) == a.T).all()


def test_row_sum_and_col_absmax():
    k = tilers.compile(kernels.row_sum(1001, 1000), out_idx=[1])
    a = randn((1001, 1000), "float32")
    assert np.allclose(k(a), f64(a).sum(1), rtol=1e-5, atol=1e-4)
    k = tilers.compile(kernels.col_absmax(1000, 999), out_idx=[1])
    a = randn((1000, 999), "float16")
    assert (k(a) == np.abs(a.astype(np.float32)).max(0)).all()


def test_scalar_parameters_and_untouched_rows():
    k = tilers.compile(kernels.scale_shift(100, 1000))
    x = randn((100, 1000), "float32")
    y = np.full_like(x, 7.0)
    k(x, y, 0.5, 60)
    assert np.allclose(y[:60], 0.5 * f64(x[:60]) + 1.0, rtol=1e-6)
    assert (y[60:] == 7.0).all()


def test_histogram_atomics():
    k = tilers.compile(kernels.histogram(10000))
    x = RNG.integers(0, 1 << 20, (10000,), dtype=np.int32)
    h = np.zeros(64, np.int32)
    k(x, h)
    assert (h == np.bincount(x % 64, minlength=64)).all()


def test_float_to_int_saturates():
    k = tilers.compile(kernels.clamp_int8(100, 1000), out_idx=[1, 2])
    x = randn((100, 1000), "float32") * 2
    x[0, :4] = [np.nan, np.inf, -np.inf, 1e30]
    q, p = k(x)
    with np.errstate(invalid="ignore"):
        want = np.nan_to_num(np.floor(f64(x) * 127.0 + 0.5), nan=0.0, posinf=127, neginf=-128)
    assert (q == np.clip(want, -128, 127).astype(np.int8)).all()
    assert (p == (x > 0)).all()


def test_math_functions():
    k = tilers.compile(kernels.math_zoo(1000), out_idx=[1])
    x = np.abs(randn((1000,), "float32")) + np.float32(0.01)
    y = k(x)
    refs = {
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "rsqrt": lambda v: 1 / np.sqrt(v),
        "erf": np.vectorize(math.erf),
    }
    for i, name in enumerate(kernels.MATH_FUNCS):
        want = refs.get(name, getattr(np, name, None))(f64(x))
        assert np.allclose(y[i], want, rtol=2e-7, atol=1e-7), name


def test_head_slices():
    k = tilers.compile(kernels.head_slices(2, 100, 3, 64), out_idx=[1])
    q = randn((2, 100, 3, 64), "float16")
    want = 2.0 * f64(q) - f64(q).min(-1, keepdims=True)
    assert np.allclose(f64(k(q)), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "trans_A,trans_B", [(False, False), (False, True), (True, False), (True, True)]
)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8"])
def test_matmul(dtype, trans_A, trans_B):
    M, N, K = 33, 70, 100
    accum = "int32" if dtype == "int8" else "float32"
    k = tilers.compile(
        kernels.matmul(
            M,
            N,
            K,
            64,
            64,
            64 if dtype == "int8" else 32,
            dtype=dtype,
            accum_dtype=accum,
            trans_A=trans_A,
            trans_B=trans_B,
        ),
        out_idx=[2],
        target="interp",
    )
    if dtype == "int8":
        a = RNG.integers(-128, 128, (K, M) if trans_A else (M, K), dtype=np.int8)
        b = RNG.integers(-128, 128, (N, K) if trans_B else (K, N), dtype=np.int8)
    else:
        a, b = (
            randn((K, M) if trans_A else (M, K), dtype),
            randn((N, K) if trans_B else (K, N), dtype),
        )
    want = (f64(a).T if trans_A else f64(a)) @ (f64(b).T if trans_B else f64(b))
    got = f64(k(a, b))
    if dtype == "int8":
        assert (got == want).all()
    else:
        assert np.abs(got - want).max() <= 1e-2 * (np.abs(want).max() + 1)


def test_article_matmul_as_written():
    k = tilers.compile(kernels.article_matmul(256, 256, 256), out_idx=[2], target="interp")
    a, b = randn((256, 256), "float16"), randn((256, 256), "float16")
    want = f64(a) @ f64(b)
    assert np.abs(f64(k(a, b)) - want).max() <= 1e-2 * np.abs(want).max()


def test_mixing_host_and_gpu_is_refused_or_host_arrays_checked():
    k = tilers.compile(kernels.add(8, 8), out_idx=[2])
    a = np.zeros((8, 8), np.float16)
    with pytest.raises(ValueError, match="parameter 'B': expected dtype float16, got float32"):
        k(a, np.zeros((8, 8), np.float32))
    with pytest.raises(
        ValueError, match="parameter 'A': expected shape \\(8, 8\\), got \\(8, 4\\)"
    ):
        k(np.zeros((8, 4), np.float16), a)
    with pytest.raises(ValueError, match="parameter 'A': expected a C-contiguous array"):
        k(np.zeros((8, 8), np.float16).T, a)
    with pytest.raises(TypeError, match="takes 2"):
        k(a)


def test_interp_target_needs_no_gpu_code():
    k = tilers.compile(kernels.add(8, 8), out_idx=[2], target="interp")
    assert k.source is None
    with pytest.raises(RuntimeError, match="compiled for the interpreter"):
        _ = k.cubin


def test_cleared_scalar_accumulator_of_a_vector_reduction():
    """Found by the program generator: a (1,) accumulator cleared before reduce_sum(dim=0)
    used to take a layout of its own and conflict with the reduction."""

    @T.prim_func
    def vector_sum(A: T.Tensor((1000,), "float32"), S: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((256,), "float32")
            acc = T.alloc_fragment((1,), "float32")
            T.clear(acc)
            for k in T.serial(4):
                T.copy(A[k * 256], x)
                T.reduce_sum(x, acc, dim=0, clear=False)
            T.copy(acc, S[0])

    k = tilers.compile(vector_sum, out_idx=[1])
    a = randn((1000,), "float32")
    assert np.allclose(k(a), f64(a).sum(), rtol=1e-5)
    assert tilers.compile(vector_sum, target="cuda:sm_90a").cubin[:4] == b"\x7fELF"


def test_pipelined_loop_with_default_stages():
    """Found by the program generator: T.Pipelined(n) (num_stages=0, TileLang's default)."""

    @T.prim_func
    def pipelined_copy(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for k in T.Pipelined(2):
                for j in T.Parallel(32):
                    C[k * 32 + j] = A[k * 32 + j]

    k = tilers.compile(pipelined_copy, out_idx=[1])
    a = randn((64,), "float32")
    assert (k(a) == a).all()
    assert tilers.compile(pipelined_copy, target="cuda:sm_80").cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_matmul_with_a_in_registers(dtype):
    M, N, K = (100, 70, 100) if dtype == "float16" else (64, 64, 128)
    extra = {} if dtype == "float16" else {"accum_dtype": "int32", "block_K": 64}
    k = tilers.compile(kernels.matmul_reg_a(M, N, K, dtype=dtype, **extra), out_idx=[2])
    if dtype == "int8":
        a = RNG.integers(-60, 60, (M, K), dtype=np.int8)
        b = RNG.integers(-128, 128, (K, N), dtype=np.int8)
        assert (f64(k(a, b)) == (2 * f64(a)) @ f64(b)).all()
    else:
        a, b = randn((M, K), dtype), randn((K, N), dtype)
        want = (2 * f64(a)) @ f64(b)
        assert np.abs(f64(k(a, b)) - want).max() <= 1e-2 * np.abs(want).max()


def test_row_broadcast_of_a_reduced_fragment():
    """Found by the program generator: Y[i, j] = s[i] in a loop with no 2-D fragment used to be
    a layout conflict."""
    k = tilers.compile(kernels.row_broadcast(100, 256), out_idx=[1])
    a = randn((100, 256), "float32")
    want = np.repeat(2 * f64(a).sum(1, keepdims=True), 64, axis=1)
    assert np.allclose(k(a), want, rtol=1e-5, atol=1e-4)
    assert (
        tilers.compile(kernels.row_broadcast(100, 256), target="cuda:sm_90a").cubin[:4] == ELF_MAGIC
    )


@pytest.mark.parametrize("case", ["matmul_rasterized_row", "matmul_rasterized_col"])
def test_rasterized_matmul_with_an_annotated_layout(case):
    """T.use_swizzle and T.annotate_layout change where blocks run and how a tile is stored,
    never the result; both show in the generated code and the IR."""
    factory, kw = kernels.COMPILE_CASES[case]
    k = tilers.compile(factory(**kw), out_idx=[2])
    M, N, K, dtype = kw["M"], kw["N"], kw["K"], kw.get("dtype", "float16")
    a, b = randn((M, K), dtype), randn((K, N), dtype)
    want = f64(a) @ f64(b)
    assert np.abs(f64(k(a, b)) - want).max() <= 1e-5 * np.abs(want).max()
    gpu = tilers.compile(factory(**kw), target="cuda:sm_90a")
    assert "T.use_swizzle" in gpu.source and "raster_block" in gpu.source
    assert "C_s: float32[64, 64]" in gpu.report() and "C_s: float32[64, 64] swizzle<3,4,4>" in gpu.ir("input")


@pytest.mark.parametrize("case", ["matmul_reg_b_f16", "matmul_reg_ab_bf16", "matmul_reg_b_int8"])
def test_matmul_with_b_in_registers(case):
    factory, kw = kernels.COMPILE_CASES[case]
    k = tilers.compile(factory(**kw), out_idx=[2])
    M, N, K, dtype = kw["M"], kw["N"], kw["K"], kw.get("dtype", "float16")
    if dtype == "int8":
        a = RNG.integers(-128, 128, (M, K), dtype=np.int8)
        b = RNG.integers(-60, 60, (K, N), dtype=np.int8)
        assert (f64(k(a, b)) == f64(a) @ (2 * f64(b))).all()
    else:
        a, b = randn((M, K), dtype), randn((K, N), dtype)
        want = f64(a) @ (2 * f64(b))
        assert np.abs(f64(k(a, b)) - want).max() <= 1e-2 * np.abs(want).max()


def test_on_chip_buffers_start_undefined_except_gemm_accumulators():
    """A fragment or shared tile read before it is written holds garbage on the GPU: the
    interpreter starts float on-chip buffers as NaN in every block, so a missing T.clear
    shows; a T.gemm accumulator starts at zero, as the compiled kernel zeroes it."""

    @T.prim_func
    def forgot_clear(A: T.Tensor((2, 64), "float32"), B: T.Tensor((2, 64), "float32")):
        with T.Kernel(2, threads=64) as bx:
            acc = T.alloc_fragment((64,), "float32")
            s = T.alloc_shared((64,), "float32")
            for i in T.Parallel(64):
                acc[i] += A[bx, i]
            for i in T.Parallel(64):
                s[i] = s[i] + acc[i]
            T.copy(s, B[bx, 0])

    a = np.ones((2, 64), np.float32)
    b = np.zeros((2, 64), np.float32)
    tilers.compile(forgot_clear, target="interp")(a, b)
    assert np.isnan(b).all()
