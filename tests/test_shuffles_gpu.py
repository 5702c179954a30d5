"""Warp shuffles on the GPU (tests/test_shuffles.py's kernel) against numpy, every dtype."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_shuffles import shuffles, shuffles_expected  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "int64"])
def test_shuffles(dtype):
    rng = np.random.default_rng(1)
    x = (rng.integers(-50, 50, 64) if "int" in dtype else rng.standard_normal(64)).astype(dtype)
    out = torch.zeros((64, 5), dtype=getattr(torch, dtype), device="cuda")
    tilers.compile(shuffles(dtype))(torch.from_numpy(x).cuda(), out)
    got, want = out.cpu().numpy(), shuffles_expected(x)
    np.testing.assert_array_equal(got[:, :4], want[:, :4])
    tol = 1e-2 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(got[:, 4].astype(np.float64), want[:, 4].astype(np.float64), rtol=tol, atol=tol)
