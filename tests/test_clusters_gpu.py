"""Thread-block clusters on the H200 (`cluster=(2, 1)` / `(1, 2)` / `(1, 4)`): a persistent
warp-specialized GEMM whose tiles are walked in groups by the blocks of a cluster, the copy
they share multicast. Checked against torch and bit for bit against the same source without
a cluster (each tile's wgmma sequence is the same): ragged shapes, every transpose, fp16 and
bf16, trip counts 1, 2 and num_stages ± 1, tile counts from one group to more tiles than
SMs, a raster; SASS has the multicast TMA loads feeding HGMMA. Run per file with a timeout
(scripts/gpu-check): a hang fails this file."""

import functools
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
import kernels  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


inputs = functools.partial(kernels.gemm_inputs, seed=7)


def agree(f, M, N, K, cluster, dtype="float16", trans_A=False, trans_B=False, persistent=True):
    k = tilers.compile(f, out_idx=[2], cluster=cluster, persistent=persistent)
    assert k.info["cluster"] == [cluster[0] * cluster[1], 1, 1], k.report()
    plain = tilers.compile(f, out_idx=[2], persistent=persistent)
    a, b, want = inputs(M, N, K, dtype, trans_A, trans_B)
    got = k(a, b)
    torch.cuda.synchronize()
    err = ((got.double() - want).abs().max() / (want.abs().max() + 1)).item()
    assert err < 1e-2, f"max error {err:.3g}"
    assert torch.equal(got, plain(a, b)), "the clustered and the plain kernel differ"
    # again: the barriers and the ring start afresh at each launch
    assert torch.equal(k(a, b), got)


CONFIGS = [  # block_M, block_N, block_K, stages, threads, policy
    (128, 128, 64, 4, 128, "square"),
    (128, 256, 64, 3, 256, "full_row"),
    (64, 64, 32, 2, 128, "square"),
]


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_against_torch_and_the_plain_kernel(config, trans_A, trans_B, dtype, cluster):
    bm, bn, bk, st, th, policy = config
    # ragged in every dimension; 8 x 4 (or 16 x 8) tiles, even along both axes
    M, N, K = 1000, 1000, 520
    f = kernels.matmul(M, N, K, bm, bn, bk, st, th, dtype=dtype, trans_A=trans_A, trans_B=trans_B,
                       policy=policy, panel=8)
    agree(f, M, N, K, cluster, dtype, trans_A, trans_B)


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("k_tiles", [1, 2, 3, 4, 5])
def test_trip_counts_around_the_ring(stages, k_tiles, cluster):
    M, N, K = 1024, 1024, 64 * k_tiles
    agree(kernels.matmul(M, N, K, 128, 128, 64, stages, 128), M, N, K, cluster)


TILE_COUNTS = [  # (M, N, K), cluster: the grid a multiple of the cluster along its axis
    ((256, 256, 256), (2, 1)),  # one group of tiles per cluster, 2 clusters
    ((256, 256, 256), (1, 2)),
    ((512, 256, 128), (1, 4)),  # one group of four
    ((1536, 1536, 256), (2, 1)),  # 144 tiles: more than the SMs
    ((1536, 1536, 256), (1, 4)),
    ((4096, 4096, 512), (1, 2)),  # 1024 tiles
    ((500, 264, 192), (1, 2)),  # ragged edges on both axes (rows 16-byte multiples: TMA)
    ((264, 504, 192), (2, 1)),
]


@pytest.mark.parametrize("shape,cluster", TILE_COUNTS, ids=lambda x: "x".join(map(str, x)))
def test_tile_counts(shape, cluster):
    M, N, K = shape
    agree(kernels.matmul(M, N, K, 128, 128, 64, 4, 128), M, N, K, cluster)


@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="needs cuobjdump")
def test_sass_has_multicast_tma_feeding_hgmma():
    k = tilers.compile(kernels.matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, panel=8, policy="full_row"),
                       out_idx=[2], cluster=(1, 2))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(k.cubin)
        sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    assert "UTMALDG" in sass and "MULTICAST" in sass and "HGMMA" in sass, sass[:3000]


@pytest.mark.parametrize("cluster", [(2, 1), (4, 1)])
@pytest.mark.parametrize("shape", [(1000, 1024, 520), (256, 512, 64), (4096, 4096, 512)], ids=str)
def test_a_tile_per_block_in_clusters(shape, cluster):
    """persistent=False: the grid launched as it is, in clusters of consecutive blocks
    along bx (sharing A's tile)."""
    M, N, K = shape
    agree(kernels.matmul(M, N, K, 128, 128, 64, 4, 128), M, N, K, cluster, persistent=False)
