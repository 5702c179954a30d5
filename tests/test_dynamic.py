"""Symbolic sizes (T.dynamic) without a GPU: one compiled kernel for every value of a size,
on the interpreter against numpy; what a size may and may not be; bad calls; the checker.

The same kernels on the H200: test_dynamic_gpu.py.
"""

import json
import os
import sys

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import _tilers, testing
from tilers.errors import TileError

sys.path.insert(0, os.path.dirname(__file__))
import kernels

RNG = np.random.default_rng(12)
SIZES = [0, 1, 7, 128, 1000, 4097]


def f64(x):
    return np.asarray(x, dtype=np.float64)


# --- one kernel for every size -------------------------------------------------------------


def test_elementwise_for_every_m(compile_count):
    kernel = tilers.compile(kernels.add(T.dynamic("M"), 1000), out_idx=[2])
    source = kernel.source
    for m in SIZES:
        a = RNG.standard_normal((m, 1000)).astype(np.float16)
        b = RNG.standard_normal((m, 1000)).astype(np.float16)
        c = kernel(a, b)
        assert c.shape == (m, 1000) and c.dtype == np.float16
        assert np.array_equal(c, (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16))
    assert len(compile_count) == 1 and kernel.source == source
    assert kernel.sizes == ["M"]
    assert "const int M" in source  # the size is a kernel parameter


def test_softmax_for_every_m(compile_count):
    kernel = tilers.compile(kernels.softmax(T.dynamic("M"), 1000, tile_N=1024), out_idx=[1])
    for m in SIZES:
        x = RNG.standard_normal((m, 1000)).astype(np.float32)
        y = kernel(x)
        e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True)) if m else f64(x)
        want = e / e.sum(axis=1, keepdims=True) if m else e
        assert y.shape == (m, 1000)
        assert np.abs(f64(y) - want).max(initial=0) < 1e-6
    assert len(compile_count) == 1


def test_gemm_for_every_m(compile_count):
    kernel = tilers.compile(
        kernels.matmul(T.dynamic("M"), 64, 96, block_M=64, block_N=64, block_K=32), out_idx=[2]
    )
    for m in SIZES:
        a = RNG.standard_normal((m, 96)).astype(np.float16)
        b = RNG.standard_normal((96, 64)).astype(np.float16)
        c = kernel(a, b)
        want = f64(a) @ f64(b)
        assert c.shape == (m, 64)
        assert np.abs(f64(c) - want).max(initial=0) <= 2e-3 * max(1.0, np.abs(want).max(initial=0))
    assert len(compile_count) == 1


def test_gemm_with_every_dimension_symbolic():
    M, N, K = T.dynamic("M, N, K")
    kernel = tilers.compile(kernels.matmul(M, N, K, block_M=64, block_N=64), out_idx=[2])
    assert kernel.sizes == ["M", "K", "N"]  # in the order the parameters carry them
    for m, n, k in [(1, 1, 1), (65, 7, 33), (0, 64, 64), (64, 0, 5), (3, 70, 0)]:
        a = RNG.standard_normal((m, k)).astype(np.float16)
        b = RNG.standard_normal((k, n)).astype(np.float16)
        c = kernel(a, b)
        assert c.shape == (m, n)
        assert np.abs(f64(c) - f64(a) @ f64(b)).max(initial=0) < 5e-2
    # the rows of A are K elements long: no 16-byte copies without a promise
    report = "\n".join(tilers.compile(kernels.matmul(M, N, K), target="cuda:sm_90a").info["report"])
    assert "T.dynamic size 'K'" in report and "multiple_of=8" in report


def test_size_of_zero_returns_empty_outputs():
    kernel = tilers.compile(kernels.add(T.dynamic("M"), 64, dtype="float32"), out_idx=[2])
    c = kernel(np.zeros((0, 64), np.float32), np.zeros((0, 64), np.float32))
    assert c.shape == (0, 64)


def test_a_promised_multiple_removes_the_guards():
    # the cp.async pipeline's guards (a TMA pipeline has none: its boxes stop at the edge)
    plain = tilers.compile(kernels.matmul(T.dynamic("M"), 256, 256, block_M=64, block_N=64),
                           target="cuda:sm_90a", tma=False)
    aligned = tilers.compile(
        kernels.matmul(T.dynamic("M", multiple_of=64), 256, 256, block_M=64, block_N=64),
        target="cuda:sm_90a",
        tma=False,
    )
    static = tilers.compile(kernels.matmul(1024, 256, 256, block_M=64, block_N=64),
                            target="cuda:sm_90a", tma=False)
    assert "< ((long long)M)" in plain.source  # the rows past M are guarded
    assert "M)" not in aligned.source.split("{", 1)[1].replace("const int M)", "")
    # the same instructions as the static kernel: cp.async without zero-fill, 16-byte stores
    assert aligned.source.count("cp.async.cg.shared.global [%0], [%1], 16;") == static.source.count(
        "cp.async.cg.shared.global [%0], [%1], 16;"
    )
    assert aligned.info["sizes"] == [
        {"name": "M", "dtype": "int32", "multiple_of": 64, "from": [[0, 0], [2, 0]]}
    ]


def test_kernel_info_describes_the_sizes():
    M = T.dynamic("M")
    kernel = tilers.compile(kernels.transpose(M, 96), target="cuda:sm_90a")
    info = kernel.info
    assert info["sizes"] == [{"name": "M", "dtype": "int32", "multiple_of": 1,
                              "from": [[0, 0], [1, 1]]}]
    a, b = info["params"]
    assert a["shape"] == [{"size": 0}, 96] and a["strides"] == [96, 1]
    assert b["shape"] == [96, {"size": 0}] and b["strides"] == [{"size": 0}, 1]
    assert info["grid"][1] == {"op": "floordiv", "a": {"op": "add", "a": {"size": 0},
                                                      "b": {"const": 31}}, "b": {"const": 32}}
    assert "B: float32[96, M]" in repr(kernel)


def test_int64_size_and_64_bit_indices():
    M = T.dynamic("M", "int64")
    kernel = tilers.compile(kernels.add(M, 8, dtype="float32"), out_idx=[2])
    assert "const long long M" in kernel.source
    assert kernel.info["sizes"][0]["dtype"] == "int64"
    c = kernel(np.ones((5, 8), np.float32), np.ones((5, 8), np.float32))
    assert (c == 2).all()
    # an int32 size can still make a tensor of more than 2^31 elements: 64-bit indices
    wide = tilers.compile(kernels.add(T.dynamic("M"), 4096), target="cuda:sm_90a")
    assert "(long long)" in wide.source


def test_the_same_name_is_the_same_size():
    a, b = T.dynamic("M"), T.dynamic("M")

    @T.prim_func
    def copy(X: T.Tensor((a, 64), "float32"), Y: T.Tensor((b, 64), "float32")):
        with T.Kernel(T.ceildiv(a, 32), threads=128) as bx:
            for i, j in T.Parallel(32, 64):
                Y[bx * 32 + i, j] = X[bx * 32 + i, j]

    kernel = tilers.compile(copy, out_idx=[1])
    assert kernel.sizes == ["M"]
    x = RNG.standard_normal((70, 64)).astype(np.float32)
    assert np.array_equal(kernel(x), x)


# --- what a size can be ---------------------------------------------------------------------


def test_dynamic_returns_sizes():
    m = T.dynamic("m")
    assert repr(m) == "T.dynamic('m')" and m.dtype == "int32"
    m, n = T.dynamic("m, n")
    assert (m.name, n.name) == ("m", "n")
    assert len(T.dynamic("a b c")) == 3
    assert repr(T.dynamic("k", "int64", multiple_of=16)) == "T.dynamic('k', 'int64', multiple_of=16)"
    assert T.symbolic("m").name == "m"  # TileLang's older name


@pytest.mark.parametrize("call, message", [
    (lambda: T.dynamic(""), "T.dynamic needs a name"),
    (lambda: T.dynamic("M", "float32"), "a size is int32 or int64, got float32"),
    (lambda: T.dynamic("M", multiple_of=0), "multiple_of must be a positive int, got 0"),
    (lambda: T.dynamic("M", multiple_of=2.0), "multiple_of must be a positive int"),
    (lambda: T.dynamic("1x"), "'1x' is not a valid name"),
])
def test_bad_declarations_name_the_line(call, message):
    with pytest.raises(TileError) as raised:
        call()
    assert message in str(raised.value)
    assert "test_dynamic.py:" in str(raised.value)


def test_tile_shapes_must_be_fixed():
    M = T.dynamic("M")

    @T.prim_func
    def bad(A: T.Tensor((M, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            tile = T.alloc_shared((M, 64), "float16")  # the line the error names
            T.copy(A[0, 0], tile)

    with pytest.raises(TileError) as raised:
        tilers.compile(bad, target="interp")
    text = str(raised.value)
    assert "a shared tile's shape must be fixed" in text and "'M'" in text
    assert "test_dynamic.py:" in text and "T.alloc_shared((M, 64)" in text


def test_parallel_extents_must_be_fixed():
    M = T.dynamic("M")

    @T.prim_func
    def bad(A: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(M):
                A[i] = 0.0

    with pytest.raises(TileError, match="T.Parallel extents are tile sizes.*'M' is a T.dynamic"):
        tilers.compile(bad, target="interp")


def test_a_region_cannot_take_a_whole_symbolic_dimension():
    M = T.dynamic("M")

    @T.prim_func
    def bad(A: T.Tensor((M, 64), "float32"), B: T.Tensor((M, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            frag = T.alloc_fragment((32, 64), "float32")
            T.copy(A[0:32, :], frag)
            T.copy(frag, B[:, 0:64])

    with pytest.raises(TileError) as raised:
        tilers.compile(bad, target="interp")
    text = str(raised.value)
    assert "symbolic size 'M'" in text and "test_dynamic.py:" in text


def test_a_dimension_must_be_a_size_not_an_expression():
    with pytest.raises(TileError, match="the T.dynamic size 'M' is computed with outside a kernel"):

        @T.prim_func
        def bad(A: T.Tensor((T.dynamic("M") * 2, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A[0, 0] = 1.0


def test_serial_loops_over_a_size():
    N = T.dynamic("N")

    @T.prim_func
    def row_sums(A: T.Tensor((4, N), "float32"), S: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_local((1,), "float32")
            for r in T.serial(4):
                acc[0] = 0.0
                for j in T.serial(N):
                    acc[0] += A[r, j]
                S[r] = acc[0]

    kernel = tilers.compile(row_sums, out_idx=[1])
    for n in (0, 1, 37):
        a = RNG.standard_normal((4, n)).astype(np.float32)
        assert np.abs(f64(kernel(a)) - f64(a).sum(axis=1)).max() < 1e-5


def test_a_size_only_outputs_carry_is_an_error():
    M = T.dynamic("M")

    @T.prim_func
    def fill(X: T.Tensor((M, 8), "float32")):
        with T.Kernel(T.ceildiv(M, 8), threads=128) as bx:
            for i, j in T.Parallel(8, 8):
                X[bx * 8 + i, j] = 1.0

    with pytest.raises(TileError, match="size 'M' is a dimension of outputs only"):
        tilers.compile(fill, out_idx=[0])
    kernel = tilers.compile(fill)  # passed in place, the call binds M from it
    x = np.zeros((20, 8), np.float32)
    kernel(x)
    assert (x == 1).all()


# --- bad calls --------------------------------------------------------------------------


def test_disagreeing_sizes_name_both_tensors_and_touch_nothing():
    kernel = tilers.compile(kernels.add(T.dynamic("M"), 64, dtype="float32"))
    a, b = np.ones((8, 64), np.float32), np.ones((9, 64), np.float32)
    c = np.full((8, 64), 7.0, np.float32)
    with pytest.raises(ValueError) as raised:
        kernel(a, b, c)
    assert str(raised.value) == (
        "parameter 'B': dimension 0 is 9, but parameter 'A' dimension 0 is 8: both are the size "
        "'M' (T.dynamic), which must be the same in one call"
    )
    assert (c == 7).all()


def test_a_broken_promise_is_an_error_and_touches_nothing():
    kernel = tilers.compile(kernels.add(T.dynamic("M", multiple_of=16), 64, dtype="float32"))
    a, b = np.ones((24, 64), np.float32), np.ones((24, 64), np.float32)
    c = np.full((24, 64), 7.0, np.float32)
    with pytest.raises(ValueError) as raised:
        kernel(a, b, c)
    assert str(raised.value) == (
        "parameter 'A': dimension 0 is the size 'M' = 24, which is not a multiple of 16 as "
        'T.dynamic("M", multiple_of=16) promises'
    )
    assert (c == 7).all()
    kernel(np.ones((32, 64), np.float32), np.ones((32, 64), np.float32), np.zeros((32, 64), np.float32))


def test_fixed_dimensions_and_ranks_are_still_checked():
    kernel = tilers.compile(kernels.add(T.dynamic("M"), 64, dtype="float32"), out_idx=[2])
    with pytest.raises(ValueError, match=r"expected a numpy array of shape \(M, 64\), got \(8, 63\)"):
        kernel(np.ones((8, 63), np.float32), np.ones((8, 63), np.float32))
    with pytest.raises(ValueError, match=r"shape \(M, 64\), got \(64,\) \(1 dimensions, not 2\)"):
        kernel(np.ones(64, np.float32), np.ones(64, np.float32))


# --- the pass-by-pass checker ---------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(c for c in kernels.COMPILE_CASES if "dynamic" in c))
def test_every_pass_agrees_at_the_edge_sizes(case):
    factory, kwargs = kernels.COMPILE_CASES[case]
    result = testing.check_passes(factory(**kwargs))
    result.assert_ok()


def test_the_checker_draws_the_edges():
    program = tilers.compile(kernels.add(T.dynamic("M"), 64), target="interp").program_json
    text = _tilers.check_passes(program, json.dumps({"arch": "sm_80"}))
    assert json.loads(text)["ok"]
