"""T.print, T.device_assert and lineinfo: interpreter output, NVRTC builds, #line directives."""

import os

import numpy as np
import pytest
import tilers
import tilers.language as T

ELF_MAGIC = b"\x7fELF"
THIS_FILE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    """The line of this file that carries the comment ``# <marker>``."""
    with open(__file__, encoding="utf-8") as source:
        for number, text in enumerate(source, start=1):
            if text.rstrip().endswith(f"# {marker}"):
                return number
    raise AssertionError(f"no line marked {marker}")


def printing(M=8, N=16, block_M=4):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            A_s = T.alloc_shared((block_M, N), "float16")
            acc = T.alloc_fragment((block_M, N), "float32")
            T.copy(A[bx * block_M, 0], A_s)
            T.print(bx * 2 + 1, "odd")
            T.print(A_s, "A_s")
            T.print(A_s[1:2, 0:4], "row 1")
            T.copy(A_s, acc)
            T.print(acc, "acc", block=(1,))
            for i, j in T.Parallel(block_M, N):
                with T.If(j == 0):
                    T.print(acc[i, j] * 0.5, "half", block=(0,))
                B[bx * block_M + i, j] = acc[i, j]
            T.print(A[bx * block_M + 1, 3] + 0.25)

    return main


def asserting(limit_line_marker=None, N=64, block=32):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), limit: T.float32):
        with T.Kernel(N // block, threads=32) as bx:
            for i in T.Parallel(block):
                T.device_assert(A[bx * block + i] < limit, "A too big")  # ASSERT_IN_PARALLEL
            T.device_assert(bx < 1)  # ASSERT_ONCE

    return main


def shared_out_of_range(N=64):
    """A kernel bug the compiler cannot see: a shared-memory index moved by a run-time
    parameter; compute-sanitizer (with lineinfo) must name the marked line."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), shift: T.int32):
        with T.Kernel(1, threads=N) as bx:
            s = T.alloc_shared((N,), "float32")
            T.copy(A[bx * N], s)
            for i in T.Parallel(N):
                B[bx * N + i] = s[i + shift]  # SHARED_OUT_OF_RANGE

    return main


def run_interp(prim_func, *args):
    kernel = tilers.compile(prim_func, target="interp")
    return kernel(*args)


# --- T.print on the interpreter ------------------------------------------------------------


def test_print_writes_values_and_tiles_once_per_block(capfd):
    A = np.arange(128, dtype=np.float16).reshape(8, 16)
    B = np.zeros_like(A)
    run_interp(printing(), A, B)
    out = capfd.readouterr().out
    np.testing.assert_array_equal(B, A)  # printing changes nothing

    assert "[block (0, 0, 0)] odd: 1\n" in out
    assert "[block (1, 0, 0)] odd: 3\n" in out
    # a tile, numpy-style, after a line naming it
    assert (
        "[block (0, 0, 0)] A_s: A_s shared float16[4, 16] =\n"
        "[[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15]\n"
        " [16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31]\n"
        " [32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47]\n"
        " [48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63]]\n"
    ) in out
    assert (
        "[block (1, 0, 0)] row 1: A_s shared float16[4, 16], region of shape [1, 4] =\n"
        "[[80 81 82 83]]\n"
    ) in out
    # block=(1,): only block 1 prints the fragment
    assert out.count("acc fragment float32[4, 16]") == 1
    assert "[block (1, 0, 0)] acc: acc fragment float32[4, 16] =\n[[ 64  65" in out
    # inside T.Parallel: one line per iteration, with its indices, in iteration order
    halves = [line for line in out.splitlines() if " half " in line]
    assert halves == [f"[block (0, 0, 0)] half (i={i}, j=0): {8 * i}" for i in range(4)]
    # no message: the block alone; floats as C's %g
    assert "[block (0, 0, 0)]: 19.25\n" in out
    assert "[block (1, 0, 0)]: 83.25\n" in out


def test_print_rejects_bad_arguments_at_the_users_line():
    def kernel(msg="", block=None, value=None):
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                T.print(A if value is None else value, msg, block=block)  # BAD_PRINT

        return main

    with pytest.raises(tilers.TileError, match="message of T.print must be a str") as error:
        tilers.compile(kernel(msg=3), target="interp")
    assert f"{THIS_FILE}:{line_of('BAD_PRINT')}" in str(error.value)
    with pytest.raises(tilers.TileError, match="must be 1 to 3 non-negative Python ints"):
        tilers.compile(kernel(block=(0, -1)), target="interp")
    with pytest.raises(tilers.TileError, match="outside the grid"):
        tilers.compile(kernel(block=(1,)), target="interp")


# --- T.device_assert on the interpreter -----------------------------------------------------


def test_device_assert_passes_when_true():
    A = np.zeros(64, dtype=np.float32)
    # block 1 fails the once-per-block assert: check one block's worth only
    run_interp(asserting(N=32), A[:32].copy(), 1.0)


def test_failing_device_assert_names_the_line_the_block_and_the_iteration():
    A = np.zeros(32, dtype=np.float32)
    A[7] = 5.0
    with pytest.raises(tilers.TileError) as error:
        run_interp(asserting(N=32), A, 1.0)
    text = str(error.value)
    assert f"{THIS_FILE}:{line_of('ASSERT_IN_PARALLEL')}:" in text
    assert "device assert failed: A too big at (i=7) (in block (0, 0, 0))" in text
    assert "tilers/" not in text.replace(THIS_FILE, "")

    with pytest.raises(tilers.TileError) as error:
        run_interp(asserting(N=64), np.zeros(64, dtype=np.float32), 1.0)
    text = str(error.value)
    assert f"{THIS_FILE}:{line_of('ASSERT_ONCE')}:" in text
    assert "device assert failed (in block (1, 0, 0))" in text


def test_device_assert_needs_a_bool():
    @T.prim_func
    def main(A: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            T.device_assert(A[0])

    with pytest.raises(tilers.TileError, match="needs a bool condition, got float32"):
        tilers.compile(main, target="interp")


# --- the GPU code: NVRTC, printf, __trap -----------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_prints_and_asserts_compile_with_nvrtc(arch):
    for prim_func in (printing(), asserting()):
        kernel = tilers.compile(prim_func, target=f"cuda:{arch}")
        assert kernel.cubin[:4] == ELF_MAGIC
    source = tilers.compile(printing(), target=f"cuda:{arch}").source
    # thread 0 prints scalars and shared tiles; fp16 converted to float for %g
    assert 'printf("[block (%d, %d, %d)] odd: %d\\n", bx, 0, 0, ((bx * 2) + 1));' in source
    assert '"[block (%d, %d, %d)] A_s: A_s[%d, %d:%d] = %g %g %g %g %g %g %g %g\\n"' in source
    assert "tl_float(A_s[" in source
    # a fragment: each holder prints its elements with their coordinates
    assert '"[block (%d, %d, %d)] acc: acc[%d, %d] = %g\\n"' in source
    assert "(bx == 1)" in source
    source = tilers.compile(asserting(), target=f"cuda:{arch}").source
    line = line_of("ASSERT_IN_PARALLEL")
    assert f'printf("{THIS_FILE}:{line}: device assert failed: A too big' in source
    assert "__trap();" in source


# --- lineinfo --------------------------------------------------------------------------------


def test_lineinfo_adds_line_directives_naming_the_python_lines():
    plain = tilers.compile(printing(), target="cuda:sm_90a")
    with_lines = tilers.compile(printing(), target="cuda:sm_90a", lineinfo=True)
    assert "#line" not in plain.source
    assert not plain.lineinfo and with_lines.lineinfo  # -lineinfo goes to NVRTC
    directives = [line for line in with_lines.source.splitlines() if line.startswith("#line ")]
    assert directives
    assert all(line.endswith(f'{THIS_FILE}"') for line in directives)
    numbers = {int(line.split()[1]) for line in directives}
    # the tile ops of `printing`: the copy into A_s, the prints, the parallel loop's store
    first = printing.__code__.co_firstlineno
    assert {first + 6, first + 7, first + 8, first + 14} <= numbers
    stripped = "".join(
        line + "\n" for line in with_lines.source.splitlines() if not line.startswith("#line ")
    )
    assert stripped == plain.source
    assert with_lines.cubin[:4] == ELF_MAGIC
