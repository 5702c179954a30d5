"""Ping-pong consumers on the H200 (`persistent="pingpong"`): two copies of the kernel's
threads on alternate tiles of the persistent walk, their main loops in turn. Checked against
torch and bit for bit against the cooperative persistent kernel of the same source (each
tile's wgmma sequence is the same): ragged shapes, every transpose, fp16 and bf16, trip
counts 1, 2 and num_stages ± 1, tile counts that leave slots idle or uneven (1, 2, 3 tiles;
more tiles than SMs), one and two warpgroups per slot; SASS has UTMALDG feeding HGMMA and the
hand-over's named barriers. Run per file with a timeout (scripts/gpu-check): a hang fails
this file."""

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


inputs = functools.partial(kernels.gemm_inputs, seed=5)


def both(f):
    pp = tilers.compile(f, out_idx=[2], persistent="pingpong")
    assert "persistent, ping-pong" in pp.report(), pp.report()
    assert pp.info["block"][0] == 2 * pp.info["threads"] + 128, pp.info
    coop = tilers.compile(f, out_idx=[2])
    return pp, coop


def agree(f, M, N, K, dtype="float16", trans_A=False, trans_B=False):
    pp, coop = both(f)
    a, b, want = inputs(M, N, K, dtype, trans_A, trans_B)
    got = pp(a, b)
    torch.cuda.synchronize()
    err = ((got.double() - want).abs().max() / (want.abs().max() + 1)).item()
    assert err < 1e-2, f"max error {err:.3g}"
    assert torch.equal(got, coop(a, b)), "ping-pong and cooperative kernels differ"


CONFIGS = [  # block_M, block_N, block_K, stages, threads, policy
    (128, 128, 64, 4, 128, "square"),
    (64, 256, 64, 4, 128, "square"),
    (64, 64, 32, 2, 128, "square"),
    (128, 128, 64, 3, 256, "full_row"),  # two warpgroups per slot: 640 threads
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_against_torch_and_the_cooperative_kernel(config, trans_A, trans_B, dtype):
    bm, bn, bk, st, th, policy = config
    M, N, K = 1000, 1032, 520
    f = kernels.matmul(M, N, K, bm, bn, bk, st, th, dtype=dtype, trans_A=trans_A, trans_B=trans_B,
                       policy=policy, panel=8)
    agree(f, M, N, K, dtype, trans_A, trans_B)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("k_tiles", [1, 2, 3, 4, 5])
def test_trip_counts_around_the_ring(stages, k_tiles):
    M, N, K = 1024, 1024, 64 * k_tiles
    agree(kernels.matmul(M, N, K, 128, 128, 64, stages, 128), M, N, K)


@pytest.mark.parametrize("shape", [(128, 128, 256), (256, 128, 128), (384, 128, 192), (1536, 1408, 256),
                                   (4096, 4096, 512), (130, 136, 64)])
def test_tile_counts(shape):
    # 1, 2, 3 tiles (slot 1 idle or uneven), 132 tiles (one per SM), 1024 tiles, a ragged edge
    M, N, K = shape
    agree(kernels.matmul(M, N, K, 128, 128, 64, 4, 128), M, N, K)


@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="needs cuobjdump")
def test_sass_has_tma_hgmma_and_the_hand_over():
    pp, _ = both(kernels.matmul(4096, 4096, 4096, 128, 128, 64, 4, 128, panel=8))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(pp.cubin)
        sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    assert "UTMALDG" in sass and "HGMMA" in sass, sass[:2000]
    assert "BAR.ARV" in sass and "BAR.SYNC" in sass, sass[:2000]
