"""Thread-block clusters on the CPU (`tilers.compile(..., cluster=(2, 1))`): a persistent
warp-specialized GEMM whose tiles are walked two (or four) at a time by the blocks of a
cluster, the producer copy they share (A along bx, B along by) split between them and
multicast to all, each consumer warp releasing a stage to every block. Checked pass by pass
on the warp model, which runs a cluster's blocks together (remote arrivals, multicast
copies completing on each block's barrier, cluster_sync, a block running ahead of its
peers), at trip counts 1 .. num_stages + 1, every transpose, fp16 and bf16, ragged edges
and a raster; compiled by NVRTC; the report and KernelInfo say what is launched, and a
cluster that cannot be made says why. A kernel launched a tile per block (persistent=False,
symbolic sizes) runs in clusters of consecutive blocks along bx; `T.ClusterKernel(...,
cluster_dims=)` asks for a cluster in the kernel itself."""

import os
import sys

import pytest
import tilers
from tilers.errors import TileError

sys.path.insert(0, os.path.dirname(__file__))
import kernels  # noqa: E402

T = tilers.language


def compiled(f, cluster, **options):
    return tilers.compile(f, out_idx=[2], target="cuda:sm_90a", cluster=cluster, **options)


def check(f, cluster, **options):
    result = tilers.testing.check_passes(
        f, arch="sm_90a", blocks="all", compile_options={"cluster": cluster, **options}
    )
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
@pytest.mark.parametrize("k_tiles", [1, 2, 3, 4])
def test_every_pass_agrees_at_every_trip_count(cluster, k_tiles):
    # 3 stages: 1, 2, s, s + 1 k-tiles; a 4 x 4 grid walked in pairs of tiles by the model's
    # three clusters (the ring wraps across tiles)
    f = kernels.matmul(512, 256, 64 * k_tiles, 128, 64, 64, 3, 128)
    k = compiled(f, cluster)
    assert k.info["cluster"] == [2, 1, 1], k.info
    check(f, cluster)


@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
def test_transposes(trans_A, trans_B, cluster):
    f = kernels.matmul(256, 256, 192, 64, 64, 64, 3, 128, trans_A=trans_A, trans_B=trans_B)
    check(f, cluster)


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
def test_ragged_edges_bf16_and_a_raster(cluster):
    # 250 x 200 with 64 x 64 tiles: 4 x 4 tiles, the last row and column ragged (the
    # multicast halves of an edge tile read past the tensor as zeros)
    f = kernels.matmul(250, 200, 100, 64, 64, 32, 3, 128, dtype="bfloat16", panel=2)
    check(f, cluster)


def test_two_warpgroups_and_a_cluster_of_four():
    f = kernels.matmul(512, 512, 128, 128, 128, 64, 3, 256, policy=T.GemmWarpPolicy.FullRow)
    k = compiled(f, (1, 4))
    assert k.info["cluster"] == [4, 1, 1], k.info
    assert "clusters of 4 blocks along by multicast B (each loads 1/4)" in k.report(), k.report()
    check(f, (1, 4))


def test_report_source_and_launch():
    f = kernels.matmul(512, 512, 256, 128, 128, 64, 3, 128)
    k = compiled(f, (2, 1))
    report = k.report()
    assert "clusters of 2 blocks along bx multicast A (each loads 1/2), each loads its own B" in report
    assert "one lane of each consumer warp releases the stage to every block" in report
    assert k.info["cluster"] == [2, 1, 1] and k.info["persistent"], k.info
    src = k.get_kernel_source()
    assert "__cluster_dims__(2, 1, 1)" in src
    assert "multicast::cluster" in src and "mapa.shared::cluster" in src
    assert src.count("barrier.cluster.wait") == 2  # after the barriers' init, before exit
    # the same program without a cluster is the kernel it was
    plain = tilers.compile(f, out_idx=[2], target="cuda:sm_90a")
    assert "__cluster_dims__" not in plain.get_kernel_source() and plain.info["cluster"] == [1, 1, 1]
    # deterministic
    assert compiled(f, (2, 1)).get_kernel_source() == src


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2), (1, 4)])
def test_nvrtc_compiles_it(cluster):
    f = kernels.matmul(1024, 1024, 256, 128, 128, 64, 4, 128)
    k = compiled(f, cluster)
    assert k.info["cluster"][0] == cluster[0] * cluster[1]
    assert len(k.cubin) > 0


def test_eager_and_factory_styles_take_it():
    @tilers.jit(out_idx=[2], target="cuda:sm_90a", cluster=(1, 2))
    def factory(M, N, K):
        return kernels.matmul(M, N, K, 128, 128, 64, 3, 128)

    k = factory(512, 512, 128)
    assert k.info["cluster"] == [2, 1, 1]


@pytest.mark.parametrize(
    "shape,cluster,options,why",
    [
        ((384, 512, 128), (1, 2), {}, "the grid has 3 blocks along by, not a multiple of 2"),
        ((512, 512, 128), (2, 2), {}, "clusters run along one grid axis"),
        ((512, 768, 128), (3, 1), {}, "3 blocks per cluster (2 or 4)"),
        (
            (512, 512, 128),
            (1, 2),
            {"persistent": False},
            "the kernel is not persistent (persistent=False), and the clusters of a kernel that is not run along bx",
        ),
        ((512, 512, 128), (2, 1), {"persistent": "pingpong"}, "not with ping-pong consumers"),
    ],
)
def test_a_cluster_that_cannot_be_made_says_why(shape, cluster, options, why):
    M, N, K = shape
    f = kernels.matmul(M, N, K, 128, 128, 64, 3, 128)
    k = compiled(f, cluster, **options)
    assert k.info["cluster"] == [1, 1, 1], k.info
    assert f"no cluster {cluster[0]}x{cluster[1]}: {why}" in k.report(), k.report()
    assert "__cluster_dims__" not in k.get_kernel_source()


def test_no_cluster_without_a_tma_pipeline():
    # sm_80: no TMA, so no producer copies to share
    f = kernels.matmul(512, 512, 128, 128, 128, 32, 3, 128)
    k = tilers.compile(f, out_idx=[2], target="cuda:sm_80", cluster=(2, 1))
    assert k.info["cluster"] == [1, 1, 1]
    assert "no cluster 2x1: the kernel has no TMA pipeline" in k.report(), k.report()


@pytest.mark.parametrize("bad", [(0, 1), (3,), "x", (2, 2, 2), 17, (2.0, 1), True])
def test_bad_cluster_values(bad):
    f = kernels.matmul(512, 512, 128, 128, 128, 64, 3, 128)
    with pytest.raises(TileError, match="cluster="):
        compiled(f, bad)


def test_a_kernel_of_a_tile_per_block_runs_in_clusters_along_bx():
    f = kernels.matmul(512, 512, 256, 128, 128, 64, 3, 128)
    k = compiled(f, (2, 1), persistent=False)
    assert k.info["cluster"] == [2, 1, 1] and not k.info.get("persistent"), k.info
    report = k.report()
    assert "one tile per block, not persistent: persistent=False; clusters of 2 blocks along bx multicast A" in report
    src = k.get_kernel_source()
    assert "__cluster_dims__(2, 1, 1)" in src and "multicast::cluster" in src
    assert src.count("barrier.cluster.wait") == 2
    check(f, (2, 1), persistent=False)


@pytest.mark.parametrize("k_tiles", [1, 2, 4])
def test_clusters_of_four_blocks_of_a_tile_each(k_tiles):
    # 8 x 4 tiles: each row of 8 blocks two clusters of 4 sharing its A tile; 3 stages
    f = kernels.matmul(256, 512, 64 * k_tiles, 64, 64, 64, 3, 128, dtype="bfloat16")
    k = compiled(f, (4, 1), persistent=False)
    assert k.info["cluster"] == [4, 1, 1], k.report()
    check(f, (4, 1), persistent=False)


def test_a_tile_per_block_cluster_that_cannot_be_made_says_why():
    # a raster would number a cluster's blocks apart
    f = kernels.matmul(512, 512, 128, 128, 128, 64, 3, 128, panel=2)
    k = compiled(f, (2, 1), persistent=False)
    assert k.info["cluster"] == [1, 1, 1]
    assert "asks for a raster order, which would number a cluster's blocks apart" in k.report(), k.report()
    # a loop whose trip count differs from block to block of a cluster
    k = compiled(triangle(512, 128), (2, 1), persistent=False)
    assert k.info["cluster"] == [1, 1, 1]
    assert "its pipelined loop's range reads bx: a cluster's blocks must run the same iterations" in k.report()


def triangle(N, K):
    """C[:, tile] = A[:, :K_bx] @ B[:K_bx, tile]: block bx runs bx + 1 k-tiles."""

    @T.prim_func
    def triangle(A: T.Tensor((128, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((128, N), "float16")):
        with T.Kernel(N // 128, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.min(bx + 1, K // 64), num_stages=2):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * 128, bx * 128])

    return triangle


def cluster_matmul(M, N, K, cluster_dims, block=64):
    """The GEMM in T.ClusterKernel: its cluster is the kernel's own."""

    @T.prim_func
    def cmm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.ClusterKernel(T.ceildiv(N, block), T.ceildiv(M, block), cluster_dims=cluster_dims,
                             threads=128) as (bx, by):
            A_s = T.alloc_shared((block, 64), "float16")
            B_s = T.alloc_shared((64, block), "float16")
            acc = T.alloc_fragment((block, block), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=3):
                T.copy(A[by * block, k * 64], A_s)
                T.copy(B[k * 64, bx * block], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * block, bx * block])

    return cmm


@pytest.mark.parametrize("dims,blocks", [(2, 2), ((1, 2), 2), ((4, 1, 1), 4), ((1, 1, 1), 1), (1, 1)])
def test_cluster_kernel_asks_for_its_own_cluster(dims, blocks):
    f = cluster_matmul(256, 256, 192, dims)
    k = tilers.compile(f, out_idx=[2], target="cuda:sm_90a")
    assert k.info["cluster"] == [blocks, 1, 1], k.report()
    if blocks == 1:  # cluster_dims of one block: the kernel T.Kernel makes
        assert "__cluster_dims__" not in k.get_kernel_source()
    else:
        # the kernel's own cluster_dims override the compile option
        other = tilers.compile(f, out_idx=[2], target="cuda:sm_90a", cluster=(4, 1) if blocks == 2 else (2, 1))
        assert other.get_kernel_source() == k.get_kernel_source()
        check(f, None)
    # the interpreter runs it as any kernel
    import numpy as np

    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 192)).astype(np.float16)
    b = rng.standard_normal((192, 256)).astype(np.float16)
    got = tilers.compile(f, out_idx=[2], target="interp")(a, b)
    np.testing.assert_allclose(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2,
                               atol=2e-1)


@pytest.mark.parametrize("bad", [0, (2, 2, 2), "x", (4, 8), (2.0,), True, None])
def test_bad_cluster_dims_name_the_line(bad):
    with pytest.raises(TileError, match=r"test_clusters.py:\d+:\d+: error: T.ClusterKernel: cluster_dims must be"):
        tilers.compile(cluster_matmul(256, 256, 192, bad), out_idx=[2], target="cuda:sm_90a")


def test_cluster_kernel_without_a_pipeline_says_why():
    @T.prim_func
    def copy(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.ClusterKernel(2, cluster_dims=2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2

    k = tilers.compile(copy, out_idx=[1], target="cuda:sm_90a")
    assert k.info["cluster"] == [1, 1, 1]
    assert "no cluster 2x1: the kernel has no TMA pipeline" in k.report()


def test_cluster_kernel_in_an_eager_function():
    import numpy as np

    @tilers.jit(target="interp")
    def scale(A, factor: float = 2.0):
        N = T.const("N")
        A: T.Tensor((N,), "float32")
        B = T.empty((N,), "float32")
        with T.ClusterKernel(T.ceildiv(N, 128), cluster_dims=2, threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < N:
                    B[bx * 128 + i] = A[bx * 128 + i] * factor
        return B

    a = np.arange(300, dtype=np.float32)
    np.testing.assert_array_equal(scale(a), a * 2)
