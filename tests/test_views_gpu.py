"""Views and im2col on the GPU (tests/test_views.py's convolution) against a float64
reference, including TileLang's example shape."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_views import CASES, conv_inputs, conv_reference, convolution, retyped_inputs, retyped_view  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("case", CASES + [(8, 64, 32, 32, 128, 3, 1, 1, 1)])
def test_convolution(case):
    a, b, S, D, P = conv_inputs(case)
    out = convolution(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), S, D, P)
    np.testing.assert_allclose(out.cpu().numpy().astype(np.float64), conv_reference(a, b, S, P, D), rtol=2e-3, atol=3e-2)


def test_a_view_of_another_dtype_shares_its_tiles_bytes():
    A, B, ref = retyped_inputs()
    c, d = torch.zeros(64, 64, device="cuda"), torch.zeros(64, 64, device="cuda")
    tilers.compile(retyped_view())(torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda(), c, d)
    np.testing.assert_allclose(c.cpu().numpy(), ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(d.cpu().numpy(), 2 * ref, rtol=1e-4, atol=1e-3)
