"""Fragments read or written by scalar code (outside T.Parallel, which every thread runs):
every thread holds all of such a fragment, as TileLang lays out its "floating" fragments —
on the interpreter against numpy, through every pass, through NVRTC, and the mistake that
stays an error (a gemm accumulator indexed by scalar code)."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing
from tilers.errors import TileError

ELF_MAGIC = b"\x7fELF"


def masked_rows(M=128, N=64, nblk=8, bm=16):
    """Block-sparse accumulation: a mask copied into a fragment and tested per block by an
    `if` (TileLang's block_sparse_attn), and a one-element fragment written by scalar code
    and read inside a T.Parallel loop with a constant index (mamba's chunk_state)."""

    @T.prim_func
    def masked_rows(A: T.Tensor((M, N), "float32"), Mask: T.Tensor((4, nblk), "int8"),
                    last: T.Tensor((4,), "float32"), Out: T.Tensor((4, bm, N), "float32")):
        with T.Kernel(4, threads=128) as bx:
            mask = T.alloc_fragment((nblk,), "int8")
            acc = T.alloc_fragment((bm, N), "float32")
            tile = T.alloc_fragment((bm, N), "float32")
            scale = T.alloc_fragment((1,), "float32")
            T.copy(Mask[bx, :], mask)
            scale[0] = last[bx] * 2.0
            T.clear(acc)
            for k in T.serial(nblk):
                if mask[k] != 0:
                    T.copy(A[k * bm, 0], tile)
                    for i, j in T.Parallel(bm, N):
                        acc[i, j] += tile[i, j] * scale[0]
            T.copy(acc, Out[bx, :, :])

    return masked_rows


def reference(A, Mask, last, bm=16):
    out = np.zeros((4, bm, A.shape[1]))
    for b in range(4):
        for k in range(Mask.shape[1]):
            if Mask[b, k]:
                out[b] += A[k * bm:(k + 1) * bm].astype(np.float64) * (last[b] * 2.0)
    return out


def inputs(seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((128, 64)).astype(np.float32)
    Mask = (rng.random((4, 8)) > 0.5).astype(np.int8)
    Mask[0] = 0  # a block with nothing to add
    last = rng.standard_normal(4).astype(np.float32)
    return A, Mask, last


@pytest.mark.parametrize("seed", [0, 1])
def test_scalar_reads_and_writes_match_numpy(seed):
    kernel = tilers.compile(masked_rows(), out_idx=[3], target="interp")
    A, Mask, last = inputs(seed)
    np.testing.assert_allclose(kernel(A, Mask, last), reference(A, Mask, last), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_pass_agrees_and_nvrtc_compiles(arch):
    testing.check_passes(masked_rows(), arch=arch, blocks="all").assert_ok()
    kernel = tilers.compile(masked_rows(), out_idx=[3], target=f"cuda:{arch}")
    assert kernel.cubin[:4] == ELF_MAGIC
    # every thread holds the mask and the scale whole, and tests its own copy
    layouts = kernel.layouts()
    assert "replicated over 128 threads" in layouts.split("fragment mask")[1].split("\n")[1]
    assert "if ((mask[k] != 0))" in kernel.source


def test_a_loop_writing_a_whole_fragment_runs_every_iteration_on_every_thread():
    """Scalar code reads `w` on every thread, so the loop that writes it runs each
    iteration on every thread (its other fragments follow), and only the first replica
    writes memory."""

    @T.prim_func
    def picks(A: T.Tensor((128,), "float32"), B: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((128,), "float32")
            w = T.alloc_fragment((128,), "float32")
            T.copy(A, a)
            for i in T.Parallel(128):
                w[i] = a[i] * 2.0
            B[0] = w[5]
            B[1] = w[127] + w[0]

    A = np.arange(128, dtype=np.float32)
    out = tilers.compile(picks, out_idx=[1], target="interp")(A)
    np.testing.assert_array_equal(out, [10.0, 254.0])
    for arch in ("sm_80", "sm_90a"):
        testing.check_passes(picks, arch=arch).assert_ok()
        assert tilers.compile(picks, out_idx=[1], target=f"cuda:{arch}").cubin[:4] == ELF_MAGIC


def test_a_gemm_accumulator_indexed_by_scalar_code_stays_an_error():
    @T.prim_func
    def diagonal(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
                 C: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            a_s = T.alloc_shared((64, 64), "float16")
            b_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.gemm(a_s, b_s, acc, clear_accum=True)
            for k in T.serial(64):
                C[k] = acc[k, k]  # the line

    for arch in ("sm_80", "sm_90a"):
        with pytest.raises(TileError) as info:
            tilers.compile(diagonal, target=f"cuda:{arch}")
        message = str(info.value)
        assert "T.gemm spreads it over the threads" in message
        assert "C[k] = acc[k, k]  # the line" in message
