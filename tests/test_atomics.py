"""Atomics as TileLang spells them: `T.atomic_add` on whole tiles (vector atomics where the
GPU has them), `T.atomic_max` / `T.atomic_min` (float rules: NaN, -0.0), `memory_order=`
and `return_prev=True`. Interpreter against numpy, the lowered code through every pass, NVRTC
cubins for sm_80 and sm_90a (ptxas checks the PTX); misuse is an error at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers.errors import TileError

ORDERS = ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst")


def rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def splitk(M, N, K, splits, dtype, out_dtype="float32", bM=32, bN=32, bK=16, memory_order=None):
    @T.prim_func
    def k(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), splits, threads=128) as (bx, by, bz):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            acc = T.alloc_fragment((bM, bN), "float32")
            T.clear(acc)
            for ko in T.serial(T.ceildiv(K // splits, bK)):
                T.copy(A[by * bM, bz * (K // splits) + ko * bK], A_s)
                T.copy(B[bz * (K // splits) + ko * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, acc)
            T.atomic_add(C[by * bM, bx * bN], acc, memory_order=memory_order)

    return k


@pytest.mark.parametrize("dtype,out_dtype", [("float16", "float32"), ("bfloat16", "float32"), ("float16", "float16")])
def test_split_k_tile_atomic_add_on_ragged_shapes(dtype, out_dtype):
    M, N, K = 70, 50, 64
    k = splitk(M, N, K, 2, dtype, out_dtype)
    if dtype == "float16":  # numpy has no bfloat16: that one runs through check_passes only
        a, b = rand(M, K, dtype=dtype, seed=1), rand(K, N, dtype=dtype, seed=2)
        c = np.zeros((M, N), out_dtype)
        tilers.compile(k, target="interp")(a, b, c)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        tol = 1e-4 if out_dtype == "float32" else 2e-2
        np.testing.assert_allclose(c.astype(np.float64), ref, rtol=tol, atol=tol * 4)
    for arch in ("sm_80", "sm_90a"):
        assert tilers.testing.check_passes(k, arch=arch).ok
        assert tilers.compile(k, target=f"cuda:{arch}").cubin[:4] == b"\x7fELF"


def tile_add(M, N, dtype, bM=16, bN=64, source="shared"):
    @T.prim_func
    def k(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            t = T.alloc_shared((bM, bN), dtype) if source == "shared" else T.alloc_fragment((bM, bN), dtype)
            T.copy(X[by * bM, bx * bN], t)
            T.atomic_add(Y[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN], t)
            T.atomic_add(Y[by * bM, bx * bN], t)

    return k


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_tile_atomic_add_is_vectorized_where_the_hardware_has_vector_atomics(dtype):
    k = tile_add(64, 256, dtype)
    sm90 = tilers.compile(k, target="cuda:sm_90a")
    sm80 = tilers.compile(k, target="cuda:sm_80")
    width = {"float32": 4, "float16": 8, "bfloat16": 8}[dtype]
    ptx = {"float32": f"add.v{width}.f32", "float16": f"add.noftz.v{width}.f16", "bfloat16": f"add.noftz.v{width}.bf16"}
    assert f"red.relaxed.gpu.global.{ptx[dtype]}" in sm90.source
    assert f"atomic_add Y x{width}" in sm90.report()
    if dtype == "float16":
        assert "add.noftz.f16x2" in sm80.source  # pairs before sm_90
    else:
        assert "red.relaxed.gpu.global" not in sm80.source  # scalar atomics
    for kern in (sm80, sm90):
        assert kern.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("source", ["shared", "fragment"])
def test_tile_atomic_add_from_shared_and_fragment_on_a_ragged_edge(source):
    M, N = 37, 100
    k = tile_add(M, N, "float32", source=source)
    x = rand(M, N)
    y = rand(M, N, seed=3)
    expect = y + 2 * x
    tilers.compile(k, target="interp")(x, y)
    np.testing.assert_allclose(y, expect, rtol=1e-6, atol=1e-6)
    for arch in ("sm_80", "sm_90a"):
        assert tilers.testing.check_passes(k, arch=arch).ok


def test_tile_atomic_into_a_slice_of_a_higher_rank_tensor_and_into_shared_memory():
    B, S, D, bS = 2, 40, 32, 16

    @T.prim_func
    def k(dq: T.Tensor((B, S, D), "float32"), dQ: T.Tensor((B, S, D), "float32"), rows: T.Tensor((bS, D), "float32")):
        with T.Kernel(T.ceildiv(S, bS), B, threads=64) as (bx, bz):
            frag = T.alloc_fragment((bS, D), "float32")
            acc = T.alloc_shared((bS, D), "float32")
            T.clear(acc)
            T.copy(dq[bz, bx * bS:(bx + 1) * bS, :], frag)
            T.atomic_add(dQ[bz, bx * bS:(bx + 1) * bS, :], frag)
            T.atomic_add(acc, frag)  # shared destination: scalar atomics
            T.atomic_max(rows, acc)

    dq = rand(B, S, D)
    dQ = np.ones((B, S, D), "float32")
    rows = np.full((bS, D), -np.inf, "float32")
    tilers.compile(k, target="interp")(dq, dQ, rows)
    np.testing.assert_allclose(dQ, 1 + dq, rtol=1e-6)
    padded = np.zeros((B, 3 * bS, D), "float32")
    padded[:, :S] = dq
    np.testing.assert_allclose(rows, padded.reshape(B * 3, bS, D).max(axis=0), rtol=1e-6)
    for arch in ("sm_80", "sm_90a"):
        assert tilers.testing.check_passes(k, arch=arch).ok
        assert tilers.compile(k, target=f"cuda:{arch}").cubin[:4] == b"\x7fELF"


def float_rule(op, old, v):
    """tilers' max/min on floats, element by element in order (the documented rule)."""
    out = old.copy()
    for i in range(len(v)):
        a, b = out[i], v[i]
        if np.isnan(b):
            continue
        x, y = (b, a) if op == "max" else (a, b)
        greater = x > y or (x == y and not np.signbit(x) and np.signbit(y))
        if np.isnan(a) or greater:
            out[i] = b
    return out


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_float_max_min_negative_numbers_signed_zeros_and_nan(op, dtype):
    n = 8
    f = T.atomic_max if op == "max" else T.atomic_min
    host = pytest.importorskip("ml_dtypes").bfloat16 if dtype == "bfloat16" else dtype

    @T.prim_func
    def k(X: T.Tensor((n,), dtype), V: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(n):
                f(X[i], V[i])

    nan, inf = np.nan, np.inf
    x = np.array([-3.0, 0.0, -0.0, nan, 1.0, -inf, 2.0, nan], host)
    v = np.array([-5.0, -0.0, 0.0, -1.0, nan, -2.0, 2.5, nan], host)
    expect = float_rule(op, x.astype(np.float64), v.astype(np.float64))
    tilers.compile(k, target="interp")(x, v)
    x = x.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(x), np.isnan(expect))
    np.testing.assert_array_equal(np.signbit(x[~np.isnan(x)]), np.signbit(expect[~np.isnan(expect)]))
    np.testing.assert_array_equal(x[~np.isnan(x)], expect[~np.isnan(expect)])
    for arch in ("sm_80", "sm_90a"):
        kern = tilers.compile(k, target=f"cuda:{arch}")
        assert "atom.relaxed.gpu.cas" in kern.source
        assert kern.cubin[:4] == b"\x7fELF"
        assert tilers.testing.check_passes(k, arch=arch).ok


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64", "uint64"])
def test_integer_max_min_are_hardware_atomics(dtype):
    n = 64

    @T.prim_func
    def k(V: T.Tensor((n,), dtype), hi: T.Tensor((1,), dtype), lo: T.Tensor((1,), dtype)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(n):
                T.atomic_max(hi[0], V[i])
                T.atomic_min(lo[0], V[i])

    info = np.iinfo(dtype)
    v = np.random.default_rng(0).integers(max(info.min, -(10**6)), min(info.max, 10**6), n).astype(dtype)
    hi, lo = np.array([info.min], dtype), np.array([info.max], dtype)
    tilers.compile(k, target="interp")(v, hi, lo)
    assert hi[0] == v.max() and lo[0] == v.min()
    src = tilers.compile(k, target="cuda:sm_90a").source
    ty = {"int32": "s32", "uint32": "u32", "int64": "s64", "uint64": "u64"}[dtype]
    assert f"red.relaxed.gpu.max.{ty}" in src and f"red.relaxed.gpu.min.{ty}" in src
    assert tilers.compile(k, target="cuda:sm_80").cubin[:4] == b"\x7fELF"


def test_return_prev_gives_each_iteration_its_own_ticket():
    per_block, blocks = 24, 4

    @T.prim_func
    def k(counter: T.Tensor((1,), "int32"), seen: T.Tensor((blocks * 1024,), "int32"), first: T.Tensor((blocks,), "int32")):
        with T.Kernel(blocks, threads=128) as bx:
            for i in T.Parallel(per_block):
                old = T.atomic_add(counter[0], 1, return_prev=True)
                T.atomic_add(seen[old], i + 1)  # every ticket once, whatever the threads' order
            # outside T.Parallel: once per block, the old value seen by every thread
            base = T.atomic_add(counter[0], 1000, memory_order="acq_rel", return_prev=True)
            first[bx] = base + 0 * bx

    counter = np.zeros(1, "int32")
    seen = np.zeros(blocks * 1024, "int32")
    first = np.zeros(blocks, "int32")
    tilers.compile(k, target="interp")(counter, seen, first)
    assert counter[0] == blocks * (per_block + 1000)
    assert first.tolist() == [b * 1024 + per_block for b in range(blocks)]
    tickets = np.nonzero(seen)[0]
    assert tickets.tolist() == [b * 1024 + i for b in range(blocks) for i in range(per_block)]
    for arch in ("sm_80", "sm_90a"):
        kern = tilers.compile(k, target=f"cuda:{arch}")
        assert "tl_atomic_add_relaxed_fetch" in kern.source and "tl_atomic_add_acq_rel_fetch" in kern.source
        assert kern.cubin[:4] == b"\x7fELF"


def test_return_prev_is_order_independent_through_every_pass():
    @T.prim_func
    def k(counter: T.Tensor((1,), "int32"), seen: T.Tensor((256,), "int32"), first: T.Tensor((2,), "int32")):
        with T.Kernel(2, threads=64) as bx:
            for i in T.Parallel(100):
                old = T.atomic_add(counter[0], 1, return_prev=True)
                T.atomic_add(seen[old], 1)
            first[bx] = T.atomic_max(counter[0], 0, return_prev=True)

    for arch in ("sm_80", "sm_90a"):
        assert tilers.testing.check_passes(k, arch=arch).ok


def test_return_prev_past_the_edge_reads_zero_and_is_usable_in_expressions():
    n = 40

    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                old = T.atomic_max(X[i], 0.5, return_prev=True)
                Y[i] = old * 10.0 + 1.0

    x = rand(n)
    before = x.copy()
    y = np.zeros(64, "float32")
    tilers.compile(k, target="interp")(x, y)
    np.testing.assert_array_equal(x, np.maximum(before, 0.5))
    np.testing.assert_allclose(y[:n], before * 10 + 1, rtol=1e-6)
    np.testing.assert_array_equal(y[n:], 1.0)
    assert tilers.testing.check_passes(k, arch="sm_90a").ok


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "uint64"])
@pytest.mark.parametrize("op", ["add", "max", "min"])
def test_every_memory_order_compiles_for_every_dtype(op, dtype):
    f = {"add": T.atomic_add, "max": T.atomic_max, "min": T.atomic_min}[op]

    @T.prim_func
    def k(X: T.Tensor((64,), dtype), V: T.Tensor((64,), dtype), P: T.Tensor((64,), dtype)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                for order in ORDERS:
                    f(X[i], V[i], memory_order=order)
                    P[i] = f(X[i], V[i], memory_order=order, return_prev=True)

    for arch in ("sm_80", "sm_90a"):
        kern = tilers.compile(k, target=f"cuda:{arch}")
        assert kern.cubin[:4] == b"\x7fELF", arch
    src = tilers.compile(k, target="cuda:sm_90a").source
    assert "fence.sc.gpu" in src and ("acq_rel" in src)


def test_memory_orders_reach_the_tile_form_and_stronger_ones_stay_scalar():
    k = splitk(64, 64, 32, 2, "float16", memory_order="release")
    src = tilers.compile(k, target="cuda:sm_90a").source
    assert "red.release.gpu.global.add.v2.f32" in src
    k = splitk(64, 64, 32, 2, "float16", memory_order="seq_cst")
    kern = tilers.compile(k, target="cuda:sm_90a")
    assert "fence.sc.gpu" in kern.source and ".v2.f32" not in kern.source
    assert kern.cubin[:4] == b"\x7fELF"


def test_the_text_ir_round_trips_atomics():
    k = splitk(64, 64, 32, 2, "float16", memory_order="release")
    ir = tilers.compile(k, target="cuda:sm_90a").ir("after:select_instructions")
    assert "atomic_add.release by threads" in ir
    lowered = tilers.compile(k, target="cuda:sm_90a").ir("after:lower_tile_ops")
    assert "vatomic2.add.release" in lowered


# ----------------------------------------------------------------------------------------
# misuse: errors at the user's line


def error_of(build):
    with pytest.raises(TileError) as e:
        tilers.compile(build(), target="cuda:sm_90a")
    return str(e.value)


def test_errors_name_the_users_line():
    def shape_mismatch():
        @T.prim_func
        def k(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                acc = T.alloc_fragment((32, 32), "float32")
                T.clear(acc)
                T.atomic_add(C[0:16, 0:32], acc)  # line: shape

        return k

    msg = error_of(shape_mismatch)
    assert "T.atomic_add between tiles of different shapes" in msg and "line: shape" in msg

    def bad_dtype():
        @T.prim_func
        def k(C: T.Tensor((64,), "int8")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    T.atomic_max(C[i], 1)  # line: dtype

        return k

    msg = error_of(bad_dtype)
    assert "T.atomic_max does not support int8" in msg and "line: dtype" in msg

    def bad_order():
        @T.prim_func
        def k(C: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    T.atomic_add(C[i], 1.0, memory_order="strong")  # line: order

        return k

    msg = error_of(bad_order)
    assert "is not a memory order" in msg and "line: order" in msg and "seq_cst" in msg

    def fragment_dst():
        @T.prim_func
        def k(C: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                acc = T.alloc_fragment((64,), "float32")
                for i in T.Parallel(64):
                    T.atomic_min(acc[i], C[i])  # line: fragment

        return k

    msg = error_of(fragment_dst)
    assert "needs a global or shared buffer; 'acc' is a fragment buffer" in msg and "line: fragment" in msg

    def tile_prev():
        @T.prim_func
        def k(C: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                s = T.alloc_shared((64,), "float32")
                T.atomic_add(C[0:64], s, return_prev=True)  # line: prev

        return k

    msg = error_of(tile_prev)
    assert "takes one element, not a tile" in msg and "line: prev" in msg

    def scalar_for_tile():
        @T.prim_func
        def k(C: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.atomic_add(C[0:64], 1.0)  # line: scalar

        return k

    msg = error_of(scalar_for_tile)
    assert "needs a tile of values" in msg and "line: scalar" in msg
    for m in (msg,):
        assert "tilers/" not in m and "_trace" not in m


def test_atomic_addx2_and_addx4_add_consecutive_elements():
    """TileLang's wide adds: ``T.atomic_addx4(C[i, j * 4], s[i, j * 4])`` adds four consecutive
    elements (each atomically), also written with slices of the last dimension."""
    M, N = 8, 64

    @T.prim_func
    def wide(A: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_shared((M, N), "float32")
            T.copy(A, s)
            for i, j in T.Parallel(M, N // 4):
                T.atomic_addx4(C[i, j * 4], s[i, j * 4])
            for i, j in T.Parallel(M, N // 2):
                T.atomic_addx2(C[i, j * 2:j * 2 + 2], s[i, j * 2:j * 2 + 2])

    a = np.random.default_rng(0).standard_normal((M, N)).astype("float32")
    for arch in ["sm_80", "sm_90a"]:
        k = tilers.compile(wide, target=f"cuda:{arch}")
        assert k.cubin[:4] == b"\x7fELF"
        c = np.zeros((M, N), "float32")
        k(a, c)
        np.testing.assert_allclose(c, 8 * a, rtol=1e-5, atol=1e-5)  # 4 blocks x (1 + 1)
        assert tilers.testing.check_passes(wide, arch=arch).ok


def test_atomic_addx4_misuse_is_an_error_at_the_line():
    @T.prim_func
    def short(C: T.Tensor((8, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.atomic_addx4(C[0, 0:2], 1.0)  # the line of the error

    with pytest.raises(TileError, match="has 2 elements, not 4") as e:
        tilers.compile(short, target="cuda:sm_90a")
    assert "the line of the error" in str(e.value)

    @T.prim_func
    def prev(C: T.Tensor((8, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.atomic_addx2(C[0, 0], 1.0, return_prev=True)

    with pytest.raises(TileError, match="return_prev=True\\) is not supported yet"):
        tilers.compile(prev, target="cuda:sm_90a")
