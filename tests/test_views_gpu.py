"""Views and im2col on the GPU (tests/test_views.py's convolution) against a float64
reference, including TileLang's example shape."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_views import CASES, conv_inputs, conv_reference, convolution  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("case", CASES + [(8, 64, 32, 32, 128, 3, 1, 1, 1)])
def test_convolution(case):
    a, b, S, D, P = conv_inputs(case)
    out = convolution(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), S, D, P)
    np.testing.assert_allclose(out.cpu().numpy().astype(np.float64), conv_reference(a, b, S, P, D), rtol=2e-3, atol=3e-2)
