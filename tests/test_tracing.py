"""Tests of tracing: the JSON programs (docs/format.md) that prim_funcs produce."""

import json
import os
import subprocess
import sys

import pytest
import tilers
import tilers.language as T
from tilers._trace import trace

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(tilers.__file__)))

# Module globals rebound by trace(..., params), the way TileLang examples are written.
M = N = K = None
block_M = block_N = None


def walk(stmts):
    """Every statement, depth first, in program order."""
    for stmt in stmts:
        yield stmt
        for key in ("body", "then", "else"):
            yield from walk(stmt.get(key, []))


def stmts_of(program, op):
    return [s for s in walk(program["kernel"]["body"]) if s["op"] == op]


def buffer_named(program, name):
    return next(b for b in program["buffers"] if b["name"] == name)


def line_of(program, loc):
    return program["sources"][loc[0]]["lines"][str(loc[1])]


def c(value, dtype):
    return {"op": "const", "dtype": dtype, "value": value}


def v(var_id, dtype="int32"):
    return {"op": "var", "dtype": dtype, "id": var_id}


@T.prim_func
def add(
    A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), T.float16), C: T.Tensor((M, N), "float16")
):
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            C[by * block_M + i, bx * block_N + j] = (
                A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
            )


ADD_PARAMS = {"M": 1024, "N": 1000, "block_M": 32, "block_N": 128}


def test_elementwise_add():
    program = trace(add, ADD_PARAMS)
    assert program["version"] == 1
    assert program["name"] == "add"
    assert list(program) == ["version", "name", "sources", "params", "buffers", "vars", "kernel"]
    assert program["params"] == [
        {"kind": "tensor", "name": n, "buffer": i} for i, n in enumerate("ABC")
    ]
    for buffer in program["buffers"]:
        assert buffer["scope"] == "global"
        assert buffer["dtype"] == "float16"
        assert buffer["shape"] == [1024, 1000]
        line = line_of(program, buffer["loc"])  # the parameter's own position
        assert line[buffer["loc"][2] - 1 :].startswith(buffer["name"] + ": T.Tensor")
    assert program["vars"] == [
        {"id": 0, "name": "bx", "kind": "block_idx", "axis": 0, "dtype": "int32"},
        {"id": 1, "name": "by", "kind": "block_idx", "axis": 1, "dtype": "int32"},
        {"id": 2, "name": "i", "kind": "loop", "dtype": "int32"},
        {"id": 3, "name": "j", "kind": "loop", "dtype": "int32"},
    ]
    kernel = program["kernel"]
    assert kernel["grid"] == [c(8, "int32"), c(32, "int32")]
    assert kernel["threads"] == 128
    assert "T.Kernel" in line_of(program, kernel["loc"])
    (loop,) = kernel["body"]
    assert loop["op"] == "parallel"
    assert loop["vars"] == [2, 3]
    assert loop["extents"] == [32, 128]
    (store,) = loop["body"]
    assert store["op"] == "store" and store["buf"] == 2
    row = {
        "op": "add",
        "dtype": "int32",
        "a": {"op": "mul", "dtype": "int32", "a": v(1), "b": c(32, "int32")},
        "b": v(2),
    }
    assert store["idx"][0] == row
    value = store["value"]
    assert value["op"] == "add" and value["dtype"] == "float16"
    assert value["a"]["op"] == "load" and value["a"]["buf"] == 0
    assert value["b"]["op"] == "load" and value["b"]["buf"] == 1
    assert value["a"]["idx"][0] == row
    # The store's location is the subscript on the left of the assignment.
    assert "C[by * block_M + i" in line_of(program, store["loc"])
    assert store["loc"][2] == line_of(program, store["loc"]).index("C[") + 1
    assert "A[by" in line_of(program, value["a"]["loc"])
    assert program["sources"][0]["file"] == os.path.abspath(__file__)
    json.dumps(program)  # serializable as is


def test_rebinding_gives_new_shapes_and_does_not_touch_globals():
    small = trace(add, {"M": 16, "N": 8, "block_M": 16, "block_N": 8})
    assert small["buffers"][0]["shape"] == [16, 8]
    assert small["kernel"]["grid"] == [c(1, "int32"), c(1, "int32")]
    assert M is None and block_M is None


def test_rebinding_a_closure_variable():
    def factory(n, block):
        @T.prim_func
        def scale(X: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, block)) as bx:
                for i in T.Parallel(block):
                    X[bx * block + i] = X[bx * block + i] * 2

        return scale

    program = trace(factory(256, 64), {"n": 512, "block": 128})
    assert program["buffers"][0]["shape"] == [512]
    assert program["kernel"]["grid"] == [c(4, "int32")]
    (loop,) = program["kernel"]["body"]
    assert loop["extents"] == [128]
    assert program["vars"][0]["name"] == "bx"
    assert program["vars"][1]["name"] == "i"
    # The float literal 2 takes the buffer's dtype.
    assert loop["body"][0]["value"]["b"] == c(2.0, "float32")


bM = 64


@T.prim_func
def softmax(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
    with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
        tile = T.alloc_fragment((bM, N), "float32")
        row_max = T.alloc_fragment((bM,), "float32")
        row_sum = T.alloc_fragment((bM,), "float32")
        scale = T.alloc_fragment((bM,), "float32")
        T.copy(A[bx * bM, 0], tile, pad=-T.infinity("float32"))
        T.reduce_max(tile, row_max, dim=1)
        for i, j in T.Parallel(bM, N):
            tile[i, j] = T.exp(tile[i, j] - row_max[i])
        T.reduce_sum(tile, row_sum, dim=1, clear=True)
        for i in T.Parallel(bM):
            scale[i] = 1.0 / row_sum[i]
        for i, j in T.Parallel(bM, N):
            tile[i, j] *= scale[i]
        T.copy(tile, B[bx * bM, 0])


def test_softmax():
    program = trace(softmax, {"M": 1000, "N": 256})
    names = [b["name"] for b in program["buffers"]]
    assert names == ["A", "B", "tile", "row_max", "row_sum", "scale"]
    tile = buffer_named(program, "tile")
    assert tile["scope"] == "fragment" and tile["shape"] == [64, 256]
    assert "T.alloc_fragment" in line_of(program, tile["loc"])
    assert program["kernel"]["grid"] == [c(16, "int32")]
    assert program["vars"][0] == {
        "id": 0,
        "name": "bx",
        "kind": "block_idx",
        "axis": 0,
        "dtype": "int32",
    }

    load_copy, store_copy = stmts_of(program, "copy")
    assert load_copy["src"]["buf"] == 0
    assert load_copy["src"]["dims"] == [
        {"start": {"op": "mul", "dtype": "int32", "a": v(0), "b": c(64, "int32")}},
        {"start": c(0, "int32")},
    ]
    assert load_copy["dst"] == {"buf": tile["id"], "dims": [], "loc": load_copy["loc"]}
    assert load_copy["pad"] == c("-inf", "float32")
    assert store_copy["src"]["dims"] == []
    assert store_copy["dst"]["buf"] == 1 and len(store_copy["dst"]["dims"]) == 2
    assert store_copy["pad"] is None

    reduce_max, reduce_sum = stmts_of(program, "reduce")
    assert {k: reduce_max[k] for k in ("kind", "src", "dst", "dim", "clear")} == {
        "kind": "max",
        "src": tile["id"],
        "dst": buffer_named(program, "row_max")["id"],
        "dim": 1,
        "clear": True,
    }
    assert reduce_sum["kind"] == "sum" and reduce_sum["dim"] == 1

    exp_store, reciprocal, scaled = stmts_of(program, "store")
    assert exp_store["value"]["op"] == "exp"
    assert exp_store["value"]["a"]["op"] == "sub"
    assert reciprocal["value"] == {
        "op": "div",
        "dtype": "float32",
        "a": c(1.0, "float32"),
        "b": {
            "op": "load",
            "dtype": "float32",
            "buf": buffer_named(program, "row_sum")["id"],
            "idx": [v(reciprocal_var(program))],
            "loc": reciprocal["value"]["b"]["loc"],
        },
    }
    # `tile[i, j] *= scale[i]` is a store of load * load.
    assert scaled["buf"] == tile["id"]
    assert scaled["value"]["op"] == "mul"
    assert scaled["value"]["a"]["op"] == "load" and scaled["value"]["a"]["buf"] == tile["id"]
    assert scaled["value"]["a"]["idx"] == scaled["idx"]
    assert scaled["value"]["b"]["buf"] == buffer_named(program, "scale")["id"]
    assert "*=" in line_of(program, scaled["loc"])


def reciprocal_var(program):
    one_d = [s for s in stmts_of(program, "parallel") if len(s["vars"]) == 1]
    return one_d[0]["vars"][0]


def test_reduce_defaults_to_last_dim():
    @T.prim_func
    def f(A: T.Tensor((4, 8), "float32")):
        with T.Kernel(1):
            x = T.alloc_fragment((4, 8), "float32")
            m = T.alloc_fragment((4,), "float32")
            T.reduce_absmax(x, m)
            T.reduce_min(x, m, dim=-1, clear=False)

    first, second = stmts_of(trace(f), "reduce")
    assert (first["kind"], first["dim"], first["clear"]) == ("absmax", 1, True)
    assert (second["kind"], second["dim"], second["clear"]) == ("min", 1, False)


def test_slices_make_regions():
    @T.prim_func
    def f(Q: T.Tensor((2, 128, 4, 32), "float16")):
        with T.Kernel(2, 4) as (bz, h):
            q = T.alloc_shared((64, 32), "float16")
            T.copy(Q[bz, 0:64, h, :], q)
            T.fill(q[0:16, :], 1)
            T.clear(q)

    program = trace(f)
    (copy,) = stmts_of(program, "copy")
    assert copy["src"]["dims"] == [
        {"index": v(0)},
        {"start": c(0, "int32"), "stop": c(64, "int32")},
        {"index": v(1)},
        {"start": c(0, "int32"), "stop": c(32, "int32")},
    ]
    assert copy["dst"]["dims"] == []
    assert "Q[bz, 0:64, h, :]" in line_of(program, copy["src"]["loc"])
    fill, clear = stmts_of(program, "fill")
    assert fill["dst"]["dims"][0] == {"start": c(0, "int32"), "stop": c(16, "int32")}
    assert fill["value"] == c(1.0, "float16")
    assert clear["dst"]["dims"] == [] and clear["value"] == c(0.0, "float16")


def test_copy_of_two_elements_selects_single_elements():
    @T.prim_func
    def f(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1):
            T.copy(A[3], B[4])

    (copy,) = stmts_of(trace(f), "copy")
    assert copy["src"]["dims"] == [{"index": c(3, "int32")}]
    assert copy["dst"]["dims"] == [{"index": c(4, "int32")}]


def test_if_else():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(128):
                with T.If(i < 64):
                    A[i] = 1.0
                with T.Else():
                    A[i] = 2.0
                with T.If((i > 3) & (i < 9)):
                    A[i] = 3.0

    program = trace(f)
    first, second = stmts_of(program, "if")
    assert first["cond"] == {"op": "lt", "dtype": "bool", "a": v(1), "b": c(64, "int32")}
    assert [s["value"]["value"] for s in first["then"]] == [1.0]
    assert [s["value"]["value"] for s in first["else"]] == [2.0]
    assert second["cond"]["op"] == "and" and second["else"] == []
    assert "T.If(i < 64)" in line_of(program, first["loc"])


def test_scalar_param_and_serial_loops():
    @T.prim_func
    def f(X: T.Tensor((1024,), "float32"), n: T.int32, alpha: T.float32):
        with T.Kernel(T.ceildiv(n, 128)) as bx:
            acc = T.alloc_local((1,), "float32")
            for k in T.serial(n):
                acc[0] += X[k] * alpha
            for k in T.serial(2, n):
                acc[0] += 1
            for k in T.unroll(4):
                acc[0] += 1
            for k in T.Pipelined(T.ceildiv(n, 32), num_stages=3):
                acc[0] += 1
            X[bx] = acc[0]

    program = trace(f)
    assert program["params"][1:] == [
        {"kind": "scalar", "name": "n", "var": 0},
        {"kind": "scalar", "name": "alpha", "var": 1},
    ]
    assert program["vars"][:2] == [
        {"id": 0, "name": "n", "kind": "param", "dtype": "int32"},
        {"id": 1, "name": "alpha", "kind": "param", "dtype": "float32"},
    ]
    n = v(0)
    # ceildiv(n, 128) = (n + 128 - 1) // 128
    assert program["kernel"]["grid"] == [
        {
            "op": "floordiv",
            "dtype": "int32",
            "a": {
                "op": "sub",
                "dtype": "int32",
                "a": {"op": "add", "dtype": "int32", "a": n, "b": c(128, "int32")},
                "b": c(1, "int32"),
            },
            "b": c(128, "int32"),
        }
    ]
    loops = stmts_of(program, "for")
    assert [(s["kind"], s.get("stages")) for s in loops] == [
        ("serial", None),
        ("serial", None),
        ("unroll", None),
        ("pipelined", 3),
    ]
    assert loops[0]["start"] == c(0, "int32") and loops[0]["extent"] == n
    assert loops[1]["start"] == c(2, "int32")
    assert loops[1]["extent"] == {"op": "sub", "dtype": "int32", "a": n, "b": c(2, "int32")}
    assert loops[2]["extent"] == c(4, "int32")
    assert all(program["vars"][s["var"]]["name"] == "k" for s in loops)
    assert loops[0]["body"][0]["value"]["b"]["b"] == v(1, "float32")


def test_type_promotion_inserts_casts():
    @T.prim_func
    def f(
        H: T.Tensor((4,), "float16"),
        F: T.Tensor((4,), "float32"),
        G: T.Tensor((4,), "bfloat16"),
        I: T.Tensor((4,), "int32"),
        L: T.Tensor((4,), "int64"),
        U: T.Tensor((4,), "uint32"),
    ):
        with T.Kernel(1):
            F[0] = H[0] + F[0]  # float16 + float32 -> float32
            F[1] = G[0] * H[1]  # bfloat16 * float16 -> float32
            H[2] = H[0] * 2  # int literal takes float16
            F[2] = I[0] + 1.5  # int + float literal -> float32
            L[0] = I[1] + L[1]  # int32 + int64 -> int64
            I[2] = I[0] + U[0]  # int32 + uint32 -> int32
            I[3] = T.cast(F[3], "int32") // 2
            F[3] = T.max(H[3], 0.0)
            H[3] = T.if_then_else(I[0] > 0, H[0], 0)
            I[1] = (I[0] < 3) + 1  # bool in arithmetic -> int32
            H[1] = T.float16(1.5)

    program = trace(f)
    stores = stmts_of(program, "store")

    def load(buf, dtype):
        return {"op": "load", "dtype": dtype, "buf": buf}

    def strip(node):  # drop idx/loc to compare shapes of expression trees
        if isinstance(node, dict):
            return {k: strip(x) for k, x in node.items() if k not in ("idx", "loc")}
        return node

    def cast(node, dtype):
        return {"op": "cast", "dtype": dtype, "a": node}

    values = [strip(s["value"]) for s in stores]
    assert values[0] == {
        "op": "add",
        "dtype": "float32",
        "a": cast(load(0, "float16"), "float32"),
        "b": load(1, "float32"),
    }
    assert values[1] == {
        "op": "mul",
        "dtype": "float32",
        "a": cast(load(2, "bfloat16"), "float32"),
        "b": cast(load(0, "float16"), "float32"),
    }
    assert values[2] == {
        "op": "mul",
        "dtype": "float16",
        "a": load(0, "float16"),
        "b": c(2.0, "float16"),
    }
    assert values[3] == {
        "op": "add",
        "dtype": "float32",
        "a": cast(load(3, "int32"), "float32"),
        "b": c(1.5, "float32"),
    }
    assert values[4] == {
        "op": "add",
        "dtype": "int64",
        "a": cast(load(3, "int32"), "int64"),
        "b": load(4, "int64"),
    }
    assert values[5] == {
        "op": "add",
        "dtype": "int32",
        "a": load(3, "int32"),
        "b": cast(load(5, "uint32"), "int32"),
    }
    assert values[6] == {
        "op": "floordiv",
        "dtype": "int32",
        "a": cast(load(1, "float32"), "int32"),
        "b": c(2, "int32"),
    }
    assert values[7] == cast(
        {"op": "max", "dtype": "float16", "a": load(0, "float16"), "b": c(0.0, "float16")},
        "float32",
    )
    assert values[8] == {
        "op": "select",
        "dtype": "float16",
        "cond": {"op": "gt", "dtype": "bool", "a": load(3, "int32"), "b": c(0, "int32")},
        "a": load(0, "float16"),
        "b": c(0.0, "float16"),
    }
    assert values[9] == {
        "op": "add",
        "dtype": "int32",
        "a": cast(
            {"op": "lt", "dtype": "bool", "a": load(3, "int32"), "b": c(3, "int32")}, "int32"
        ),
        "b": c(1, "int32"),
    }
    assert values[10] == c(1.5, "float16")


def test_operators():
    @T.prim_func
    def f(I: T.Tensor((8,), "int32"), F: T.Tensor((8,), "float32")):
        with T.Kernel(1) as bx:
            I[0] = (bx % 3) ^ (bx << 2) | (bx >> 1) & ~bx
            I[1] = -bx + abs(bx)
            F[0] = -F[1] + T.sqrt(F[2]) - T.exp2(2)
            I[2] = T.if_then_else(~(bx == 1) | (bx != 2), 1, 0)

    stores = stmts_of(trace(f), "store")
    ops = set()
    for s in stores:
        ops |= {n["op"] for n in walk_exprs(s["value"])}
    assert {
        "floormod",
        "bitxor",
        "shl",
        "shr",
        "bitand",
        "bitor",
        "neg",
        "abs",
        "sqrt",
        "exp2",
        "not",
        "or",
        "eq",
        "ne",
        "select",
    } <= ops
    # T.exp2 of an int literal works in float32.
    exp2 = next(n for n in walk_exprs(stores[2]["value"]) if n["op"] == "exp2")
    assert exp2["dtype"] == "float32" and exp2["a"] == c(2.0, "float32")


def walk_exprs(node):
    if isinstance(node, dict):
        if "op" in node:
            yield node
        for value in node.values():
            yield from walk_exprs(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk_exprs(value)


def test_atomic_add_and_int64_index():
    @T.prim_func
    def f(C: T.Tensor((4, 4), "float32")):
        with T.Kernel(1) as bx:
            for i, j in T.Parallel(4, 4):
                T.atomic_add(C[i, j], 1)
            C[T.int64(bx), -1] = 0

    program = trace(f)
    (atomic,) = stmts_of(program, "atomic_add")
    assert atomic["buf"] == 0 and atomic["idx"] == [v(1), v(2)]
    assert atomic["value"] == c(1.0, "float32")
    (store,) = stmts_of(program, "store")
    assert store["idx"] == [{"op": "cast", "dtype": "int64", "a": v(0)}, c(3, "int32")]


def test_buffer_names_are_unique_and_default():
    @T.prim_func
    def f(x: T.Tensor((4,), "float32")):
        with T.Kernel(1):
            for _ in range(2):
                x = T.alloc_shared((4,), "float32")  # noqa: F841
            T.alloc_local((1,), "int32")

    names = [b["name"] for b in trace(f)["buffers"]]
    assert names == ["x", "x_1", "x_2", "buf3"]


def test_buffer_shape_and_dtype_and_python_metaprogramming():
    @T.prim_func
    def f(A: T.Tensor((4, 8), "half")):
        with T.Kernel(1):
            s = T.alloc_shared(A.shape, A.dtype)
            if s.shape[1] == 8:  # plain Python values: compile-time metaprogramming
                T.copy(A, s)

    program = trace(f)
    assert buffer_named(program, "s")["shape"] == [4, 8]
    assert buffer_named(program, "s")["dtype"] == "float16"
    assert len(stmts_of(program, "copy")) == 1


def test_dtype_constants_are_strings():
    assert T.float16 == "float16" and isinstance(T.int32, str)
    assert tilers.__version__ == "0.1.0"


def test_jit_factory_returns_prim_func():
    @tilers.jit(out_idx=[-1])
    def add_kernel(M, N, block_M, block_N):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
                for i, j in T.Parallel(block_M, block_N):
                    B[by * block_M + i, bx * block_N + j] = A[by * block_M + i, bx * block_N + j]

        return main

    program = trace(add_kernel.prim_func(256, 128, 64, 64))
    assert program["name"] == "main"
    assert program["buffers"][0]["shape"] == [256, 128]
    assert program["kernel"]["grid"] == [c(2, "int32"), c(4, "int32")]
    assert add_kernel.out_idx == [-1] and add_kernel.__name__ == "add_kernel"


def test_import_does_not_load_torch_or_cuda():
    code = (
        "import sys, tilers, tilers.language; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'cuda', 'numpy', 'tilers._tilers')))"
    )
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


DUMP_SOURCE = """
import tilers
import tilers.language as T

size = 64

@T.prim_func
def copy(A: T.Tensor((size,), "float32"), B: T.Tensor((size,), "float32")):
    with T.Kernel(1):
        T.copy(A, B)

@tilers.jit
def factory(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            T.fill(A, 0)
    return main
"""


@pytest.mark.parametrize(
    "target, extra, shape",
    [
        ("copy", ["--param", "size=128"], [128]),
        ("factory", ["--args", "32"], [32]),
    ],
)
def test_dump_command(tmp_path, target, extra, shape):
    source = tmp_path / "kernels.py"
    source.write_text(DUMP_SOURCE)
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    subprocess.run(
        [sys.executable, "-m", "tilers", "dump", f"{source}::{target}", *extra, "-o", str(out)],
        env=env,
        check=True,
        capture_output=True,
    )
    program = json.loads(out.read_text())
    assert program["buffers"][0]["shape"] == shape
    assert program["sources"][0]["file"] == str(source)


def test_tilelangs_compile_options_are_accepted_by_tilers_compile():
    """tilelang.compile(func, target="cuda", execution_backend="cython", verbose=True, ...):
    the options tilers has no use for are not names the kernel reads."""
    import numpy as np

    @T.prim_func
    def f(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                A[i] = A[i] + 1.0

    kernel = tilers.compile(f, target="interp", execution_backend="cython", verbose=True,
                            target_host="llvm", compile_flags=["-O3"])
    A = np.zeros(64, np.float32)
    kernel(A)
    assert (A == 1).all()
