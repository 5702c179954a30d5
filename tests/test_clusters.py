"""Thread-block clusters on the CPU (`tilers.compile(..., cluster=(2, 1))`): a persistent
warp-specialized GEMM whose tiles are walked two (or four) at a time by the blocks of a
cluster, the producer copy they share (A along bx, B along by) split between them and
multicast to all, each consumer warp releasing a stage to every block. Checked pass by pass
on the warp model, which runs a cluster's blocks together (remote arrivals, multicast
copies completing on each block's barrier, cluster_sync, a block running ahead of its
peers), at trip counts 1 .. num_stages + 1, every transpose, fp16 and bf16, ragged edges
and a raster; compiled by NVRTC; the report and KernelInfo say what is launched, and a
cluster that cannot be made says why."""

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
        ((512, 512, 128), (2, 1), {"persistent": False}, "clusters walk tiles of a persistent kernel"),
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
