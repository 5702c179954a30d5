"""The `elide_syncs` pass: block barriers that order nothing another barrier does not are
dropped — the ones lowering puts around each cross-warp reduction's partials, in a loop
body holding several — and those that order a write before another thread's read stay
(checked by the CPU model after every pass, which reports a missing barrier as a race)."""

import os
import re
import sys

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers.testing import check_passes

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_decoding  # noqa: E402
import kernels  # noqa: E402


def loop_syncs(source, loop_header):
    """The __syncthreads in the first loop whose header contains `loop_header`."""
    start = source.index(loop_header)
    depth, i = 0, source.index("{", start)
    for j in range(i, len(source)):
        depth += {"{": 1, "}": -1}.get(source[j], 0)
        if depth == 0:
            return source[i:j].count("__syncthreads()")
    raise AssertionError("unbalanced braces")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_two_reductions_keep_one_barrier_each_between_their_stores_and_reads(arch):
    k = kernels.softmax(8, 1024, block_M=4, threads=128)
    kern = tilers.compile(k, target=f"cuda:{arch}")
    # each reduction across warps: its partials' stores, a barrier, their reads — the
    # barriers lowering put after the max's reads and before the sum's stores are gone (the
    # first and the last stay: nothing after them is known to this pass)
    assert kern.source.count("__syncthreads()") == 4
    assert "2 of the kernel's 6 block barriers order no access another barrier does not: removed" in kern.report()
    check_passes(k, arch=arch, check=True)
    a = np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32)
    b = np.zeros_like(a)
    tilers.compile(k, target="interp")(a, b)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(b, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_barrier_that_orders_a_shared_tile_stays():
    """Between the two reductions the row maxima go through a shared tile read by other
    threads (`insert_syncs` orders the pair): that barrier orders a write before a read and
    stays; the CPU model would report its absence as a race."""

    @T.prim_func
    def k(A: T.Tensor((4, 256), "float32"), B: T.Tensor((4, 256), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((4, 256), "float32")
            m = T.alloc_fragment((4,), "float32")
            s = T.alloc_fragment((4,), "float32")
            tile = T.alloc_shared((4,), "float32")
            T.copy(A[0, 0], x)
            T.reduce_max(x, m, dim=1)
            T.copy(m, tile)
            for i, j in T.Parallel(4, 256):
                x[i, j] = x[i, j] - tile[3 - i]
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(4, 256):
                x[i, j] = s[i] + tile[i]
            T.copy(x, B[0, 0])

    for arch in ("sm_80", "sm_90a"):
        check_passes(k, arch=arch, check=True)
    a = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    b = np.zeros_like(a)
    tilers.compile(k, target="interp")(a, b)
    m = a.max(1)
    want = (a - m[::-1, None]).sum(1)[:, None] + m[:, None]
    np.testing.assert_allclose(b, np.broadcast_to(want, b.shape), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [64, 128])
def test_decode_attention_loop_has_half_its_barriers(threads):
    """The KV loop of examples/flash_decoding.py (16 query rows over `threads / 32` warps):
    eight barriers a tile before the pass — the pipeline's wait, three per reduction, the
    relayout of the scores — four after it; every pass's CPU model agrees with the tile-level
    result on both targets."""
    k = flash_decoding.flash_decode.__wrapped__(1, 32, 8, 128, 8192, num_split=16, block_H=16, block_N=64,
                                                num_stages=3, threads=threads)
    src = tilers.compile(k, target="cuda:sm_90a").source
    assert loop_syncs(src, "for (int k = 0;") == 4
    small = flash_decoding.flash_decode.__wrapped__(2, 8, 2, 64, 200, num_split=4, block_H=16, block_N=32,
                                                    num_stages=3, threads=threads)
    for arch in ("sm_80", "sm_90a"):
        check_passes(small, arch=arch, check=True)


def test_report_names_the_count():
    k = kernels.softmax(8, 1024, block_M=4, threads=128)
    text = tilers.compile(k, target="cuda:sm_90a").report()
    assert re.search(r"2 of the kernel's \d+ block barriers order no access another barrier does not: removed", text)
