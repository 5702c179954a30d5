"""Tests of frontend errors: each names the user's file, line and column, never tilers internals."""

import os

import pytest
import tilers
import tilers.language as T
from tilers._trace import trace
from tilers.errors import TileError, format_diagnostic

THIS_FILE = os.path.abspath(__file__)
PACKAGE_DIR = os.path.dirname(os.path.abspath(tilers.__file__))

block_M = 32
block_N = 32
M = N = 128


def line_with(marker: str) -> int:
    """The 1-based line of this file that holds ``marker`` (in a trailing comment)."""
    with open(THIS_FILE) as source:
        for number, line in enumerate(source, start=1):
            if line.rstrip().endswith("# " + marker):
                return number
    raise AssertionError(marker)


def raises_at(marker: str, func, *args, **kwargs) -> str:
    """Run ``func``; it must raise a TileError pointing at the line marked ``marker``."""
    with pytest.raises(TileError) as info:
        func(*args, **kwargs)
    message = str(info.value)
    line = line_with(marker)
    assert f"{os.path.basename(THIS_FILE)}:{line}:" in message
    assert PACKAGE_DIR not in message
    assert info.value.line == line
    assert "error:" in message.splitlines()[0]
    return message


def positive(x):
    while x > 0:  # bool-error
        return x
    return -x


def test_python_while_on_traced_value_in_a_helper():
    # `if`, `while`, `and`, `or`, `not` on traced values are device control flow in the kernel
    # body (tests/test_control_flow.py); a helper it calls runs as plain Python: an error at
    # its condition
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            A[0] = positive(A[0])

    message = raises_at("bool-error", trace, f)
    assert "cannot be used as a Python bool" in message
    assert "T.if_then_else" in message and "T.If" in message
    # The caret sits under the condition.
    lines = message.splitlines()
    assert lines[1].strip() == "while x > 0:  # bool-error"
    assert lines[2].index("^") == lines[1].index("x > 0")
    assert lines[-1].startswith("help:")


def test_python_if_and_on_traced_values_trace():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(M):
                if A[i] > 0:
                    A[i] = 1
                A[i] = T.if_then_else(i > 2 and i < 5, 1.0, A[i])

    program = trace(f)
    assert '"op": "if"' in str(program).replace("'", '"')


def test_range_over_traced_value():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32"), n: T.int32):
        with T.Kernel(1):
            for k in range(n):  # range-error
                A[k] = 0

    assert "T.serial" in raises_at("range-error", trace, f)


def test_int_float_len_iter_of_traced_value():
    def kernel_with(action):
        @T.prim_func
        def f(A: T.Tensor((M,), "float32")):
            with T.Kernel(1) as bx:
                action(bx)

        return f

    for action, text in [(int, "int()"), (float, "float()"), (len, "len()"), (list, "iterated")]:
        with pytest.raises(TileError, match=text.replace("(", r"\(").replace(")", r"\)")):
            trace(kernel_with(action))


def test_unknown_compile_parameter():
    @T.prim_func
    def add(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                B[by * block_M + i, bx * block_N + j] = A[by * block_M + i, bx * block_N + j]

    with pytest.raises(TileError) as info:
        tilers.compile(add, blok_M=64)
    assert str(info.value) == (
        "compile() got parameter 'blok_M' which add does not use; it reads: block_M, block_N, M, N"
    )


def test_integer_true_division():
    @T.prim_func
    def f(A: T.Tensor((M,), "int32")):
        with T.Kernel(1):
            for i in T.Parallel(M):
                A[i] = A[i] / 2  # div-error

    message = raises_at("div-error", trace, f)
    assert "`/` on integers" in message and "//" in message


def test_load_with_too_few_indices():
    @T.prim_func
    def f(A: T.Tensor((M, N), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(M):
                A[i, 0] = A[i] * 2  # rank-error

    message = raises_at("rank-error", trace, f)
    assert "'A' has 2 dimensions but 1 index given" in message
    # The caret points at the subscript being read, not the store.
    lines = message.splitlines()
    assert lines[2].index("^") == lines[1].index("A[i] * 2")


def test_slice_used_as_value():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            A[0] = A[0:4] + 1  # slice-error

    assert "region, not a value" in raises_at("slice-error", trace, f)


def test_float_index():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            A[A[0]] = 1  # index-error

    assert "an index must be an integer" in raises_at("index-error", trace, f)


def test_unbound_shape_points_at_parameter():
    size = None

    @T.prim_func
    def f(A: T.Tensor((size, 4), "float32")):  # shape-error
        with T.Kernel(1):
            T.clear(A)

    message = raises_at("shape-error", trace, f)
    assert "shape of parameter 'A' must be positive integers" in message
    assert trace(f, {"size": 8})["buffers"][0]["shape"] == [8, 4]


def test_missing_annotation():
    @T.prim_func
    def f(A):  # annotation-error
        with T.Kernel(1):
            pass

    assert "needs an annotation" in raises_at("annotation-error", trace, f)


def test_two_kernels_in_a_row_trace_in_order_but_nested_is_an_error():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            T.clear(A)
        with T.Kernel(2, threads=64):
            T.clear(A)

    program = trace(f)
    assert [k["threads"] for k in program["kernels"]] == [128, 64] and "kernel" not in program

    @T.prim_func
    def g(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            with T.Kernel(1):  # second-kernel
                T.clear(A)

    assert "a T.Kernel inside another T.Kernel" in raises_at("second-kernel", trace, g)


def test_statement_outside_kernel():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        T.clear(A)  # outside-kernel

    assert "inside `with T.Kernel" in raises_at("outside-kernel", trace, f)


def test_no_kernel():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):  # no-kernel
        pass

    assert "has no `with T.Kernel" in raises_at("no-kernel", trace, f)


def test_else_without_if():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1), T.Else():  # else-error
            T.clear(A)

    raises_at("else-error", trace, f)


def test_break_out_of_tile_loop():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            for k in T.serial(4):  # break-error
                A[k] = 0
                break

    assert "left early" in raises_at("break-error", trace, f)


def test_float_bit_operation_and_unknown_dtype():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            A[0] = A[1] & 1  # bit-error

    raises_at("bit-error", trace, f)

    @T.prim_func
    def g(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            T.alloc_shared((4,), "float17")  # dtype-error

    assert "unknown dtype 'float17'" in raises_at("dtype-error", trace, g)


def test_jit_factory_must_return_prim_func():
    @tilers.jit
    def factory(n):
        return n

    with pytest.raises(TileError, match="must return a @T.prim_func"):
        factory.prim_func(3)


def test_out_idx_out_of_range():
    @T.prim_func
    def f(A: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            T.clear(A)

    with pytest.raises(TileError, match="out_idx 3 is out of range"):
        tilers.compile(f, out_idx=[3])


def test_format_diagnostic():
    text = format_diagnostic("k.py", 3, 5, "bad thing", "    x = y\n", "do this")
    # The line is shown without its indentation; the caret follows it.
    assert text == "k.py:3:5: error: bad thing\n    x = y\n    ^\nhelp: do this"
    text = format_diagnostic("k.py", 3, 9, "bad thing", "    x = y\n")
    assert text == "k.py:3:9: error: bad thing\n    x = y\n        ^"
    # Column 0 (unknown): no caret.
    text = format_diagnostic("k.py", 3, 0, "bad thing", "    x = y\n", "do this")
    assert text == "k.py:3:0: error: bad thing\n    x = y\nhelp: do this"
