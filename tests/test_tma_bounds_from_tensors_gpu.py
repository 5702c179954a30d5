"""tests/test_tma_bounds_from_tensors.py's kernel on the GPU: the TMA pipeline whose trip
count each block reads from a tensor (0, 1, one tile + 1 and all tiles), and the cp.async one."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import test_tma_bounds_from_tensors as t  # noqa: E402
import tilers  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("bound", ["tensor", "variable"])
def test_against_numpy(bound):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((t.B, t.S, t.D)).astype(np.float16)
    kernel = tilers.compile(t.kernel(bound))
    for lengths in ([0, 1, t.BN + 1, t.S], [t.S, 0, 7, 2 * t.BN]):
        out = torch.zeros(t.B, 64, t.D, device="cuda")
        kernel(torch.from_numpy(x).cuda(), torch.tensor(lengths, dtype=torch.int32, device="cuda"), out)
        np.testing.assert_allclose(out.cpu().numpy(), t.expected(x, lengths), rtol=1e-3, atol=1e-2)
