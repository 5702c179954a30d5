"""Ping-pong consumers on the CPU (`tilers.compile(..., persistent="pingpong")`): a persistent
warp-specialized GEMM whose user's threads run twice, as two consumer slots taking alternate
tiles of the block's walk, their main loops handed over by named barriers (one slot's
epilogue overlapping the other's tensor-core work), slot 1 on its own copies of the
consumers' shared tiles. Checked pass by pass on the warp model (mbarrier phases, TMA,
named barriers with bar.arrive, roles scheduled on their own) at trip counts 1, 2,
num_stages and num_stages ± 1 and tile counts that leave a slot with fewer tiles or none,
on the interpreter against numpy, compiled by NVRTC; the report and KernelInfo say what is
launched."""

import os
import sys

import numpy as np
import pytest
import tilers
from tilers.errors import TileError

sys.path.insert(0, os.path.dirname(__file__))
import kernels  # noqa: E402

PINGPONG = {"persistent": "pingpong"}


def compiled(f, **options):
    return tilers.compile(f, out_idx=[2], target="cuda:sm_90a", **{**PINGPONG, **options})


@pytest.mark.parametrize("k_tiles", [1, 2, 3, 4, 5])
def test_every_pass_agrees_at_every_trip_count(k_tiles):
    # 4 stages: 1, 2, s - 1, s, s + 1 k-tiles; 12 tiles over the model's 3 blocks: 4 each
    f = kernels.matmul(300, 250, 64 * k_tiles, 128, 64, 64, 4, 128)
    result = tilers.testing.check_passes(f, arch="sm_90a", blocks="all", compile_options=PINGPONG)
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("shape", [(128, 64, 256), (256, 128, 192), (640, 128, 128)])
def test_blocks_with_few_tiles(shape):
    # 1 tile (slot 1 has none), 2 tiles (one each), 5 tiles (2 + 2 + 1 over 3 blocks)
    M, N, K = shape
    f = kernels.matmul(M, N, K, 128, 128, 64, 3, 128)
    result = tilers.testing.check_passes(f, arch="sm_90a", blocks="all", compile_options=PINGPONG)
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("trans_A,trans_B", [(False, True), (True, False)])
def test_transposes_and_a_raster(trans_A, trans_B):
    f = kernels.matmul(384, 320, 320, 128, 64, 64, 3, 128, trans_A=trans_A, trans_B=trans_B, panel=2)
    result = tilers.testing.check_passes(f, arch="sm_90a", blocks="all", compile_options=PINGPONG)
    assert result.ok, result.failure_message()


def test_two_warpgroups_per_slot():
    # threads=256 per slot: 640 threads launched at 96 registers each (61440 in all), which
    # the setmaxnreg budgets must not pass (they did, and the H200 hung in setmaxnreg.inc)
    f = kernels.matmul(512, 512, 256, 128, 128, 64, 3, 256, policy=tilers.language.GemmWarpPolicy.FullRow)
    k = compiled(f)
    assert k.info["block"] == [640, 1, 1], k.info
    assert "setmaxnreg: producer 24, consumers 112 registers per thread" in k.report(), k.report()
    result = tilers.testing.check_passes(f, arch="sm_90a", blocks="all", compile_options=PINGPONG)
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_on_the_interpreter_and_nvrtc(dtype):
    M, N, K = 200, 136, 192
    k = compiled(kernels.matmul(M, N, K, 128, 64, 64, 3, 128, dtype=dtype))
    assert k.cubin[:4] == b"\x7fELF"
    rng = np.random.default_rng(1)
    if dtype == "bfloat16":
        import ml_dtypes

        a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    else:
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((K, N)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(k(a, b).astype(np.float64), want, rtol=2e-2, atol=2.5e-1)


def test_report_source_and_launch():
    k = compiled(kernels.matmul(4096, 4096, 4096, 128, 128, 64, 4, 128, panel=8))
    report = k.report()
    assert "threads 0..128 and 128..256 run the kernel (two consumer slots" in report, report
    assert "one producer warpgroup (threads 256..384)" in report
    assert "persistent, ping-pong" in report
    assert k.info["block"] == [384, 1, 1] and k.info["persistent"] is True
    src = k.source
    assert "bar.sync 3, 256;" in src and "bar.arrive 4, 256;" in src  # the hand-over
    assert "bar.sync 4, 256;" in src and "bar.arrive 3, 256;" in src
    assert "bar.sync 1, 128;" in src and "bar.sync 2, 128;" in src  # each slot's own barriers
    assert "wtid" in src  # slot 1's threads numbered from 0


def test_pingpong_needs_the_persistent_walk_and_says_so():
    f = kernels.matmul(tilers.language.dynamic("M"), 512, 512, 128, 128, 64, 3, 128)
    k = compiled(f)
    assert "not persistent (so not ping-pong either): the kernel has symbolic sizes" in k.report()
    assert k.info["block"] == [256, 1, 1]
    k2 = compiled(kernels.matmul(512, 512, 512, 128, 128, 64, 3, 128), persistent=True)
    assert "ping-pong" not in k2.report() and k2.info["block"] == [256, 1, 1]


def test_a_bad_persistent_value_is_an_error():
    with pytest.raises(TileError, match="persistent='pong': expected True, False or 'pingpong'"):
        compiled(kernels.matmul(512, 512, 512, 128, 128, 64, 3, 128), persistent="pong")
