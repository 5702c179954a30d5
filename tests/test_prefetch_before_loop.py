"""A copy before a warp-specialized loop that the producer warpgroup issues too (an attention
kernel's Q tile): on the CPU warp model through every pass — a persistent walk of several
tiles per block (the tile's barrier changes phase per tile, the next tile's copy waits for
the consumers' release), one tile per block, ping-pong slots (a tile per slot), causal
trip counts — what the report says, when the copy stays with the consumers and why, and
NVRTC compiling the kernels for sm_90a."""

import os
import sys

import pytest
import tilers
import tilers.language as T
from tilers import testing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402

ONCE = "T.copy Q -> Q_shared: TMA by the producer warpgroup, once per tile"


def compiled(f, **options):
    return tilers.compile(f, out_idx=[3], target="cuda:sm_90a", **options)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("persistent", [True, False, "pingpong"])
def test_q_filled_by_the_producer_passes_every_pass(persistent, overlap):
    # 1 x 4 heads x 200 rows: 8 query tiles of 128 (16 of 64 for the ping-pong slots) over
    # the model's few persistent blocks, the last tile ragged
    block_M, threads = (64, 128) if persistent == "pingpong" else (128, 256)
    f = fa.flash_attention(1, 4, 200, 64, False, block_M, 64, 2, threads, overlap=overlap, o_direct=True)
    k = compiled(f, persistent=persistent)
    assert ONCE in k.report() and k.cubin[:4] == b"\x7fELF"
    testing.check_passes(f, arch="sm_90a", blocks="all", check=True, compile_options={"persistent": persistent})


@pytest.mark.parametrize("n", [1, 64, 65, 200])
def test_causal_and_ragged_lengths_with_q_from_the_producer(n):
    f = fa.flash_attention(1, 2, n, 64, True, 128, 64, 2, 256, overlap=True, o_direct=True, return_lse=True)
    assert ONCE in tilers.compile(f, out_idx=[3, 4], target="cuda:sm_90a").report()
    testing.check_passes(f, arch="sm_90a", blocks="all", check=True)


def test_q_stays_with_the_consumers_when_the_tiles_would_not_fit_apart():
    # d=128, three stages: Q, K and V fill 224 KB; the output's staging tile fits only over
    # Q's bytes, which a tile the producer fills ahead cannot share
    k = compiled(fa.flash_attention(2, 4, 1024, 128, False, 128, 128, 3, 256, overlap=True))
    report = k.report()
    assert ONCE not in report
    assert "T.copy Q -> Q_shared stays with the consumers, not the producer warpgroup" in report, report
    assert "vector loads [Q x8 (16 bytes)]" in report
    # stored from registers, it fits: Q by TMA, three stages
    k = compiled(fa.flash_attention(2, 4, 1024, 128, False, 128, 128, 3, 256, overlap=True, o_direct=True))
    assert ONCE in k.report() and "3 stages on full/empty mbarriers" in k.report()


def test_a_tile_read_after_the_loop_or_written_in_it_stays_with_the_consumers():
    @T.prim_func
    def rowscale(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 256), "float16"),
                 C: T.Tensor((256, 256), "float16"), D: T.Tensor((256, 64), "float16")):
        with T.Kernel(2, threads=128) as bx:
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((128, 64), "float32")
            T.copy(A[bx * 128, 0], A_s)
            T.clear(acc)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[bx * 128, 0])
            T.copy(A_s, D[bx * 128, 0])  # A_s read after the loop

    k = tilers.compile(rowscale, target="cuda:sm_90a")
    assert "T.copy A -> A_s: TMA by the producer" not in k.report()
    testing.check_passes(rowscale, arch="sm_90a", blocks="all", check=True)


def test_a_gemm_operand_loaded_once_before_the_loop():
    # C[bx] = sum over k of A_panel @ B_k: the panel is read by every iteration's gemm
    @T.prim_func
    def panel(A: T.Tensor((512, 64), "float16"), B: T.Tensor((640, 64), "float16"),
              C: T.Tensor((512, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((128, 64), "float32")
            T.copy(A[bx * 128, 0], A_s)
            T.clear(acc)
            for k in T.Pipelined(10, num_stages=3):
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=True)
            T.copy(acc, C[bx * 128, 0])

    k = tilers.compile(panel, target="cuda:sm_90a")
    assert "T.copy A -> A_s: TMA by the producer warpgroup, once per tile" in k.report()
    assert k.cubin[:4] == b"\x7fELF"
    for persistent in (True, False):
        testing.check_passes(panel, arch="sm_90a", blocks="all", check=True,
                             compile_options={"persistent": persistent})
