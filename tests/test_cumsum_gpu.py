"""T.cumsum on the GPU against torch.cumsum (tests/test_cumsum.py's kernels)."""

import os
import sys

import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_cumsum import scan_kernel  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape,dim", [((64, 32), 1), ((64, 32), 0), ((128,), 0)], ids=str)
@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("reverse", [False, True])
def test_against_torch(shape, dim, scope, reverse):
    a = torch.randn(*shape, device="cuda")
    got = tilers.compile(scan_kernel(shape, scope, dim, reverse, True), out_idx=[1])(a)
    want = torch.cumsum(a.flip(dim), dim).flip(dim) if reverse else torch.cumsum(a, dim)
    assert (got - want).abs().max().item() < 1e-4
