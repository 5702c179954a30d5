"""A persistent warp-specialized walk over tiles whose pipelined loops differ in trip count
along bx (a causal mask, a window, a block-triangular product): plan_warp_roles evaluates
the trip count of every bx at compile time and, where it differs, the blocks walk the tiles
in pairs of about equal work (bx = x with bx = gx - 1 - x), the producer and the consumers
carrying the ring's position from tile to tile as a running sum. The CPU model runs every
pass with a few blocks walking several pairs (odd tile counts leave the last pair one
tile); kernels whose trip count needs run-time values stay one tile per block."""

import os
import sys

import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402


def block_triangular(gx, gy, bm=64, bn=64, bk=64, stages=2):
    """C[tile] += A[bx rows, key tiles 0..bx] @ B[those rows, by cols]: row block bx visits
    ceildiv((bx + 1) * bm, bk) k-tiles. C holds twice the tiles: a tile walked twice, or one
    past the grid, changes the answer."""

    @T.prim_func
    def f(A: T.Tensor((gx * bm, gx * bm), "float16"), B: T.Tensor((gx * bm, gy * bn), "float16"),
          C: T.Tensor((2 * gx * gy, bm, bn), "float32")):
        with T.Kernel(gx, gy, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv((bx + 1) * bm, bk), num_stages=stages):
                T.copy(A[bx * bm:(bx + 1) * bm, k * bk:(k + 1) * bk], A_s)
                T.copy(B[k * bk:(k + 1) * bk, by * bn:(by + 1) * bn], B_s)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(bm, bn):
                C[by * gx + bx, i, j] = C[by * gx + bx, i, j] + acc[i, j]

    return f


def walk_line(k):
    (line,) = [x for x in k.report().splitlines() if "warp-specialized" in x]
    return line


@pytest.mark.parametrize("gx,gy,bk,stages", [(3, 3, 64, 2), (4, 2, 64, 2), (5, 1, 32, 3), (1, 3, 64, 2)], ids=str)
def test_block_triangular_walks_pairs(gx, gy, bk, stages):
    f = block_triangular(gx, gy, bk=bk, stages=stages)
    k = tilers.compile(f, target="sm_90a")
    line = walk_line(k)
    if gx > 1:
        lo, hi = -(-64 // bk), -(-gx * 64 // bk)
        assert f"trip counts differ along bx ({lo} to {hi} k-tiles)" in line, line
        assert f"walk {(gx * gy + 1) // 2} pairs of tiles" in line, line
    else:
        # one tile along bx: every tile's count is the same, the plain walk
        assert "persistent: min(" in line and "pairs" not in line, line
    result = tilers.testing.check_passes(f, arch="sm_90a", blocks="all")
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("variant", [
    dict(n=200, causal=True),
    dict(n=130, causal=True),  # 3 query tiles a head: 9 tiles, the last pair one
    dict(n=200, causal=False, window=(50, 10)),
    dict(n=100, causal=True, seq_len_kv=230),  # bottom-right: the first rows see 131 keys
], ids=str)
@pytest.mark.parametrize("o_direct", [False, True])
def test_causal_attention_is_persistent(variant, o_direct):
    v = dict(variant)
    n, causal = v.pop("n"), v.pop("causal")
    f = fa.flash_attention(1, 3, n, 64, causal, block_M=64, block_N=32, num_stages=2, threads=128, overlap=True,
                           o_direct=o_direct, **v)
    k = tilers.compile(f, out_idx=[3], target="sm_90a")
    assert "trip counts differ along bx" in walk_line(k), k.report()
    result = tilers.testing.check_passes(f, arch="sm_90a", blocks="all")
    assert result.ok, result.failure_message()


def test_the_cubin_builds():
    k = tilers.compile(block_triangular(7, 3), target="cuda:sm_90a")
    assert k.cubin[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    assert "ring_c" in src and "ring_p" in src


def test_run_time_trip_counts_stay_one_tile_per_block():
    # the trip count reads a scalar parameter: not known when the kernel is compiled
    @T.prim_func
    def f(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 64), "float16"),
          C: T.Tensor((256, 64), "float32"), limit: T.int32):
        with T.Kernel(4, threads=128) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.min(bx + 1, limit), num_stages=2):
                T.copy(A[bx * 64:(bx + 1) * 64, k * 64:(k + 1) * 64], A_s)
                T.copy(B[k * 64:(k + 1) * 64, :], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[bx * 64:(bx + 1) * 64, :])

    k = tilers.compile(f, target="sm_90a")
    assert "not persistent: the pipelined loop's trip count depends on the block and on values known only at run time" \
        in walk_line(k), k.report()
    result = tilers.testing.check_passes(f, arch="sm_90a", blocks="all")
    assert result.ok, result.failure_message()


def test_ping_pong_needs_equal_trip_counts():
    f = block_triangular(4, 2)
    k = tilers.compile(f, target="sm_90a", persistent="pingpong")
    assert "ping-pong slots take alternate tiles of equal work" in walk_line(k), k.report()
