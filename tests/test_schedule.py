"""Manual pipeline schedules (`T.Pipelined(..., stage=, order=, group=)`, TileLang's
spelling) on the CPU: every pass of the scheduled kernels checked on the warp model (the
steady state's deferred wgmma waits and ring releases among them) at trip counts 0 to
num_stages + 1 and ragged sizes, the tile-level result against numpy, what the report says,
NVRTC for sm_90a and sm_80, determinism, and the schedules that must be refused — each at
the user's line."""

import os
import sys

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402
import kernels  # noqa: E402

# the chain's body: 0 copy K; 1 S = Q K^T; 2 mask and scale S; 3 P = S; 4 copy V; 5 O += P V.
# FlashAttention-3's order: step i issues S(i), then O += P(i-1) V(i-1), then P(i) from S(i)
OVERLAP = dict(stage=[-1, 0, 0, 0, -1, 1], order=[-1, 0, 2, 3, -1, 1])


def chain(M, N, K, D, block_M=128, block_N=64, stages=2, threads=256, dtype="float16", **schedule):
    """O = mask(Q K^T / 8) V over K/V tiles: attention without the softmax."""

    @T.prim_func
    def chained(Q: T.Tensor((M, K), dtype), Kt: T.Tensor((N, K), dtype), V: T.Tensor((N, D), dtype),
                O: T.Tensor((M, D), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            Q_s = T.alloc_shared((block_M, K), dtype)
            K_s = T.alloc_shared((block_N, K), dtype)
            V_s = T.alloc_shared((block_N, D), dtype)
            S = T.alloc_fragment((block_M, block_N), "float32")
            P = T.alloc_fragment((block_M, block_N), dtype)
            acc = T.alloc_fragment((block_M, D), "float32")
            T.copy(Q[bx * block_M, 0], Q_s)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(N, block_N), num_stages=stages, **schedule):
                T.copy(Kt[k * block_N, 0], K_s)
                T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_M, block_N):
                    S[i, j] = T.if_then_else(k * block_N + j < N, S[i, j] * 0.125, 0)
                T.copy(S, P)
                T.copy(V[k * block_N, 0], V_s)
                T.gemm(P, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
            T.copy(acc, O[bx * block_M, 0])

    return chained


def two_reads(M, N, K, stages, dtype="float16", **schedule):
    """Two gemms reading the same ring tile at stages 0 and 2 (independent accumulators):
    the ring holds three iterations at once."""

    @T.prim_func
    def twice(A: T.Tensor((N, M), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, K), dtype),
              D: T.Tensor((M, K), dtype)):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, M), dtype)
            B_s = T.alloc_shared((64, K), dtype)
            c = T.alloc_fragment((M, K), "float32")
            d = T.alloc_fragment((M, K), "float32")
            T.clear(c)
            T.clear(d)
            for k in T.Pipelined(T.ceildiv(N, 64), num_stages=stages, **schedule):
                T.copy(A[k * 64, 0], A_s)
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, c, transpose_A=True)
                T.gemm(A_s, B_s, d, transpose_A=True)
            T.copy(c, C[0, 0])
            T.copy(d, D[0, 0])

    return twice


SPREAD = dict(stage=[-1, -1, 0, 2], order=[-1, -1, 1, 0])


def tied(M, N, K, stages, tiles=6, **schedule):
    """Two gemms of one stage reading the same ring tile, beside register work of another
    stage, over several tiles (a persistent walk, whose producer refills a released stage
    with the next tile's data): the ring stage is released after the later of the two."""

    @T.prim_func
    def twice(A: T.Tensor((N, M), "float16"), B: T.Tensor((N, K * tiles), "float16"),
              C: T.Tensor((M, K * tiles), "float16"), D: T.Tensor((M, K * tiles), "float16")):
        with T.Kernel(tiles, threads=128) as bx:
            A_s = T.alloc_shared((64, M), "float16")
            B_s = T.alloc_shared((64, K), "float16")
            c = T.alloc_fragment((M, K), "float32")
            d = T.alloc_fragment((M, K), "float32")
            e = T.alloc_fragment((M, K), "float32")
            T.clear(c)
            T.clear(d)
            T.clear(e)
            for k in T.Pipelined(T.ceildiv(N, 64), num_stages=stages, **schedule):
                T.copy(A[k * 64, 0], A_s)
                T.copy(B[k * 64, bx * K], B_s)
                T.gemm(A_s, B_s, c, transpose_A=True)
                T.gemm(A_s, B_s, d, transpose_A=True)
                for i, j in T.Parallel(M, K):
                    e[i, j] = e[i, j] + 1.0
            for i, j in T.Parallel(M, K):
                d[i, j] = d[i, j] + e[i, j]
            T.copy(c, C[0, bx * K])
            T.copy(d, D[0, bx * K])

    return twice


def chain_numpy(q, k, v):
    s = (q.astype(np.float32) @ k.astype(np.float32).T) * 0.125
    p = s.astype(q.dtype).astype(np.float32)
    return p @ v.astype(np.float32)


def report_lines(kernel, what):
    return [line for line in kernel.report().splitlines() if what in line]


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("n", [64, 128, 192, 256, 200])
def test_every_pass_agrees_at_each_trip_count(n, stages):
    # trip counts 1 .. num_stages + 1 (and a ragged last tile)
    testing.check_passes(chain(256, n, 64, 64, stages=stages, **OVERLAP), arch="sm_90a", blocks="all",
                         check=True)


def test_a_dynamic_trip_count_zero_and_up_passes_every_pass():
    # the pass check draws a T.dynamic size at 0, 8, one tile and more
    f = chain(128, T.dynamic("N", multiple_of=8), 64, 64, **OVERLAP)
    testing.check_passes(f, arch="sm_90a", blocks="all", check=True)


@pytest.mark.parametrize("options", [{"persistent": False}, {"persistent": "pingpong"}, {"tma": False}])
def test_other_pipelines_keep_the_result(options):
    testing.check_passes(chain(512, 200, 64, 64, **OVERLAP), arch="sm_90a", check=True,
                         compile_options=options)


def test_bfloat16_chain_passes_every_pass():
    testing.check_passes(chain(128, 320, 64, 64, stages=3, dtype="bfloat16", **OVERLAP), arch="sm_90a",
                         check=True)


@pytest.mark.parametrize("n", [64, 128, 192, 256, 320])
def test_a_ring_tile_read_two_stages_apart_passes_every_pass(n):
    testing.check_passes(two_reads(64, n, 64, 3, **SPREAD), arch="sm_90a", check=True)
    testing.check_passes(two_reads(64, n, 64, 4, dtype="bfloat16", **SPREAD), arch="sm_90a", check=True)


@pytest.mark.parametrize("n", [64, 192, 320])
def test_tied_ring_readers_release_after_the_later(n):
    sched = dict(stage=[-1, -1, 1, 1, 0], order=[-1, -1, 1, 2, 0])
    testing.check_passes(tied(64, n, 64, 2, **sched), arch="sm_90a", blocks="all", check=True)


def test_a_split_accumulator_would_need_a_second_copy_and_is_refused():
    # S written at stage 0, read at stage 1 while the next iteration's gemm rewrites it
    sched = dict(stage=[-1, 0, 1, 1, -1, 2], order=[-1, 0, 2, 3, -1, 1])
    with pytest.raises(TileError, match="of the next iteration before .* both use 'S'"):
        tilers.compile(chain(128, 200, 64, 64, stages=3, **sched), target="cuda:sm_90a")


def test_sm80_runs_the_schedule_order_on_cp_async_and_says_so():
    f = chain(128, 200, 64, 64, **OVERLAP)
    testing.check_passes(f, arch="sm_80", check=True)
    k = tilers.compile(f, target="cuda:sm_80")
    assert report_lines(k, "honoured only in the warp-specialized (TMA) pipeline")


def test_the_tile_level_result_matches_numpy():
    rng = np.random.default_rng(0)
    q, kk, v = (rng.standard_normal(s).astype(np.float16) for s in ((128, 64), (200, 64), (200, 64)))
    k = tilers.compile(chain(128, 200, 64, 64, **OVERLAP), out_idx=[3], target="interp")
    out = np.asarray(k(q, kk, v)).astype(np.float32)
    assert np.abs(out - chain_numpy(q, kk, v)).max() < 5e-2


def test_the_report_and_the_source_show_the_overlap():
    k = tilers.compile(chain(256, 512, 64, 64, **OVERLAP), target="cuda:sm_90a")
    (line,) = report_lines(k, "step i runs")
    assert "(iteration i-1)" in line and "1 step(s) of prologue and of epilogue" in line
    # two consumer warpgroups, each on its own rows, on tiles of one trip count: they issue
    # their gemms freely (the turns measured slower there)
    assert report_lines(k, "issue their gemms without taking turns")
    src = k.get_kernel_source()
    assert "bar.sync 5, 256;" not in src and "bar.arrive 6, 256;" not in src
    assert "a block boundary before the wait" not in src
    # the steady state leaves O += P V in flight while S's group is retired
    assert "wgmma.wait_group.sync.aligned 1;" in src
    assert src == tilers.compile(chain(256, 512, 64, 64, **OVERLAP), target="cuda:sm_90a").get_kernel_source()


def test_the_scheduled_attention_frees_k_and_v_on_barriers_of_their_own():
    # K is free once S = Q K^T retired, V once P V did (FlashAttention-3's two pipelines): the
    # producer refills K a step before V; one barrier per stage held K until P V retired
    f = fa.flash_attention(2, 4, 1000, 256, False, 128, 80, 2, 256, overlap=True, o_direct=True)
    k = tilers.compile(f, target="cuda:sm_90a")
    assert report_lines(k, "an empty barrier per tile (K_shared, V_shared)")
    assert "empty_bar_V_shared" in k.get_kernel_source()
    plain = tilers.compile(fa.flash_attention(2, 4, 1000, 256, False, 128, 80, 2, 256, o_direct=True),
                           target="cuda:sm_90a")
    assert not report_lines(plain, "an empty barrier per tile")
    small = fa.flash_attention(1, 1, 300, 64, False, 128, 64, 2, 256, overlap=True, o_direct=True)
    testing.check_passes(small, arch="sm_90a", check=True)


@pytest.mark.parametrize("window", [(-1, 0), (256, -1)])
def test_warpgroups_take_turns_where_the_tiles_trip_counts_differ(window):
    # a causal mask or a window: each tile's loop has its own trip count (measured +2-3%
    # with the turns on an H100, 1.5-7% slower without varying trips)
    f = fa.flash_attention(2, 4, 1024, 128, False, 128, 128, 2, 256, overlap=True, window=window)
    k = tilers.compile(f, target="cuda:sm_90a")
    assert report_lines(k, "take turns issuing each step's gemms (named barriers 5 and 6)")
    src = k.get_kernel_source()
    assert "bar.arrive 6, 256;" in src and "bar.sync 5, 256;" in src
    # the softmax ends a basic block before the wait that retires P V (ptxas hoisted the wait
    # above it otherwise); only where the turns are taken (measured slower without them)
    assert src.count("a block boundary before the wait") == 1
    small = fa.flash_attention(1, 1, 300, 64, False, 128, 64, 2, 256, overlap=True, window=window)
    testing.check_passes(small, arch="sm_90a", check=True)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_nvrtc_compiles_the_scheduled_kernels(arch):
    for f in (chain(256, 200, 64, 64, **OVERLAP),
              fa.flash_attention(1, 2, 1000, 128, True, 128, 64, 2, 256, overlap=True)):
        k = tilers.compile(f, target=f"cuda:{arch}")
        assert k.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [64, 200])
def test_flash_attention_overlap_passes_every_pass(n, causal):
    f = fa.flash_attention(1, 1, n, 64, causal, block_M=128, block_N=64, num_stages=2, threads=256,
                           overlap=True)
    testing.check_passes(f, arch="sm_90a", check=True)


def test_one_consumer_warpgroup_takes_no_turns():
    k = tilers.compile(chain(64, 512, 64, 64, block_M=64, threads=128, **OVERLAP), target="cuda:sm_90a")
    assert report_lines(k, "step i runs") and not report_lines(k, "take turns")
    testing.check_passes(chain(64, 200, 64, 64, block_M=64, threads=128, **OVERLAP), arch="sm_90a", check=True)


def test_order_alone_reorders_an_iteration():
    # the mask before the gemm would read S before it is written: refused; the copy of P
    # after the mask is fine
    ok = dict(order=[0, 1, 2, 3, 4, 5])
    testing.check_passes(chain(128, 200, 64, 64, **ok), arch="sm_90a", check=True)
    with pytest.raises(TileError, match="runs the statement at .* of the same iteration before the one at") as e:
        tilers.compile(chain(128, 200, 64, 64, order=[0, 2, 1, 3, 4, 5]), target="cuda:sm_90a")
    assert "test_schedule.py" in str(e.value)


def test_a_schedule_that_changes_the_result_is_refused_at_the_line():
    # O += P V one stage before P is written
    bad = dict(stage=[-1, 1, 1, 1, -1, 0], order=[-1, 0, 1, 2, -1, 3])
    with pytest.raises(TileError, match="'P' \\(one writes it\\): the schedule would change the result") as e:
        tilers.compile(chain(128, 200, 64, 64, **bad), target="cuda:sm_90a")
    assert "T.gemm(P, V_s, acc" in str(e.value) or "T.copy(S, P)" in str(e.value)


def test_without_a_ring_the_copies_are_ordered_too():
    # num_stages=1: the copies into K_s / V_s are single tiles, so O += P V of iteration i
    # may not run after the next iteration's copy of V
    with pytest.raises(TileError, match="'V_s'"):
        tilers.compile(chain(128, 200, 64, 64, stages=1, **OVERLAP), target="cuda:sm_90a")


def test_a_serial_loop_schedules_its_statements():
    sched = dict(stage=[0, 0, 0, 0, 0, 0], order=[0, 1, 2, 3, 4, 5])
    testing.check_passes(chain(128, 200, 64, 64, stages=1, **sched), arch="sm_90a", check=True)


def test_a_ring_too_shallow_for_the_spread_is_refused():
    with pytest.raises(TileError, match="the ring needs num_stages >= 3"):
        tilers.compile(two_reads(64, 256, 64, 2, **SPREAD), target="cuda:sm_90a")


def test_only_copies_the_pipeline_runs_ahead_may_have_stage_minus_one():
    sched = dict(stage=[-1, -1, 0, 0, -1, 1], order=[-1, 0, 2, 3, -1, 1])
    with pytest.raises(TileError, match="has stage -1: only the copies the pipeline runs ahead"):
        tilers.compile(chain(128, 200, 64, 64, **sched), target="cuda:sm_90a")


def test_entry_counts_and_groups_are_checked_at_the_loop():
    with pytest.raises(TileError, match="order=/stage= give 3 entries; the loop body has 6 statements \\(0: copy"):
        tilers.compile(chain(128, 200, 64, 64, stage=[0, 0, 1], order=[0, 1, 2]), target="cuda:sm_90a")
    with pytest.raises(TileError, match="statement\\(s\\) \\[5\\] of the loop body are in no group"):
        tilers.compile(chain(128, 200, 64, 64, stage=[0, 1], order=[0, 1], group=[[0, 1, 2, 3], [4]]),
                       target="cuda:sm_90a")
    with pytest.raises(TileError, match="statement 1 is in groups 0 and 1"):
        tilers.compile(chain(128, 200, 64, 64, stage=[0, 1], order=[0, 1], group=[[0, 1], [1, 2, 3, 4, 5]]),
                       target="cuda:sm_90a")
    with pytest.raises(TileError, match="group 1 names statement 9"):
        tilers.compile(chain(128, 200, 64, 64, stage=[0, 1], order=[0, 1], group=[[0, 1, 2, 3, 4], [5, 9]]),
                       target="cuda:sm_90a")
    with pytest.raises(TileError, match="group= has 2 groups and order=/stage= 3 entries"):
        tilers.compile(chain(128, 200, 64, 64, stage=[0, 1, 1], order=[0, 1, 2], group=[[0, 1, 2, 3, 4], [5]]),
                       target="cuda:sm_90a")
    with pytest.raises(TileError, match="order= has 2 entries and stage= 3"):
        T.Pipelined(4, num_stages=2, order=[0, 1], stage=[0, 1, 2])
    with pytest.raises(TileError, match="takes a list of ints from -1 to 64"):
        T.Pipelined(4, stage=[0, "1"])
    with pytest.raises(TileError, match="group=...\\) takes a list of lists"):
        T.Pipelined(4, stage=[0], order=[0], group=[0])


def test_groups_give_their_statements_one_stage_and_order():
    grouped = dict(stage=[-1, 0, -1, 1], order=[-1, 2, -1, 1], group=[[0], [1, 2, 3], [4], [5]])
    testing.check_passes(chain(128, 200, 64, 64, **grouped), arch="sm_90a", check=True)
    k = tilers.compile(chain(128, 200, 64, 64, **grouped), target="cuda:sm_90a")
    assert report_lines(k, "step i runs")


def test_without_num_stages_the_depth_is_the_largest_stage_plus_one():
    sched = dict(stage=[0, 1, 1, 1, 0, 2], order=[0, 1, 3, 4, 2, 2])
    k = tilers.compile(chain(128, 200, 64, 64, stages=0, **sched), target="cuda:sm_90a")
    assert report_lines(k, "T.Pipelined(num_stages=3)")


@pytest.mark.parametrize("schedule", [{}, OVERLAP])
def test_tiles_first_read_apart_arrive_on_barriers_of_their_own(schedule):
    # K_s is first read by S = Q K^T, V_s only by O += P V: each has its full barrier, so
    # the first gemm starts while V still arrives; a GEMM's A and B keep sharing one
    k = tilers.compile(chain(256, 512, 64, 64, **schedule), target="cuda:sm_90a")
    assert report_lines(k, "a full barrier per tile (K_s, V_s)")
    assert "full_bar_V_s" in k.get_kernel_source()
    testing.check_passes(chain(256, 200, 64, 64, **schedule), arch="sm_90a", blocks="all", check=True)
    g = tilers.compile(kernels.matmul(512, 512, 512, 128, 128, 64, 3, 256), target="cuda:sm_90a")
    assert not report_lines(g, "a full barrier per tile")


def braced_block(src, head):
    """The text of the block that opens at the first `{` after `head`, braces matched."""
    start = src.index("{", src.index(head))
    depth = 0
    for i in range(start, len(src)):
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[start:i + 1]
    raise AssertionError(f"no closing brace after {head!r}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [4096, 1000])
def test_the_steady_attention_loop_has_no_barrier_of_every_consumer(n, causal):
    # Q's write before the loop is ordered by the prologue's barrier; the steady state holds
    # at most the warpgroups' turns (bar.sync 5/6, causal only), never one of all 256
    # consumers (bar.sync 1),
    # which would hold the two warpgroups in step (a constant `if true` used to leave the
    # write pending: insert_syncs_constant_if.tir)
    src = tilers.compile(fa.flash_attention(2, 4, n, 128, causal, 128, 128, 2, 256, overlap=True),
                         target="cuda:sm_90a").get_kernel_source()
    body = braced_block(src, "for (int step")
    assert ("bar.sync 5, 256;" in body) == causal and "bar.sync 1, 256;" not in body
