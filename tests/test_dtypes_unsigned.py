"""uint16 and uint64 end to end: small kernels on the interpreter against numpy (wrapping
arithmetic, unsigned order past 2^63, casts, scalar parameters), compiled with NVRTC for
sm_80 and sm_90a, and on the GPU against numpy and the interpreter."""

import numpy as np
import pytest
import tilers
import tilers.language as T

UNSIGNED = ["uint16", "uint64"]
ARCHS = ["sm_80", "sm_90a"]
ELF_MAGIC = b"\x7fELF"
RNG = np.random.default_rng(2026)


# ----------------------------------------------------------------------------------------
# kernels


def add(M, N, dtype, block_M=8, block_N=32):
    @T.prim_func
    def add(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                r, c = by * block_M + i, bx * block_N + j
                C[r, c] = A[r, c] + B[r, c]

    return add


def add_tiles(M, N, dtype, block_M=8, block_N=64):
    """The add through fragments: T.copy pads the ragged edges and drops them again."""

    @T.prim_func
    def add_tiles(
        A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            a = T.alloc_fragment((block_M, block_N), dtype)
            b = T.alloc_fragment((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], a)
            T.copy(B[by * block_M, bx * block_N], b)
            for i, j in T.Parallel(block_M, block_N):
                a[i, j] = a[i, j] + b[i, j]
            T.copy(a, C[by * block_M, bx * block_N])

    return add_tiles


def row_reduce(M, N, dtype, kind="max", block_M=4):
    """Y[i] = max (or min) of row i: register folds, warp shuffles, the type's bounds as the
    identity."""
    reduce = T.reduce_max if kind == "max" else T.reduce_min

    @T.prim_func
    def row_reduce(X: T.Tensor((M, N), dtype), Y: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, N), dtype)
            y = T.alloc_fragment((block_M,), dtype)
            T.copy(X[bx * block_M, 0], x)
            reduce(x, y, dim=1)
            T.copy(y, Y[bx * block_M])

    return row_reduce


def to_float32(n, dtype, block=128):
    @T.prim_func
    def to_float32(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = T.cast(X[bx * block + i], "float32")

    return to_float32


def from_float32(n, dtype, block=128):
    @T.prim_func
    def from_float32(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = T.cast(X[bx * block + i], dtype)

    return from_float32


def add_scalar(n, dtype, block=128):
    scalar = getattr(T, dtype)

    @T.prim_func
    def add_scalar(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype), s: scalar):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i] + s

    return add_scalar


OPS = 10


def unsigned_ops(n, dtype, block=128):
    """The operators whose meaning depends on the sign: order, division, right shifts; and
    the wrapping ones."""

    @T.prim_func
    def unsigned_ops(
        A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), Y: T.Tensor((OPS, n), dtype)
    ):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                k = bx * block + i
                a, b = A[k], B[k]
                Y[0, k] = a // b
                Y[1, k] = a % b
                Y[2, k] = a >> 3
                Y[3, k] = T.max(a, b)
                Y[4, k] = T.min(a, b)
                Y[5, k] = T.if_then_else(a < b, a, b)
                Y[6, k] = a * b
                Y[7, k] = a - b
                Y[8, k] = ~a
                Y[9, k] = T.if_then_else(a >= b, 1, 0)

    return unsigned_ops


def numpy_ops(a, b):
    return np.stack(
        [
            a // b,
            a % b,
            a >> 3,
            np.maximum(a, b),
            np.minimum(a, b),
            np.where(a < b, a, b),
            a * b,
            a - b,
            ~a,
            (a >= b).astype(a.dtype),
        ]
    )


def mixed(n, a_dtype, b_dtype, block=128):
    """a + b of two dtypes: the frontend casts both to promote(a, b)."""

    @T.prim_func
    def mixed(A: T.Tensor((n,), a_dtype), B: T.Tensor((n,), b_dtype), Y: T.Tensor((n,), "int64")):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = T.cast(A[bx * block + i] + B[bx * block + i], "int64")

    return mixed


def full_range(shape, dtype):
    """Values over the whole type, with both ends (and 0, 1) present."""
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    flat = x.reshape(-1)
    flat[:4] = [info.min, 1, info.max, info.max - 1]
    flat[4] = 0
    return x


# ----------------------------------------------------------------------------------------
# interpreter


@pytest.mark.parametrize("dtype", UNSIGNED)
@pytest.mark.parametrize("factory", [add, add_tiles])
def test_add_wraps_like_numpy(factory, dtype):
    k = tilers.compile(factory(13, 70, dtype), out_idx=[2], target="interp")
    a, b = full_range((13, 70), dtype), full_range((13, 70), dtype)
    got = k(a, b)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, a + b)  # numpy wraps modulo 2^bits too
    top = np.full((13, 70), np.iinfo(dtype).max, dtype=dtype)
    np.testing.assert_array_equal(k(top, np.ones_like(top)), np.zeros_like(top))


@pytest.mark.parametrize("dtype", UNSIGNED)
@pytest.mark.parametrize("kind", ["max", "min"])
def test_row_reduction(kind, dtype):
    k = tilers.compile(row_reduce(10, 64, dtype, kind), out_idx=[1], target="interp")
    x = full_range((10, 64), dtype)
    want = x.max(1) if kind == "max" else x.min(1)
    np.testing.assert_array_equal(k(x), want)
    # the identity: all-max rows under min, all-zero rows under max
    edge = np.full((10, 64), np.iinfo(dtype).max if kind == "min" else 0, dtype=dtype)
    np.testing.assert_array_equal(k(edge), edge[:, 0])


def test_uint64_max_orders_past_2_63():
    k = tilers.compile(row_reduce(4, 64, "uint64"), out_idx=[1], target="interp")
    x = np.full((4, 64), 5, dtype=np.uint64)
    x[:, 7] = 2**63 + 1  # negative as an int64
    np.testing.assert_array_equal(k(x), np.full(4, 2**63 + 1, dtype=np.uint64))


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_cast_to_float32(dtype):
    k = tilers.compile(to_float32(300, dtype), out_idx=[1], target="interp")
    x = full_range((300,), dtype)
    np.testing.assert_array_equal(k(x), x.astype(np.float32))


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_cast_from_float32_truncates_and_saturates(dtype):
    k = tilers.compile(from_float32(300, dtype), out_idx=[1], target="interp")
    top = np.iinfo(dtype).max
    x = (RNG.random(300) * min(float(top), 2.0**60)).astype(np.float32)
    x[:3] = [0.75, 3.99, 65535.0]
    np.testing.assert_array_equal(k(x)[3:], x[3:].astype(dtype))
    assert list(k(x)[:3]) == [0, 3, 65535]
    # out of range: saturated, NaN -> 0 (PTX cvt.rzi), not numpy's undefined conversions
    edges = np.zeros(300, dtype=np.float32)
    edges[:5] = [-1.0, -1e30, 1e30, np.nan, np.inf]
    assert list(k(edges)[:5]) == [0, 0, top, 0, top]


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_scalar_parameter(dtype):
    k = tilers.compile(add_scalar(200, dtype), out_idx=[1], target="interp")
    x = full_range((200,), dtype)
    top = int(np.iinfo(dtype).max)
    for s in [0, 7, top // 2 + 3, top]:  # uint64: past 2^63 too
        np.testing.assert_array_equal(k(x, s), x + np.array(s, dtype=dtype))
    for bad in (top + 1, -1):
        with pytest.raises(OverflowError, match=f"{bad} does not fit in {dtype}"):
            k(x, bad)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_sign_dependent_operators(dtype):
    k = tilers.compile(unsigned_ops(256, dtype), out_idx=[2], target="interp")
    a = full_range((256,), dtype)
    b = full_range((256,), dtype)
    b[b == 0] = 3
    np.testing.assert_array_equal(k(a, b), numpy_ops(a, b))


@pytest.mark.parametrize(
    "a_dtype,b_dtype,promoted",
    [
        ("uint16", "int16", "int16"),  # one width: signed wins
        ("uint16", "int32", "int32"),  # wider wins
        ("uint16", "uint64", "uint64"),
        ("uint64", "int64", "int64"),
        ("uint32", "uint64", "uint64"),
        ("int32", "uint64", "uint64"),
    ],
)
def test_promotion_matches_the_frontend(a_dtype, b_dtype, promoted):
    from tilers._trace import promote

    assert promote(a_dtype, b_dtype) == promoted
    k = tilers.compile(mixed(150, a_dtype, b_dtype), out_idx=[2], target="interp")
    a, b = full_range((150,), a_dtype), full_range((150,), b_dtype)
    with np.errstate(over="ignore"):
        want = (a.astype(promoted) + b.astype(promoted)).astype(np.int64)
    np.testing.assert_array_equal(k(a, b), want)


# ----------------------------------------------------------------------------------------
# NVRTC (no GPU needed)


def compile_cases(dtype):
    return {
        "add": (add(13, 70, dtype), [2]),
        "add_tiles": (add_tiles(13, 70, dtype), [2]),
        "row_max": (row_reduce(10, 64, dtype, "max"), [1]),
        "row_min": (row_reduce(10, 64, dtype, "min"), [1]),
        "to_float32": (to_float32(300, dtype), [1]),
        "from_float32": (from_float32(300, dtype), [1]),
        "add_scalar": (add_scalar(200, dtype), [1]),
        "unsigned_ops": (unsigned_ops(256, dtype), [2]),
    }


CASE_NAMES = sorted(compile_cases("uint16"))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", UNSIGNED)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_compiles_with_nvrtc(case, dtype, arch):
    func, out_idx = compile_cases(dtype)[case]
    k = tilers.compile(func, out_idx=out_idx, target=f"cuda:{arch}")
    assert k.cubin[:4] == ELF_MAGIC
    ctype = {"uint16": "unsigned short", "uint64": "unsigned long long"}[dtype]
    assert f"{ctype}* __restrict__" in k.source


def test_uint64_source_spelling():
    k = tilers.compile(unsigned_ops(256, "uint64"), out_idx=[2], target="cuda:sm_90a")
    assert "18446744073709551615ull" in k.source  # ~a: a literal of the type, not -1
    assert "tl_max(unsigned long long a" in k.source  # the uint64 prelude, only where used
    plain = tilers.compile(add(13, 70, "uint64"), out_idx=[2], target="cuda:sm_90a")
    assert "unsigned long long tl_max" not in plain.source
    cast = tilers.compile(from_float32(300, "uint64"), out_idx=[1], target="cuda:sm_90a")
    assert "tl_f2ull(" in cast.source


def test_uint16_multiplies_as_unsigned_int():
    # unsigned short promotes to int in C, where 65535 * 65535 would overflow
    k = tilers.compile(unsigned_ops(256, "uint16"), out_idx=[2], target="cuda:sm_80")
    assert "((unsigned int)" in k.source and "(unsigned short)" in k.source


# ----------------------------------------------------------------------------------------
# GPU: the generated code against numpy and the interpreter


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_gpu_matches_numpy_and_the_interpreter(dtype):
    torch = pytest.importorskip("torch")

    def on_gpu(func, out_idx, *args):
        kernel = tilers.compile(func, out_idx=out_idx)
        device = [torch.from_numpy(a).cuda() if isinstance(a, np.ndarray) else a for a in args]
        got = kernel(*device).cpu().numpy()
        host = tilers.compile(func, out_idx=out_idx, target="interp")(*args)
        assert got.dtype == host.dtype
        np.testing.assert_array_equal(got, host)  # the generated code agrees with the model
        return got

    a, b = full_range((13, 70), dtype), full_range((13, 70), dtype)
    for factory in (add, add_tiles):
        np.testing.assert_array_equal(on_gpu(factory(13, 70, dtype), [2], a, b), a + b)
    x = full_range((10, 64), dtype)
    x[3, 5] = np.iinfo(dtype).max // 2 + 1  # the top bit: negative if read as signed
    np.testing.assert_array_equal(on_gpu(row_reduce(10, 64, dtype, "max"), [1], x), x.max(1))
    np.testing.assert_array_equal(on_gpu(row_reduce(10, 64, dtype, "min"), [1], x), x.min(1))
    v = full_range((300,), dtype)
    np.testing.assert_array_equal(on_gpu(to_float32(300, dtype), [1], v), v.astype(np.float32))
    f = (RNG.random(300) * 60000).astype(np.float32)
    f[:6] = [-1.0, 1e30, np.nan, np.inf, 3.99, -0.5]
    got = on_gpu(from_float32(300, dtype), [1], f)
    np.testing.assert_array_equal(got[6:], f[6:].astype(dtype))
    top = int(np.iinfo(dtype).max)
    assert list(got[:6]) == [0, top, 0, top, 3, 0]
    s = full_range((200,), dtype)
    for scalar in [5, top]:
        want = s + np.array(scalar, dtype=dtype)
        np.testing.assert_array_equal(on_gpu(add_scalar(200, dtype), [1], s, scalar), want)
    p, q = full_range((256,), dtype), full_range((256,), dtype)
    q[q == 0] = 3
    np.testing.assert_array_equal(on_gpu(unsigned_ops(256, dtype), [2], p, q), numpy_ops(p, q))
