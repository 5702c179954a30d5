"""T.alloc_global on the CPU: global scratch a call allocates, on the interpreter, through
NVRTC, in KernelInfo and the report, in every @tilers.jit style, and its misuse."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing
from tilers.errors import TileError

ELF_MAGIC = b"\x7fELF"


def rowsum(M, K, block_M=32, block_K=64, dtype="float32"):
    """Row sums in two phases of one kernel: each block writes one partial sum per K-tile of
    its rows into scratch, then reads the partials back (another thread mapping) and adds
    them."""
    splits = (K + block_K - 1) // block_K

    @T.prim_func
    def rowsum(A: T.Tensor((M, K), dtype), Out: T.Tensor((M,), "float32")):
        partial = T.alloc_global((splits, M), "float32")
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            tile = T.alloc_fragment((block_M, block_K), "float32")
            part = T.alloc_fragment((block_M,), "float32")
            acc = T.alloc_fragment((block_M,), "float32")
            for s in T.serial(splits):
                T.copy(A[bx * block_M, s * block_K], tile)
                T.reduce_sum(tile, part, dim=1)
                T.copy(part, partial[s, bx * block_M])
            T.clear(acc)
            for s in T.serial(splits):
                for i in T.Parallel(block_M):
                    acc[i] += partial[s, bx * block_M + i]
            T.copy(acc, Out[bx * block_M])

    return rowsum


M_DYN = T.dynamic("M")


@T.prim_func
def staged(A: T.Tensor((M_DYN, 64), "float32"), B: T.Tensor((M_DYN, 64), "float32")):
    """A copy through a float16 scratch of symbolic shape (2, M, 64)."""
    S = T.alloc_global((2, M_DYN, 64), "float16")
    with T.Kernel(T.ceildiv(M_DYN, 32), threads=128) as bx:
        T.copy(A[bx * 32 : bx * 32 + 32, :], S[1, bx * 32 : bx * 32 + 32, :])
        T.copy(S[1, bx * 32 : bx * 32 + 32, :], B[bx * 32 : bx * 32 + 32, :])


@pytest.mark.parametrize("shape", [(70, 200), (1, 7), (64, 64), (33, 129)])
def test_partials_written_then_read_back_match_numpy(shape):
    M, K = shape
    kernel = tilers.compile(rowsum(M, K), out_idx=[1], target="interp")
    A = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(kernel(A), A.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)


def test_float16_input_and_every_pass_agrees():
    kernel = tilers.compile(rowsum(40, 100, dtype="float16"), out_idx=[1], target="interp")
    A = np.random.default_rng(1).random((40, 100)).astype(np.float16)
    np.testing.assert_allclose(kernel(A), A.astype(np.float64).sum(axis=1), rtol=1e-3)
    for arch in ("sm_80", "sm_90a"):
        testing.check_passes(rowsum(70, 200), arch=arch, blocks="all").assert_ok()


def test_symbolic_scratch_follows_the_calls_sizes():
    kernel = tilers.compile(staged, out_idx=[1], target="interp")
    for m in (1, 33, 100):
        A = np.random.default_rng(m).random((m, 64)).astype(np.float32)
        np.testing.assert_array_equal(kernel(A), A.astype(np.float16).astype(np.float32))


def test_interpreter_starts_float_scratch_as_nan():
    """Scratch contents are undefined when a kernel starts (torch.empty on the GPU); the
    interpreter makes reading them visible."""

    @T.prim_func
    def reads_first(Out: T.Tensor((128,), "float32")):
        S = T.alloc_global((128,), "float32")
        with T.Kernel(1, threads=128):
            T.copy(S, Out)

    kernel = tilers.compile(reads_first, out_idx=[0], target="interp")
    assert np.isnan(kernel()).all()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_compiles_with_nvrtc_and_takes_scratch_after_the_parameters(arch):
    kernel = tilers.compile(rowsum(70, 200), out_idx=[1], target=f"cuda:{arch}")
    assert kernel.cubin[:4] == ELF_MAGIC
    entry = next(line for line in kernel.source.splitlines() if "__global__" in line)
    assert entry.endswith(
        "(const float* __restrict__ A, float* __restrict__ Out, float* __restrict__ partial) {"
    )
    assert (
        "// partial: float32[4, 70], global scratch (T.alloc_global, test_alloc_global.py:22) "
        "the runtime allocates for every call" in kernel.get_kernel_source()
    )
    # phase 2 reads what other threads of the block wrote: a barrier orders them
    body = kernel.source[kernel.source.index("T.fill"):]
    assert "__syncthreads();" in body.split("T.Parallel")[0]
    symbolic = tilers.compile(staged, out_idx=[1], target=f"cuda:{arch}")
    assert symbolic.cubin[:4] == ELF_MAGIC
    assert "tl_half* __restrict__ S, const int M) {" in symbolic.source


def test_kernel_info_lists_scratch_apart_from_the_parameters():
    kernel = tilers.compile(rowsum(70, 200), out_idx=[1], target="cuda:sm_90a")
    assert [p["name"] for p in kernel.info["params"]] == ["A", "Out"]
    assert kernel.info["scratch"] == [
        {"name": "partial", "dtype": "float32", "shape": [4, 70], "bytes": 4 * 70 * 4}
    ]
    symbolic = tilers.compile(staged, out_idx=[1], target="cuda:sm_90a")
    assert symbolic.info["scratch"] == [
        {
            "name": "S",
            "dtype": "float16",
            "shape": [2, {"size": 0}, 64],
            "bytes": {"op": "mul", "a": {"size": 0}, "b": {"const": 256}},
        }
    ]
    # the interpreter's KernelInfo says the same
    assert tilers.compile(staged, target="interp").info["scratch"] == symbolic.info["scratch"]
    # a kernel without scratch has no such key (its KernelInfo is unchanged)
    @T.prim_func
    def plain(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.fill(A, 0)

    assert "scratch" not in tilers.compile(plain, target="cuda:sm_90a").info


def test_report_says_what_each_call_allocates():
    report = tilers.compile(staged, out_idx=[1], target="cuda:sm_90a").report()
    assert "global scratch (T.alloc_global), allocated by every call:" in report
    assert "S: float16[2, M, 64], M*256 bytes" in report
    report = tilers.compile(rowsum(70, 200), out_idx=[1], target="cuda:sm_80").report()
    assert "partial: float32[4, 70], 1120 bytes" in report


def test_declared_inside_the_kernel_too():
    @T.prim_func
    def inside(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            C = T.alloc_global((256,), "float32")
            T.copy(A[bx * 128 : bx * 128 + 128], C[bx * 128 : bx * 128 + 128])
            for i in T.Parallel(128):
                B[bx * 128 + i] = C[bx * 128 + 127 - i] * 2.0

    kernel = tilers.compile(inside, out_idx=[1], target="interp")
    A = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(kernel(A), np.concatenate([A[:128][::-1], A[128:][::-1]]) * 2)
    assert tilers.compile(inside, out_idx=[1], target="cuda:sm_90a").cubin[:4] == ELF_MAGIC


def test_eager_style():
    @tilers.jit
    def copy_through(A, block_N=128, dtype=T.float32):
        N = T.const("N")
        A: T.Tensor[[N], dtype]
        B = T.empty([N], dtype=dtype)
        C = T.alloc_global([N], dtype)
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            T.copy(A[bx * block_N : (bx + 1) * block_N], C[bx * block_N : (bx + 1) * block_N])
            T.copy(C[bx * block_N : (bx + 1) * block_N], B[bx * block_N : (bx + 1) * block_N])
        return B

    for n in (1000, 37):
        a = np.random.default_rng(n).random(n).astype(np.float32)
        np.testing.assert_array_equal(copy_through(a), a)


def test_factory_style():
    @tilers.jit(out_idx=[1])
    def factory(N, block_N=128):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            C = T.alloc_global((N,), "float32")
            with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
                T.copy(A[bx * block_N : (bx + 1) * block_N], C[bx * block_N : (bx + 1) * block_N])
                T.copy(C[bx * block_N : (bx + 1) * block_N], B[bx * block_N : (bx + 1) * block_N])

        return main

    a = np.random.default_rng(0).random(1000).astype(np.float32)
    np.testing.assert_array_equal(factory(1000)(a), a)


# --- misuse: errors at the user's line ------------------------------------------------


def compile_error(func) -> str:
    with pytest.raises(TileError) as info:
        tilers.compile(func, target="cuda:sm_90a")
    message = str(info.value)
    assert "tilers/" not in message.replace("tilers/tests", "")  # never tilers internals
    return message


def test_a_shape_that_is_not_ints_is_an_error_at_its_line():
    @T.prim_func
    def floats(A: T.Tensor((128,), "float32")):
        S = T.alloc_global((2.5, 128), "float32")  # the line
        with T.Kernel(1, threads=128):
            T.copy(A, S[0, :])

    message = compile_error(floats)
    assert "T.alloc_global: the shape must be positive Python ints or T.dynamic sizes" in message
    assert 'S = T.alloc_global((2.5, 128), "float32")  # the line' in message

    @T.prim_func
    def traced(A: T.Tensor((128,), "float32")):
        with T.Kernel(4, threads=128) as bx:
            S = T.alloc_global((bx, 128), "float32")  # the line
            T.copy(A, S[0, :])

    message = compile_error(traced)
    assert "dimension 0 is an expression of kernel values" in message
    assert "S = T.alloc_global((bx, 128)" in message


def test_another_scope_or_dtype_is_an_error():
    @T.prim_func
    def shared(A: T.Tensor((128,), "float32")):
        S = T.alloc_global((128,), "float32", scope="shared")
        with T.Kernel(1, threads=128):
            T.copy(A, S)

    assert "T.alloc_global allocates global memory, not 'shared'" in compile_error(shared)

    @T.prim_func
    def dtype(A: T.Tensor((128,), "float32")):
        S = T.alloc_global((128,), "float33")
        with T.Kernel(1, threads=128):
            T.copy(A, S)

    message = compile_error(dtype)
    assert "unknown dtype 'float33'" in message and 'S = T.alloc_global((128,), "float33")' in message


def test_scratch_is_global_memory_not_a_tile():
    """A gemm reads tiles: scratch must be copied into shared memory first."""

    @T.prim_func
    def gemm_from_scratch(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        S = T.alloc_global((64, 64), "float16")
        with T.Kernel(1, threads=128):
            b_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, S)
            T.copy(A, b_s)
            T.gemm(S, b_s, acc, clear_accum=True)  # the line
            T.copy(acc, C)

    message = compile_error(gemm_from_scratch)
    assert "T.gemm(S, b_s, acc, clear_accum=True)  # the line" in message


def test_use_outside_the_kernel_is_an_error_at_its_line():
    @T.prim_func
    def outside(A: T.Tensor((128,), "float32")):
        S = T.alloc_global((128,), "float32")
        S[0] = 1.0  # the line
        with T.Kernel(1, threads=128):
            T.copy(A, S)

    message = compile_error(outside)
    assert "outside `with T.Kernel(...)`" in message and "S[0] = 1.0  # the line" in message

    @T.prim_func
    def after(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.fill(A, 0)
        S = T.alloc_global((128,), "float32")  # noqa: F841

    assert "T.alloc_global after the last T.Kernel block" in compile_error(after)


def test_a_size_no_tensor_carries_is_an_error_at_the_declaration():
    N = T.dynamic("N")

    @T.prim_func
    def lonely(A: T.Tensor((128,), "float32")):
        S = T.alloc_global((N,), "float32")
        with T.Kernel(1, threads=128):
            T.copy(A, S[0:128])

    message = compile_error(lonely)
    assert "the T.dynamic size 'N' is a dimension of no tensor parameter" in message
    assert 'S = T.alloc_global((N,), "float32")' in message


def test_scratch_is_no_tma_source():
    """Tensor maps are encoded for parameters only: a pipelined copy from scratch stays on
    cp.async, and the report says why."""

    @T.prim_func
    def piped(A: T.Tensor((256, 64), "float16"), B: T.Tensor((256, 64), "float16")):
        S = T.alloc_global((256, 64), "float16")
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((64, 64), "float16")
            T.copy(A, S)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(S[k * 64 : k * 64 + 64, :], tile)
                T.copy(tile, B[k * 64 : k * 64 + 64, :])

    kernel = tilers.compile(piped, target="cuda:sm_90a")
    assert kernel.cubin[:4] == ELF_MAGIC
    assert kernel.info["tensor_maps"] == []


def test_dry_run_launch_allocates_scratch_and_returns_the_output():
    torch = pytest.importorskip("torch")
    kernel = tilers.compile(staged, out_idx=[1], target="cuda:sm_90a")
    kernel._prepare(dry_run=True)
    assert kernel(torch.zeros(33, 64)).shape == (33, 64)
    assert kernel(torch.zeros(0, 64)).shape == (0, 64)  # no blocks: nothing allocated
