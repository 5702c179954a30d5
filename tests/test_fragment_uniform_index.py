"""Fragments indexed by a value the same for every thread (a T.serial variable, a constant,
a block index) beside T.Parallel variables, as TileLang's flash-decoding combine indexes
`lse_local[k, j]`: that dimension is held whole in each thread's registers — on the
interpreter against numpy, through every pass, through NVRTC, and the mistake that stays an
error (a gemm accumulator, whose rows are spread over the threads, indexed by a serial row)."""

import re

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing
from tilers.errors import TileError

ELF_MAGIC = b"\x7fELF"


def combine(heads=4, batch=2, num_split=4, dim=128):
    """The split-K combine of TileLang's example_gqa_decode.py (the import renamed): the
    log-sum-exp of each split read back per split by a T.serial variable."""

    @T.prim_func
    def combine(glse: T.Tensor([batch, heads, num_split], "float16"),
                Output_partial: T.Tensor([batch, heads, num_split, dim], "float16"),
                Output: T.Tensor([batch, heads, dim], "float16")):
        with T.Kernel(heads, batch, threads=128) as (by, bz):
            po_local = T.alloc_fragment([dim], "float16")
            o_accum_local = T.alloc_fragment([dim], "float32")
            lse_local = T.alloc_fragment([num_split, 128], "float16")
            lse_logsum_local = T.alloc_fragment([128], "float32")
            lse_max_local = T.alloc_fragment([128], "float32")
            scale_local = T.alloc_fragment([128], "float32")

            T.clear(lse_logsum_local)
            T.clear(o_accum_local)
            for k, j in T.Parallel(num_split, 128):
                lse_local[k, j] = glse[bz, by, k]
            T.reduce_max(lse_local, lse_max_local, dim=0, clear=True)
            for k in T.serial(num_split):
                for j in T.Parallel(128):
                    lse_logsum_local[j] += T.exp2(lse_local[k, j] - lse_max_local[j])
            for j in T.Parallel(128):
                lse_logsum_local[j] = T.log2(lse_logsum_local[j]) + lse_max_local[j]
            for k in T.serial(num_split):
                for i in T.Parallel(dim):
                    po_local[i] = Output_partial[bz, by, k, i]
                for j in T.Parallel(128):
                    scale_local[j] = T.exp2(lse_local[k, j] - lse_logsum_local[j])
                for i in T.Parallel(dim):
                    o_accum_local[i] += po_local[i] * scale_local[i]
            for i in T.Parallel(dim):
                Output[bz, by, i] = o_accum_local[i]

    return combine


def combine_reference(glse, partial):
    lse = glse.astype(np.float64)
    top = lse.max(axis=2, keepdims=True)
    logsum = np.log2(np.exp2(lse - top).sum(axis=2, keepdims=True)) + top
    scale = np.exp2(lse - logsum)  # (batch, heads, split)
    return (partial.astype(np.float64) * scale[..., None]).sum(axis=2)


def combine_inputs(seed, heads=4, batch=2, num_split=4, dim=128):
    rng = np.random.default_rng(seed)
    glse = (rng.standard_normal((batch, heads, num_split)) * 3).astype(np.float16)
    partial = rng.standard_normal((batch, heads, num_split, dim)).astype(np.float16)
    return glse, partial


def staged(n=6, width=64):
    """A fragment filled per row by one serial loop (`rows[k, j] = ...`), read back by a
    second serial loop, by constant rows and by a 2-D T.Parallel loop — one layout for
    every access."""

    @T.prim_func
    def staged(A: T.Tensor((n, width), "float32"), Out: T.Tensor((2 + n, width), "float32")):
        with T.Kernel(1, threads=64):
            rows = T.alloc_fragment((n, width), "float32")
            total = T.alloc_fragment((width,), "float32")
            edge = T.alloc_fragment((width,), "float32")
            for k in T.serial(n):
                for j in T.Parallel(width):
                    rows[k, j] = A[k, j] * (k + 1)
            T.clear(total)
            for k in T.serial(n):
                for j in T.Parallel(width):
                    total[j] += rows[k, j]
            for j in T.Parallel(width):
                edge[j] = rows[0, j] - rows[n - 1, j]
            for j in T.Parallel(width):
                Out[0, j] = total[j]
                Out[1, j] = edge[j]
            for i, j in T.Parallel(n, width):
                Out[2 + i, j] = rows[i, j]

    return staged


def staged_reference(A):
    n = A.shape[0]
    rows = A.astype(np.float64) * np.arange(1, n + 1)[:, None]
    return np.concatenate([np.stack([rows.sum(axis=0), rows[0] - rows[n - 1]]), rows])


def picked(blocks=4, width=64):
    """A block index as the uniform index: each block reads its own row of a fragment
    that a 2-D T.Parallel loop filled whole."""

    @T.prim_func
    def picked(A: T.Tensor((blocks, width), "float32"), Out: T.Tensor((blocks, width), "float32")):
        with T.Kernel(blocks, threads=128) as bx:
            table = T.alloc_fragment((blocks, width), "float32")
            for i, j in T.Parallel(blocks, width):
                table[i, j] = A[i, j] + i
            for j in T.Parallel(width):
                Out[bx, j] = table[bx, j] * 2.0

    return picked


def doubled(n=4, width=128):
    """`rows` is filled by a 2-D T.Parallel loop from `x`, a fragment of the same rank used
    first: laid out blocked, `x` would spread the serial dimension over the threads, so the
    fragment indexed by the serial variable is laid out first and `x` follows it."""

    @T.prim_func
    def doubled(A: T.Tensor((n, width), "float32"), Out: T.Tensor((width,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((n, width), "float32")
            rows = T.alloc_fragment((n, width), "float32")
            acc = T.alloc_fragment((width,), "float32")
            T.copy(A, x)
            for k, j in T.Parallel(n, width):
                rows[k, j] = x[k, j] * 2.0
            T.clear(acc)
            for k in T.serial(n):
                for j in T.Parallel(width):
                    acc[j] += rows[k, j]
            T.copy(acc, Out)

    return doubled


@pytest.mark.parametrize("seed", [0, 1])
def test_combine_matches_numpy(seed):
    kernel = tilers.compile(combine(), out_idx=[2], target="interp")
    glse, partial = combine_inputs(seed)
    np.testing.assert_allclose(kernel(glse, partial), combine_reference(glse, partial), rtol=1e-2, atol=1e-2)


def test_a_fragment_filled_by_one_serial_loop_and_read_by_others_matches_numpy():
    A = np.random.default_rng(3).standard_normal((6, 64)).astype(np.float32)
    out = tilers.compile(staged(), out_idx=[1], target="interp")(A)
    np.testing.assert_allclose(out, staged_reference(A), rtol=1e-5, atol=1e-5)


def test_a_block_index_as_the_row_matches_numpy():
    A = np.random.default_rng(4).standard_normal((4, 64)).astype(np.float32)
    out = tilers.compile(picked(), out_idx=[1], target="interp")(A)
    np.testing.assert_allclose(out, (A + np.arange(4)[:, None]) * 2.0, rtol=1e-6)


def test_a_fragment_of_the_same_rank_used_first_follows_the_serially_indexed_one():
    A = np.random.default_rng(7).standard_normal((4, 128)).astype(np.float32)
    out = tilers.compile(doubled(), out_idx=[1], target="interp")(A)
    np.testing.assert_allclose(out, 2.0 * A.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)
    layouts = tilers.compile(doubled(), out_idx=[1], target="cuda:sm_90a").layouts()
    for name in ("x", "rows"):
        assert "dim0 = 4 registers" in layouts.split(f"fragment {name}:")[1].split("\n")[1], layouts


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("factory", [combine, staged, picked, doubled])
def test_every_pass_agrees_and_nvrtc_compiles(arch, factory):
    testing.check_passes(factory(), arch=arch, blocks="all").assert_ok()
    kernel = tilers.compile(factory(), out_idx=[-1], target=f"cuda:{arch}")
    assert kernel.cubin[:4] == ELF_MAGIC


def test_the_serial_dimension_is_in_registers_and_indexed_by_the_serial_variable():
    kernel = tilers.compile(staged(), out_idx=[1], target="cuda:sm_90a")
    layout = kernel.layouts().split("fragment rows")[1].split("\n")[1]
    # the serial dimension: 6 registers in every thread; the parallel one over the threads
    assert "dim0 = 6 registers" in layout, layout
    assert "threads" in layout.split("dim1 = ")[1], layout
    # a serial variable gives a runtime slot (row k: registers 4k..4k+3), a constant row a
    # constant one (row 5: registers 20..23)
    source = kernel.source
    assert re.search(r"rows\[\(\(k \* 4\) \+ e\)\] = ", source), source
    assert re.search(r"rows\[\(e_\d+ \+ 20\)\]", source), source


def test_a_gemm_accumulator_indexed_by_a_serial_row_reads_its_shared_copy():
    """A gemm spreads its accumulator's rows over the threads: a serial variable in the row
    dimension needs elements other threads hold, so the loop reads the accumulator's copy in
    shared memory (made before each such loop; the report says so)."""

    @T.prim_func
    def rows_of(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
                C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            a_s = T.alloc_shared((64, 64), "float16")
            b_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.gemm(a_s, b_s, acc, clear_accum=True)
            for k in T.serial(64):
                for j in T.Parallel(64):
                    C[k, j] = acc[k, j]  # the line

    for arch in ("sm_80", "sm_90a"):
        testing.check_passes(rows_of, arch=arch, check=True)
        k = tilers.compile(rows_of, target=f"cuda:{arch}")
        assert "reads 'acc' laid out for other threads" in k.report()


def row_at_a_time(num_split=4, block_M=64):
    """TileLang's mha_inference combine: `T.copy(lse_local[k, :], lse_local_split)` at a
    T.Pipelined k — a part of a fragment at a moving position, copied row by row."""

    @T.prim_func
    def rows(L: T.Tensor([num_split, block_M], "float32"), S: T.Tensor([block_M], "float32")):
        with T.Kernel(1, threads=128) as bx:
            lse_local = T.alloc_fragment([num_split, block_M], "float32")
            lse_split = T.alloc_fragment([block_M], "float32")
            total = T.alloc_fragment([block_M], "float32")
            T.copy(L, lse_local)
            T.clear(total)
            for k in T.Pipelined(num_split, num_stages=1):
                T.copy(lse_local[k, :], lse_split)
                for i in T.Parallel(block_M):
                    total[i] += lse_split[i] * (k + 1)
            T.copy(total, S)

    return rows


def test_a_fragment_row_at_a_moving_position_is_copied_element_by_element():
    f = row_at_a_time()
    rng = np.random.default_rng(3)
    L = rng.standard_normal((4, 64)).astype(np.float32)
    S = np.zeros(64, np.float32)
    tilers.compile(f, target="interp")(L, S)
    np.testing.assert_allclose(S, (L * np.arange(1, 5)[:, None]).sum(0), rtol=1e-5)
    for arch in ("sm_90a", "sm_80"):
        result = testing.check_passes(f, arch=arch, blocks="all")
        assert result.ok, result.failure_message()
    assert tilers.compile(f, target="cuda:sm_90a").cubin[:4] == ELF_MAGIC


def test_a_moving_fragment_part_copied_from_global_memory_stays_an_error():
    @T.prim_func
    def bad(L: T.Tensor([4, 64], "float32"), S: T.Tensor([64], "float32")):
        with T.Kernel(1, threads=128) as bx:
            frag = T.alloc_fragment([4, 64], "float32")
            T.clear(frag)
            for k in T.serial(4):
                T.copy(L[k, :], frag[k, :])
            T.copy(frag[3, :], S)

    with pytest.raises(TileError, match="at a position that is not fixed"):
        tilers.compile(bad, target="cuda:sm_90a")
