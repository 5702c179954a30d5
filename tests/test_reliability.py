"""Reliability without a GPU: names C++ would not take, deep programs, 64-bit indices into
huge tensors, malformed tuning records, cache folders other users can write, the CLI's errors."""

import contextlib
import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tilers
import tilers.language as T

ELF_MAGIC = b"\x7fELF"

# Legal Python names that are C++ keywords, alternative tokens, macros, CUDA built-ins or
# names the generated code itself calls.
CXX_NAMES = [
    "xor", "xor_eq", "and_eq", "bitand", "bitor", "compl", "not_eq", "or_eq", "typename",
    "NULL", "operator", "nullptr", "template", "this", "new", "delete", "virtual", "friend",
    "mutable", "explicit", "noexcept", "constexpr", "consteval", "decltype", "typeid",
    "register", "volatile", "signed", "unsigned", "char16_t", "wchar_t", "static_assert",
    "thread_local", "alignas", "alignof", "concept", "requires", "co_await", "co_yield",
    "reinterpret_cast", "dynamic_cast", "EOF", "INFINITY", "NAN", "errno", "printf",
    "malloc", "expf", "exp2f", "fmaxf", "sqrtf", "atomicAdd", "uint4", "float2", "longlong2",
    "dim3", "blockDim", "warpSize", "threadIdx", "half", "make_float2", "_Bool", "__x",
    "int32_t", "size_t", "std", "min", "max", "abs", "exp", "tl_float", "bx", "tid", "e", "t0", "lane",
]


def _load_module(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _names_kernel_source(names: list[str]) -> str:
    params = ", ".join(f'{n}: T.Tensor((N,), "float32")' for n in names)
    first, rest = names[0], names[1:]
    total = " + ".join(f"{n}[blk * 64 + i]" for n in rest) or "0.0"
    return textwrap.dedent(f"""\
        import tilers.language as T
        N = 100

        @T.prim_func
        def kernel({params}):
            with T.Kernel(T.ceildiv(N, 64), threads=64) as blk:
                {rest[0] if rest else "s"}_tile = T.alloc_shared((64,), "float32")
                for i in T.Parallel(64):
                    {first}[blk * 64 + i] = {total}
        """)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cxx_keywords_and_macros_as_parameter_names(tmp_path, arch):
    groups = [CXX_NAMES[i:i + 12] for i in range(0, len(CXX_NAMES), 12)]
    for g, names in enumerate(groups):
        module = _load_module(tmp_path, f"names{g}_{arch}", _names_kernel_source(names))
        kernel = tilers.compile(module.kernel, target=f"cuda:{arch}")
        assert kernel.cubin[:4] == ELF_MAGIC, names
        # and the interpreter computes the same program
        arrays = [np.full(100, k + 1.0, dtype=np.float32) for k in range(len(names))]
        tilers.compile(module.kernel, target="interp")(*arrays)
        np.testing.assert_array_equal(arrays[0], float(sum(range(2, len(names) + 1))))


def test_buffers_and_loop_variables_named_like_cxx_keywords(tmp_path):
    source = textwrap.dedent("""\
        import tilers.language as T

        @T.prim_func
        def kernel(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                xor = T.alloc_shared((64, 64), "float16")
                typename = T.alloc_fragment((64, 64), "float32")
                T.copy(A, xor)
                for operator, nullptr in T.Parallel(64, 64):
                    typename[operator, nullptr] = xor[operator, nullptr] * 2.0
                T.copy(typename, B)
        """)
    module = _load_module(tmp_path, "buffer_names", source)
    for arch in ("sm_80", "sm_90a"):
        assert tilers.compile(module.kernel, target=f"cuda:{arch}").cubin[:4] == ELF_MAGIC
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float16)
    b = np.zeros_like(a)
    tilers.compile(module.kernel, target="interp")(a, b)
    np.testing.assert_array_equal(b, a * np.float16(2))


def test_a_kernel_named_in_any_script(tmp_path):
    source = textwrap.dedent("""\
        import tilers.language as T

        @T.prim_func
        def äpfel_加法(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
            with T.Kernel(2, threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = A[bx * 128 + i] + 1.0
        """)
    module = _load_module(tmp_path, "unicode_name", source)
    kernel = tilers.compile(module.äpfel_加法, target="cuda:sm_90a")
    assert kernel.cubin[:4] == ELF_MAGIC
    assert kernel.entry.isascii() and kernel.entry.endswith("_kernel")
    a = np.arange(256, dtype=np.float32)
    b = np.zeros_like(a)
    tilers.compile(module.äpfel_加法, target="interp")(a, b)
    np.testing.assert_array_equal(b, a + 1)


# --- 64-bit indices ----------------------------------------------------------------------

WIDE = 2**31 + 1000


def _wide_add():
    @T.prim_func
    def wide_add(A: T.Tensor((WIDE,), "float16"), B: T.Tensor((WIDE,), "float16"),
                 C: T.Tensor((WIDE,), "float16")):
        with T.Kernel(T.ceildiv(WIDE, 1024), threads=128) as bx:
            for i in T.Parallel(1024):
                C[bx * 1024 + i] = A[bx * 1024 + i] + B[bx * 1024 + i]
    return wide_add


def test_indices_into_a_tensor_past_2_31_are_64_bit_with_their_guards():
    kernel = tilers.compile(_wide_add(), target="cuda:sm_90a")
    source = kernel.source
    body = source[source.index("wide_add_kernel("):]
    # the guard compares in 64 bits, the index is computed in 64 bits from its leaves
    assert "2147484648ll" in body and "2147484648)" not in body
    assert "(((long long)bx) * 1024ll)" in body
    assert "(long long)(((bx * 1024)" not in body  # never a 32-bit product widened afterwards
    assert kernel.cubin[:4] == ELF_MAGIC


def test_small_kernels_keep_32_bit_indices():
    @T.prim_func
    def small_add(A: T.Tensor((4096,), "float16"), C: T.Tensor((4096,), "float16")):
        with T.Kernel(4, threads=128) as bx:
            for i in T.Parallel(1024):
                C[bx * 1024 + i] = A[bx * 1024 + i]

    assert "long long" not in tilers.compile(small_add, target="cuda:sm_90a").source.split(
        "small_add_kernel(")[1]


# --- deep programs -------------------------------------------------------------------------


def _deep_kernel(terms: int = 0, nested_ifs: int = 0):
    @T.prim_func
    def deep(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                with contextlib.ExitStack() as stack:
                    for k in range(nested_ifs):
                        stack.enter_context(T.If(A[i] > -1.0 - k))
                    s = A[i]
                    for _ in range(terms):
                        s = s + A[i]
                    B[i] = s
    return deep


def test_an_expression_of_5000_operations_compiles_and_runs():
    deep = _deep_kernel(terms=5000)
    kernel = tilers.compile(deep, target="cuda:sm_90a")
    assert "deep_kernel(" in kernel.source
    a = np.arange(128, dtype=np.float32)
    b = np.zeros_like(a)
    tilers.compile(deep, target="interp")(a, b)
    np.testing.assert_array_equal(b, a * 5001)


def test_500_nested_ifs_compile_to_a_cubin_and_run():
    deep = _deep_kernel(nested_ifs=500, terms=1)
    kernel = tilers.compile(deep, target="cuda:sm_90a")
    assert kernel.cubin[:4] == ELF_MAGIC
    assert len(kernel.ir()) == len(tilers._tilers.pass_names()) + 1
    a = np.arange(128, dtype=np.float32) - 64  # every condition holds where a > -1
    b = np.full_like(a, 7.0)
    tilers.compile(deep, target="interp")(a, b)
    expected = np.where(a > -1.0, a * 2, 7.0)
    np.testing.assert_array_equal(b, expected)


def test_deep_programs_through_the_pass_checker():
    from tilers.testing import check_passes

    result = check_passes(_deep_kernel(terms=1000, nested_ifs=100))
    assert result.ok, result


def test_past_the_nesting_limit_is_an_error_at_the_users_line():
    with pytest.raises(tilers.TileError) as info:
        tilers.compile(_deep_kernel(terms=21000), target="cuda:sm_90a")
    message = str(info.value)
    assert "nests" in message and "tilers accepts up to 20000" in message
    assert "test_reliability.py:" in message and "s = s + A[i]" in message
    assert "malformed" not in message and "JSON" not in message


# --- the command line ------------------------------------------------------------------------


def _dump(*args):
    return subprocess.run(
        [sys.executable, "-m", "tilers", "dump", *args], capture_output=True, text=True,
        cwd=os.path.dirname(__file__),
    )


@pytest.mark.parametrize("target, says", [
    ("no_such_file.py::f", "no such file: no_such_file.py"),
    ("kernels.py::no_such_kernel", "kernels.py has no 'no_such_kernel'"),
    ("kernels.py", "expected FILE.py::FUNC"),
])
def test_dump_errors_are_one_line(tmp_path, target, says):
    out = _dump(target, "-o", str(tmp_path / "p.json"))
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and says in out.stderr


def test_dump_to_an_unwritable_place_is_one_line(tmp_path):
    source = tmp_path / "k.py"
    source.write_text(textwrap.dedent("""\
        import tilers.language as T

        @T.prim_func
        def k(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(4):
                    A[i] = 1.0
        """))
    out = _dump(f"{source}::k", "-o", str(tmp_path / "missing" / "p.json"))
    assert out.returncode != 0 and "Traceback" not in out.stderr and "cannot write" in out.stderr
    good = _dump(f"{source}::k", "-o", str(tmp_path / "p.json"))
    assert good.returncode == 0, good.stderr
    assert '"name":"k"' in (tmp_path / "p.json").read_text()
