"""Several T.Kernel blocks in one prim_func on the CPU: each call runs them in order on the
same arguments (TileLang's split-then-combine), on the interpreter against numpy, through
every pass, through NVRTC, in KernelInfo and the report, in every @tilers.jit style, and
their misuse."""

import json

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing
from tilers.errors import TileError

ELF_MAGIC = b"\x7fELF"


def split_sum(M, K, splits=4, block_M=32, dtype="float32"):
    """Row sums in two kernels: a grid of (row tiles x splits) writes one partial sum per
    split into scratch; a second kernel, of another grid and thread count, adds them."""
    chunk = K // splits

    @T.prim_func
    def split_sum(A: T.Tensor((M, K), dtype), Out: T.Tensor((M,), "float32")):
        partial = T.alloc_global((splits, M), "float32")
        with T.Kernel(T.ceildiv(M, block_M), splits, threads=128) as (bx, bs):
            tile = T.alloc_fragment((block_M, chunk), "float32")
            part = T.alloc_fragment((block_M,), "float32")
            T.copy(A[bx * block_M, bs * chunk], tile)
            T.reduce_sum(tile, part, dim=1)
            T.copy(part, partial[bs, bx * block_M])
        with T.Kernel(T.ceildiv(M, 64), threads=64) as bx:
            acc = T.alloc_fragment((64,), "float32")
            T.clear(acc)
            for s in T.serial(splits):
                for i in T.Parallel(64):
                    acc[i] += partial[s, bx * 64 + i]
            T.copy(acc, Out[bx * 64])

    return split_sum


def gemm_then_scale(M, N, K, block=64):
    """A tensor-core GEMM writing its tiles to an output, then a kernel that reads that
    output back and writes a row-scaled copy to a second output (both out_idx)."""

    @T.prim_func
    def gemm_then_scale(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        scale: T.Tensor((M,), "float32"),
        C: T.Tensor((M, N), "float32"),
        D: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
            a_s = T.alloc_shared((block, 32), "float16")
            b_s = T.alloc_shared((32, block), "float16")
            acc = T.alloc_fragment((block, block), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * block, k * 32], a_s)
                T.copy(B[k * 32, bx * block], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, C[by * block, bx * block])
        with T.Kernel(M, threads=32) as row:
            for j in T.serial(T.ceildiv(N, 32)):
                for i in T.Parallel(32):
                    if j * 32 + i < N:
                        D[row, j * 32 + i] = C[row, j * 32 + i] * scale[row]

    return gemm_then_scale


M_DYN = T.dynamic("M")


@T.prim_func
def dynamic_reverse(A: T.Tensor((M_DYN, 64), "float32"), B: T.Tensor((M_DYN, 64), "float32")):
    """Kernel 0 copies A into a scratch of symbolic shape; kernel 1 writes the rows of the
    scratch to B in reverse order (it reads rows other blocks wrote: only the order of the
    kernels makes that right)."""
    S = T.alloc_global((M_DYN, 64), "float32")
    with T.Kernel(T.ceildiv(M_DYN, 32), threads=128) as bx:
        T.copy(A[bx * 32 : bx * 32 + 32, :], S[bx * 32 : bx * 32 + 32, :])
    with T.Kernel(M_DYN, threads=64) as row:
        for j in T.Parallel(64):
            B[row, j] = S[M_DYN - 1 - row, j] + 1.0


def rows_sum(A):
    return A.astype(np.float64).sum(axis=1)


def scale_then_gemm(M, N, K, block=128, block_K=64):
    """Kernel 0 writes 2*A to an output; kernel 1, a pipelined GEMM whose loads TMA can
    carry on sm_90a (tensor maps encoded for a later kernel of the call), reads it."""

    @T.prim_func
    def scale_then_gemm(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((N, K), "float16"),
        A2: T.Tensor((M, K), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(M, threads=128) as row:
            for j in T.serial(T.ceildiv(K, 128)):
                for i in T.Parallel(128):
                    if j * 128 + i < K:
                        A2[row, j * 128 + i] = A[row, j * 128 + i] * 2.0
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=256) as (bx, by):
            a_s = T.alloc_shared((block, block_K), "float16")
            b_s = T.alloc_shared((block, block_K), "float16")
            acc = T.alloc_fragment((block, block), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A2[by * block, k * block_K], a_s)
                T.copy(B[bx * block, k * block_K], b_s)
                T.gemm(a_s, b_s, acc, transpose_B=True)
            T.copy(acc, C[by * block, bx * block])

    return scale_then_gemm


# --- meaning: the interpreter runs the kernels in order --------------------------------


@pytest.mark.parametrize("shape", [(100, 256), (1, 64), (64, 64), (33, 128)])
def test_split_then_combine_matches_numpy(shape):
    M, K = shape
    kernel = tilers.compile(split_sum(M, K), out_idx=[1], target="interp")
    A = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(kernel(A), rows_sum(A), rtol=1e-5, atol=1e-4)


def test_a_later_kernel_reads_what_an_earlier_one_wrote_to_an_output():
    M, N, K = 70, 96, 80
    kernel = tilers.compile(gemm_then_scale(M, N, K), out_idx=[3, 4], target="interp")
    rng = np.random.default_rng(1)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    scale = rng.standard_normal(M).astype(np.float32)
    C, D = kernel(A, B, scale)
    want = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(C, want, rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(D, want * scale[:, None], rtol=1e-3, atol=1e-2)


def test_symbolic_sizes_and_scratch_are_shared_by_the_kernels():
    kernel = tilers.compile(dynamic_reverse, out_idx=[1], target="interp")
    for m in (1, 33, 100):
        A = np.random.default_rng(m).random((m, 64)).astype(np.float32)
        np.testing.assert_array_equal(kernel(A), A[::-1] + 1)


def test_every_pass_agrees_for_each_kernel():
    for arch in ("sm_80", "sm_90a"):
        for func, blocks in ((split_sum(100, 256), "all"), (gemm_then_scale(70, 96, 80), "edges"),
                             (dynamic_reverse, "edges")):
            result = testing.check_passes(func, arch=arch, blocks=blocks)
            result.assert_ok()
            status = {stage.pass_name: stage.status for stage in result.stages}
            # each kernel's lowered code ran on the warp model
            assert status["kernel0/lower_tile_ops"] == status["kernel1/lower_tile_ops"] == "ok"


# --- what the compiler makes of it -------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_one_source_with_a_function_per_kernel_compiles_with_nvrtc(arch):
    kernel = tilers.compile(gemm_then_scale(70, 96, 80), out_idx=[3, 4], target=f"cuda:{arch}")
    source = kernel.get_kernel_source()
    assert source.count('extern "C" __global__') == 2
    assert "gemm_then_scale_kernel(" in source and "gemm_then_scale_kernel_1(" in source
    assert source.index("gemm_then_scale_kernel(") < source.index("gemm_then_scale_kernel_1(")
    assert source.count(") tl_half {") == 1  # one prelude
    assert "(2 kernels, launched in this order)" in source.splitlines()[0]
    cubin = kernel.cubin
    assert cubin[:4] == ELF_MAGIC
    assert b"gemm_then_scale_kernel_1" in cubin
    # the same program compiles to the same bytes
    again = tilers.compile(gemm_then_scale(70, 96, 80), out_idx=[3, 4], target=f"cuda:{arch}")
    assert again.source == source
    for func in (split_sum(100, 256), dynamic_reverse):
        assert tilers.compile(func, out_idx=[1], target=f"cuda:{arch}").cubin[:4] == ELF_MAGIC


def test_kernel_info_lists_each_kernel_after_the_first():
    kernel = tilers.compile(split_sum(100, 256), out_idx=[1], target="cuda:sm_80")
    info = kernel.info
    assert info["entry"] == "split_sum_kernel" and info["block"] == [128, 1, 1]
    assert info["grid"] == [{"const": 4}, {"const": 4}, {"const": 1}]
    (second,) = info["then"]
    assert second["entry"] == "split_sum_kernel_1" and second["block"] == [64, 1, 1]
    assert second["grid"] == [{"const": 2}, {"const": 1}, {"const": 1}]
    assert second["params"] == info["params"] and second["scratch"] == info["scratch"]
    assert "then" not in second
    # Out is written by the second kernel only: still an output of the call
    assert [p["written"] for p in info["params"]] == [False, True]
    assert [launch["entry"] for launch in kernel.launches] == ["split_sum_kernel", "split_sum_kernel_1"]
    # the interpreter's KernelInfo has the same shape
    interp = tilers.compile(split_sum(100, 256), out_idx=[1], target="interp").info
    assert len(interp["then"]) == 1 and interp["params"] == info["params"]
    # one kernel: no "then"
    @T.prim_func
    def plain(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.fill(A, 0)

    assert "then" not in tilers.compile(plain, target="cuda:sm_80").info


def test_report_and_layouts_show_each_kernel():
    kernel = tilers.compile(split_sum(100, 256), out_idx=[1], target="cuda:sm_80")
    report = kernel.report()
    assert "split_sum for sm_80: 2 kernels, launched in this order by every call" in report
    assert "kernel 0 (split_sum_kernel): 128 threads per block" in report
    assert "kernel 1 (split_sum_kernel_1): 64 threads per block" in report
    assert report.index("tile:") < report.index("kernel 1") < report.index("acc:")
    assert "partial: float32[4, 100], 1600 bytes" in report
    layouts = kernel.layouts()
    assert "fragment tile" in layouts and "fragment acc" in layouts
    names = kernel.ir()
    assert "kernel0/lower_tile_ops" in names and "kernel1/lower_tile_ops" in names
    assert "split_sum_kernel" not in kernel.ir("after:kernel1/lower_tile_ops")  # IR, not CUDA
    assert "acc" in kernel.ir("after:kernel1/lower_tile_ops")


def test_program_json_names_the_owner_of_each_kernels_buffers():
    program = json.loads(testing._program_json(split_sum(100, 256), {}))
    assert "kernel" not in program and len(program["kernels"]) == 2
    owners = {b["name"]: b.get("kernel") for b in program["buffers"]}
    assert owners == {"A": None, "Out": None, "partial": None, "tile": 0, "part": 0, "acc": 1}
    assert [v.get("kernel") for v in program["vars"] if v["kind"] == "block_idx"] == [0, 0, 1]


# --- every @tilers.jit style ------------------------------------------------------------


def test_factory_style():
    @tilers.jit(out_idx=[1])
    def factory(N, block_N=128):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            C = T.alloc_global((N,), "float32")
            with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
                for i in T.Parallel(block_N):
                    if bx * block_N + i < N:
                        C[bx * block_N + i] = A[bx * block_N + i] * 2.0
            with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
                for i in T.Parallel(64):
                    if bx * 64 + i < N:
                        B[bx * 64 + i] = C[N - 1 - (bx * 64 + i)]

        return main

    a = np.random.default_rng(0).random(1000).astype(np.float32)
    np.testing.assert_array_equal(factory(1000)(a), (a * 2)[::-1])


def test_eager_style_with_const_empty_and_dynamic():
    @tilers.jit
    def twice_reversed(A, block_N=128, dtype=T.float32):
        N = T.const("N")
        A: T.Tensor[[N], dtype]
        B = T.empty([N], dtype=dtype)
        C = T.alloc_global([N], dtype)
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            for i in T.Parallel(block_N):
                if bx * block_N + i < N:
                    C[bx * block_N + i] = A[bx * block_N + i] * 2.0
        with T.Kernel(N, threads=32) as i:
            B[i] = C[N - 1 - i]
        return B

    for n in (1000, 37):
        a = np.random.default_rng(n).random(n).astype(np.float32)
        np.testing.assert_array_equal(twice_reversed(a), (a * 2)[::-1])


# --- misuse: errors at the user's line ------------------------------------------------


def compile_error(func) -> str:
    with pytest.raises(TileError) as info:
        tilers.compile(func, target="cuda:sm_90a")
    message = str(info.value)
    assert "tilers/" not in message.replace("tilers/tests", "")  # never tilers internals
    return message


def test_a_kernel_inside_a_kernel_is_an_error_at_its_line():
    @T.prim_func
    def nested(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            with T.Kernel(1, threads=128):  # the line
                T.fill(A, 0)

    message = compile_error(nested)
    assert "a T.Kernel inside another T.Kernel" in message
    assert "with T.Kernel(1, threads=128):  # the line" in message


def test_a_statement_between_the_kernels_is_an_error_at_its_line():
    @T.prim_func
    def between(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.fill(A, 0)
        A[0] = 1.0  # the line
        with T.Kernel(1, threads=128):
            T.fill(A, 2)

    message = compile_error(between)
    assert "outside `with T.Kernel(...)`" in message and "A[0] = 1.0  # the line" in message


def test_a_tile_of_another_kernel_is_an_error_at_the_line_using_it():
    @T.prim_func
    def shared_tile(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            tile = T.alloc_fragment((128,), "float32")
            T.copy(A, tile)
        with T.Kernel(1, threads=128):
            T.copy(tile, B)  # the line

    message = compile_error(shared_tile)
    assert "'tile' belongs to T.Kernel block number 1 of this prim_func, but is used in the " \
        "T.Kernel block number 2" in message
    assert "T.copy(tile, B)  # the line" in message
    assert "T.alloc_global" in message  # what to do instead


def test_a_block_index_of_another_kernel_is_an_error_at_the_line_using_it():
    @T.prim_func
    def stale_index(A: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            T.fill(A[bx * 128 : bx * 128 + 128], 0)
        with T.Kernel(2, threads=128) as by:  # noqa: F841
            for i in T.Parallel(128):
                A[bx * 128 + i] = 1.0  # the line

    message = compile_error(stale_index)
    assert "'bx' is a variable of T.Kernel block number 1, used in block number 2" in message
    assert "A[bx * 128 + i] = 1.0  # the line" in message


def test_scratch_after_the_last_kernel_is_an_error_at_its_line():
    @T.prim_func
    def late(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.fill(A, 0)
        S = T.alloc_global((128,), "float32")  # noqa: F841  # the line

    message = compile_error(late)
    assert "T.alloc_global after the last T.Kernel block: no kernel uses it" in message
    assert "S = T.alloc_global((128,), \"float32\")" in message

    @T.prim_func
    def between(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.fill(A, 1)
        S = T.alloc_global((128,), "float32")  # declared between the kernels: fine
        with T.Kernel(1, threads=128):
            T.copy(A, S)
            T.copy(S, B)

    out = tilers.compile(between, out_idx=[1], target="interp")(np.zeros(128, np.float32))
    np.testing.assert_array_equal(out, np.ones(128))


def test_dry_run_launches_every_kernel():
    torch = pytest.importorskip("torch")
    kernel = tilers.compile(dynamic_reverse, out_idx=[1], target="cuda:sm_90a")
    kernel._prepare(dry_run=True)
    assert kernel._load_function(0) == ([0, 0], 0)
    assert kernel(torch.zeros(33, 64)).shape == (33, 64)
    assert kernel(torch.zeros(0, 64)).shape == (0, 64)  # no blocks: nothing launched
