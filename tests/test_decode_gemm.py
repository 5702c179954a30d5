"""examples/decode_gemm.py: the decoding GEMM's schedules (tensor-core tiles, split-K through a
T.alloc_global workspace, split-K with float32 atomics, stream-K, the CUDA-core GEMV) against numpy on
the interpreter for batches of 1, 7 and 33 rows and sizes that are no multiple of the tiles,
every pass on the CPU model, NVRTC for sm_80 and sm_90a, and the schedule checks."""

import os
import sys

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import decode_gemm  # noqa: E402

N, K = 200, 300  # neither a multiple of any tile


def inputs(M, dtype="float16", seed=0):
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K)).astype(np_dtype)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np_dtype)
    return x, w, x.astype(np.float64) @ w.astype(np.float64).T


def small(schedule, dtype="float16"):
    block_N = 16 if schedule == "gemv" else 64
    return dict(schedule=schedule, block_N=block_N, block_M=16, block_K=64, split_k=3, num_stages=2, blocks=5,
                dtype=dtype)


@pytest.mark.parametrize("schedule", decode_gemm.SCHEDULES)
@pytest.mark.parametrize("M", [1, 7, 33])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_against_numpy(schedule, M, dtype):
    x, w, want = inputs(M, dtype)
    y = decode_gemm.linear(N, K, **small(schedule, dtype))(x, w)
    assert y.shape == (M, N)
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)
    if schedule in ("atomic", "streamk"):
        assert y.dtype == np.float32  # the atomics' float32 sums


@pytest.mark.parametrize("schedule", decode_gemm.SCHEDULES)
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees(schedule, arch):
    testing.check_passes(decode_gemm.linear.prim_func(N, K, **small(schedule)), arch=arch, check=True)


@pytest.mark.parametrize("schedule", ["tiles", "splitk", "atomic", "streamk"])
def test_tiles_of_32_rows_of_w(schedule):
    """block_N = 32 (N / 32 blocks before a K split: 128 at N = 4096): every pass and numpy."""
    cfg = dict(small(schedule), block_N=32)
    testing.check_passes(decode_gemm.linear.prim_func(N, K, **cfg), arch="sm_90a", check=True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, K)).astype(np.float16)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
    y = decode_gemm.linear(N, K, **cfg)(x, w)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=4e-3, atol=4e-3)


def test_the_thinnest_tiles_in_the_space():
    """The deep and the 16-row tiles configs() adds for a few rows of x: each compiles for
    sm_90a (NVRTC) and matches numpy on the interpreter, ragged N and K."""
    thin = [c for c in decode_gemm.configs(4096, 4096, M=4)
            if c["schedule"] == "tiles" and c["block_M"] == 16 and (c["block_N"] == 16 or c["num_stages"] > 8)]
    assert {(c["block_N"], c["num_stages"]) for c in thin} == {(32, 12), (32, 16), (16, 8), (16, 12)}
    for cfg in thin:
        assert tilers.compile(decode_gemm.linear.prim_func(N, K, **cfg), out_idx=[2], target="cuda:sm_90a").cubin
        x, w, want = inputs(5, seed=cfg["num_stages"])
        y = decode_gemm.linear(N, K, **cfg)(x, w)
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=4e-3, atol=4e-3)


@pytest.mark.parametrize("schedule", ["tiles", "splitk", "atomic", "streamk"])
@pytest.mark.parametrize("block_M,block_N,threads", [(64, 40, 128), (128, 24, 256)])
def test_the_batch_as_the_a_operand(schedule, block_M, block_N, threads):
    """order="xw": x's tile is the tensor cores' A operand (wgmma's 64-row atoms over the
    batch), W's tile of any multiple of 8 rows the B operand; every pass on the CPU model and
    numpy on the interpreter for batches of 1, 7 and 70 (more rows than a 64-row tile)."""
    cfg = dict(schedule=schedule, order="xw", block_M=block_M, block_N=block_N, block_K=64, split_k=3,
               num_stages=3, threads=threads, blocks=5)
    program = decode_gemm.linear.prim_func(N, K, **cfg)
    testing.check_passes(program, arch="sm_90a", check=True)
    source = tilers.compile(program, out_idx=[2], target="cuda:sm_90a").get_kernel_source()
    assert f"wgmma.mma_async.sync.aligned.m64n{block_N}k16" in source
    for M in (1, 7, 70):
        x, w, want = inputs(M, seed=M)
        y = decode_gemm.linear(N, K, **cfg)(x, w)
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=4e-3, atol=4e-3)


@pytest.mark.parametrize("schedule", ["tiles", "splitk", "atomic"])
@pytest.mark.parametrize("cluster", [2, 4])
def test_clusters_of_w_tiles_share_the_batch_tile(schedule, cluster):
    """cluster=2 / 4: the W tiles of a cluster (consecutive bx) share x's tile, each block
    loading its part multicast to all (a kernel with a symbolic M: a tile per block). Every
    pass on the CPU model (which runs a cluster's blocks together) and numpy."""
    n, k = 216, 320  # 4 tiles of 56 rows of W, the last ragged; rows of K 16-byte aligned (TMA)
    cfg = dict(schedule=schedule, order="xw", block_M=64, block_N=56, block_K=64, split_k=2, num_stages=3,
               threads=128, cluster=cluster)
    program = decode_gemm.linear.prim_func(n, k, **cfg)
    kernel = tilers.compile(program, out_idx=[2], target="cuda:sm_90a")
    report = kernel.report()
    assert f"clusters of {cluster} blocks along bx multicast X (each loads 1/{cluster}), each loads its own W" in report
    assert "not persistent: the kernel has symbolic sizes" in report
    assert f"__cluster_dims__({cluster}, 1, 1)" in kernel.get_kernel_source()
    testing.check_passes(program, arch="sm_90a", check=True, blocks="all")
    rng = np.random.default_rng(cluster)
    for M in (1, 70):
        x = rng.standard_normal((M, k)).astype(np.float16)
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float16)
        want = x.astype(np.float64) @ w.astype(np.float64).T
        y = decode_gemm.linear(n, k, **cfg)(x, w)
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=4e-3, atol=4e-3)


@pytest.mark.parametrize("schedule", ["tiles", "atomic"])
def test_pairs_of_batch_tiles_share_the_w_tile(schedule):
    """share="w": clusters of two consecutive batch tiles (the launch's x, padded to a whole
    number of pairs: `T.ceildiv(M, 128) * 2` is known to be even) share W's tile, each block
    loading half of it multicast to both. A batch of one row runs a pair whose second block's
    rows all lie past M; 130 rows three tiles and a padding block. CPU model and numpy."""
    n, k = 216, 320  # 5 tiles of 48 rows of W, the last ragged
    cfg = dict(schedule=schedule, order="xw", block_M=64, block_N=48, block_K=64, split_k=2, num_stages=3,
               threads=128, cluster=2, share="w")
    program = decode_gemm.linear.prim_func(n, k, **cfg)
    kernel = tilers.compile(program, out_idx=[2], target="cuda:sm_90a")
    assert "clusters of 2 blocks along bx multicast W (each loads 1/2), each loads its own X" in kernel.report()
    assert "__cluster_dims__(2, 1, 1)" in kernel.get_kernel_source()
    testing.check_passes(program, arch="sm_90a", check=True, blocks="all")
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float16)
    for M in (1, 130):
        x = rng.standard_normal((M, k)).astype(np.float16)
        want = x.astype(np.float64) @ w.astype(np.float64).T
        y = decode_gemm.linear(n, k, **cfg)(x, w)
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=4e-3, atol=4e-3)


def test_a_cluster_along_a_grid_of_run_time_size_needs_a_known_multiple():
    """A cluster along a grid axis whose size is known only at run time: kept when the size is
    a multiple of the cluster whatever the sizes, else reported (and the kernel runs without)."""
    M = T.dynamic("M")

    def program(pairs):
        @T.prim_func
        def f(A: T.Tensor((M, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((M, 64), "float32")):
            grid_x = T.ceildiv(M, 128) * 2 if pairs else T.ceildiv(M, 64)
            with T.ClusterKernel(grid_x, 1, cluster_dims=2, threads=128) as (bx, by):
                A_s = T.alloc_shared((64, 64), "float16")
                B_s = T.alloc_shared((64, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                T.clear(acc)
                for kk in T.Pipelined(1, num_stages=2):
                    T.copy(A[bx * 64, 0], A_s)
                    T.copy(B[0, 0], B_s)
                    T.gemm(A_s, B_s, acc)
                T.copy(acc, C[bx * 64, 0])

        return f

    kept = tilers.compile(program(True), target="cuda:sm_90a").report()
    assert "clusters of 2 blocks along bx multicast B (each loads 1/2), each loads its own A" in kept, kept
    refused = tilers.compile(program(False), target="cuda:sm_90a").report()
    assert ("no cluster 2x1: the grid's size along bx is known only at run time and not always a multiple "
            "of 2 (a grid of `T.ceildiv(size, block * 2) * 2` is)") in refused, refused


def test_cluster_configs_divide_the_grid():
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        clustered = [c for c in decode_gemm.configs(n, k, M=128) if c.get("cluster", 1) > 1]
        assert clustered and [c for c in clustered if c.get("share") == "w"]
        for c in clustered:
            assert c["order"] == "xw"
            if c.get("share", "x") == "x":  # W tiles along the launch's x: a whole number of clusters
                assert -(-n // c["block_N"]) % c["cluster"] == 0
            else:  # batch tiles along x (padded); W's tile splits in two 8-row multiples
                assert c["block_M"] == 64 and c["block_N"] % 16 == 0 and c["cluster"] == 2
        assert not [c for c in decode_gemm.configs(n, k, M=16) if c.get("cluster", 1) > 1]
        assert not [c for c in decode_gemm.configs(n, k, M=64) if c.get("share") == "w"]


def test_an_unknown_share_is_refused():
    with pytest.raises(ValueError, match="share must be 'x' or 'w', got 'y'"):
        decode_gemm.linear.prim_func(N, K, schedule="tiles", order="xw", cluster=2, share="y")


def test_an_unknown_order_is_refused():
    with pytest.raises(ValueError, match="order must be 'wx' or 'xw', got 'yx'"):
        decode_gemm.linear.prim_func(N, K, schedule="tiles", order="yx")


def test_xw_configs_fill_the_gpu_with_one_wave():
    """The "xw" tiles the space offers put at most one block per SM, nearly all of them busy."""
    for n in (4096, 14336, 1000):
        tiles = [c for c in decode_gemm.configs(n, 4096, M=64) if c.get("order") == "xw"]
        assert tiles
        for c in tiles:
            blocks = -(-n // c["block_N"]) * c["split_k"]
            assert c["block_N"] % 8 == 0 and blocks <= decode_gemm.SMS
    one_split = [c for c in decode_gemm.configs(14336, 4096, M=64) if c.get("order") == "xw" and c["split_k"] == 1]
    assert {c["block_N"] for c in one_split} >= {112}  # 128 tiles of 112 rows


@pytest.mark.parametrize("schedule", decode_gemm.SCHEDULES)
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_nvrtc_compiles_the_llm_shapes(schedule, arch):
    cfg = dict(schedule=schedule, block_N=8 if schedule == "gemv" else 128, block_K=256 if schedule == "gemv" else 128,
               block_M=16, split_k=4, num_stages=4)
    kernel = tilers.compile(decode_gemm.linear.prim_func(4096, 14336, **cfg), out_idx=[2], target=f"cuda:{arch}")
    assert len(kernel.cubin) > 0


def test_one_kernel_serves_every_batch():
    kernels = set()
    for M in (1, 2, 5):
        x, w, want = inputs(M)
        kernel = decode_gemm.linear(N, K, **small("splitk"))
        kernels.add(id(kernel))
        np.testing.assert_allclose(kernel(x, w).astype(np.float64), want, rtol=4e-3, atol=4e-3)
    assert len(kernels) == 1  # M is symbolic: the factory compiled once


def test_the_report_names_the_gemv_shuffles():
    cfg = dict(schedule="gemv", block_N=8, block_K=256, threads=128)
    report = tilers.compile(decode_gemm.linear.prim_func(4096, 4096, **cfg), out_idx=[2], target="cuda:sm_90a").report()
    assert "warp shuffles" in report
    # the float32 products fragment takes runs of 8 from its float16 operands: 16-byte loads
    assert "vector loads [W x8 (16 bytes), X x8 (16 bytes)]" in report


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="schedule must be one of"):
        decode_gemm.linear.prim_func(N, K, schedule="magic")


def test_the_configs_cover_every_schedule():
    assert {c["schedule"] for c in decode_gemm.configs(4096, 4096)} == set(decode_gemm.SCHEDULES)
