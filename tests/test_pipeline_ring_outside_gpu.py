"""tests/test_pipeline_ring_outside.py's kernels on the GPU (the default sm_90a kernel and
the portable path's, by its options): a multi-buffered tile read after its loop (trip counts 0 to 5 read from memory),
and two loops refilling the same tiles."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import test_pipeline_ring_outside as ring  # noqa: E402
import tilers  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


PORTABLE = {"wgmma": False, "tma": False}


@pytest.mark.parametrize("options", [{}, PORTABLE], ids=["default", "portable"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_after_the_loop(options, stages):
    a, b = ring.inputs(5)
    kernel = tilers.compile(ring.after_the_loop(stages, dynamic=True), **options)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    for n in range(ring.TILES + 1):
        c = torch.zeros(ring.M, ring.N, device="cuda")
        kernel(ta, tb, torch.tensor([n], dtype=torch.int32, device="cuda"), c)
        np.testing.assert_allclose(c.cpu().numpy(), ring.expected_after(a, b, n), rtol=1e-3, atol=5e-2)


@pytest.mark.parametrize("options", [{}, PORTABLE], ids=["default", "portable"])
def test_two_loops(options):
    a, b = ring.inputs(6)
    c = torch.zeros(ring.M, ring.N, device="cuda")
    tilers.compile(ring.two_loops(), **options)(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    BK = ring.BK
    want = af @ bf.T + 2 * af[:, 2 * BK:3 * BK] @ bf[:, 2 * BK:3 * BK].T
    np.testing.assert_allclose(c.cpu().numpy(), want, rtol=1e-3, atol=5e-2)
