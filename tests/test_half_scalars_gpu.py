"""float16 / bfloat16 scalar parameters on the GPU: the launcher packs the storage bits, the
kernel reads them as floats (tests/test_half_scalars.py's kernel)."""

import os
import sys

import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_half_scalars import scale  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("value", [0.1, -3.0, 1000.0])
def test_against_torch(dtype, value):
    dt = getattr(torch, dtype)
    a = torch.linspace(-4, 4, 256, device="cuda").to(dt)
    got = tilers.compile(scale(dtype), out_idx=[2])(a, value)
    s = torch.tensor(value, dtype=dt, device="cuda")
    want = (a * s + s)
    assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
