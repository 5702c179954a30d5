"""The escape hatch on the GPU (tests/test_extern.py's kernel): an imported device function
called by value and by address, a CUDA builtin, inline PTX and an atomic through an
address of a global tensor, against numpy."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_extern import expected, extern_kernel  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("N", [256, 200, 1])
def test_extern_calls(N):
    A = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    a, b, count = torch.from_numpy(A).cuda(), torch.zeros(N, device="cuda"), torch.zeros(1, dtype=torch.int32, device="cuda")
    tilers.compile(extern_kernel(N))(a, b, count)
    np.testing.assert_allclose(b.cpu().numpy(), expected(A), rtol=1e-6, atol=1e-6)
    assert count.item() == 128  # block 0's threads, each once
