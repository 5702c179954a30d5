"""plan_shared_memory inside a top-level loop (a persistent kernel's tile loop): two shared
tiles used one after the other in each iteration share bytes, with a barrier the pass adds
where the pair has none (also on the way round to the next iteration). The CPU model runs
every pass with several tiles per block; the report says which buffers share."""

import os
import sys

import numpy as np
import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402


def report_offsets(k):
    out = {}
    for line in k.report().splitlines():
        line = line.strip()
        if " bytes at offset " in line and ":" in line:
            name = line.split(":")[0]
            out[name] = (int(line.split(" bytes at offset ")[1].split(",")[0].split()[0]), line)
    return out


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_output_tile_takes_q_bytes_unless_q_is_filled_ahead(causal, overlap):
    # 8 tiles walked by the CPU model's few persistent blocks (a causal mask's in pairs of
    # equal work); the producer loads Q (plan_pipeline's prefetch_before), the next tile's
    # during this tile's epilogue, so the output tile must not overlay Q's bytes
    f = fa.flash_attention(1, 4, 200, 64, causal, block_M=128, block_N=64, num_stages=2, threads=256,
                           overlap=overlap)
    k = tilers.compile(f, out_idx=[3], target="sm_90a")
    offsets = report_offsets(k)
    report = k.report()
    assert "T.copy Q -> Q_shared: TMA by the producer warpgroup" in report, report
    assert ("trip counts differ along bx" in report) == causal, report
    q0, q_bytes = offsets["Q_shared"][0], 128 * 64 * 2
    assert offsets["O_shared"][0] >= q0 + q_bytes or offsets["O_shared"][0] + q_bytes <= q0, report
    assert "shares bytes" not in offsets["O_shared"][1]
    tilers.testing.check_passes(f, arch="sm_90a", blocks="all", check=True)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_output_tile_takes_q_bytes_when_q_stays_with_the_consumers(causal):
    # d=128 with three stages of 128-key tiles: Q filled ahead would not fit, so the
    # consumers load it and the output tile overlays its bytes in each tile of the walk,
    # with the barriers plan_shared_memory adds
    f = fa.flash_attention(1, 2, 300, 128, causal, block_M=128, block_N=128, num_stages=3, threads=256,
                           overlap=True)
    k = tilers.compile(f, out_idx=[3], target="sm_90a")
    offsets = report_offsets(k)
    report = k.report()
    assert "T.copy Q -> Q_shared stays with the consumers" in report, report
    assert offsets["O_shared"][0] == offsets["Q_shared"][0], report
    assert "shares bytes with Q_shared" in offsets["O_shared"][1]
    tilers.testing.check_passes(f, arch="sm_90a", blocks="all", check=True)


def test_three_stages_fit_at_head_dim_128():
    k = tilers.compile(fa.flash_attention(2, 4, 1024, 128, False, 128, 128, 3, 256, overlap=True), out_idx=[3],
                       target="sm_90a")
    assert "3 stages on full/empty mbarriers" in k.report()
    assert k.info["shared_bytes"] <= 232448 if "shared_bytes" in k.info else True


def two_phases(n_tiles, width=1024):
    """Per tile: stage A's row in one shared tile, then B's in another (each read by all
    threads after a barrier): the two never live at once within an iteration."""

    @T.prim_func
    def f(A: T.Tensor((n_tiles, width), "float32"), B: T.Tensor((n_tiles, width), "float32"),
          C: T.Tensor((n_tiles, width), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_shared((width,), "float32")
            y = T.alloc_shared((width,), "float32")
            for t in T.serial(n_tiles):
                T.copy(A[t, :], x)
                for i in T.Parallel(width):
                    C[t, i] = x[width - 1 - i]
                T.copy(B[t, :], y)
                for i in T.Parallel(width):
                    C[t, i] = C[t, i] + y[(i + 7) % width]

    return f


def test_a_plain_loop_shares_and_stays_correct():
    # tiles of 4 KiB: a barrier added each iteration lets y take x's bytes
    f = two_phases(5)
    k = tilers.compile(f, out_idx=[2], target="sm_90a")
    offsets = report_offsets(k)
    assert offsets["y"][0] == offsets["x"][0], k.report()
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((5, 1024)).astype(np.float32) for _ in range(2))
    want = a[:, ::-1] + b[:, (np.arange(1024) + 7) % 1024]
    got = tilers.compile(f, out_idx=[2], target="interp")(a, b)
    assert np.allclose(np.asarray(got), want)
    for arch in ("sm_90a", "sm_80"):
        r = tilers.testing.check_passes(f, arch=arch)
        assert r.ok, r.failure_message()


def test_small_tiles_keep_bytes_of_their_own():
    """Tiles of 1 KiB: a barrier each iteration would cost more than the bytes it saves, so
    no barrier is added and the two tiles do not share bytes."""
    f = two_phases(5, width=256)
    k = tilers.compile(f, out_idx=[2], target="sm_90a")
    offsets = report_offsets(k)
    assert offsets["y"][0] != offsets["x"][0], k.report()
    assert k.source.count("__syncthreads()") == tilers.compile(two_phases(5, width=256), out_idx=[2],
                                                               target="sm_80").source.count("__syncthreads()")
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((5, 256)).astype(np.float32) for _ in range(2))
    got = tilers.compile(f, out_idx=[2], target="interp")(a, b)
    assert np.allclose(np.asarray(got), a[:, ::-1] + b[:, (np.arange(256) + 7) % 256])
    tilers.testing.check_passes(f, arch="sm_90a", check=True)
