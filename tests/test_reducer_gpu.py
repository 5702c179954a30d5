"""T.alloc_reducer on the GPU (tests/test_reducer.py's gemv), against numpy."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_reducer import CASES, gemv, inputs, want  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("op,style,M,N", CASES)
@pytest.mark.parametrize("options", [{}, {"wgmma": False, "tma": False}])
def test_against_numpy(op, style, M, N, options):
    A, X = inputs(M, N)
    k = tilers.compile(gemv(M, N, op=op, style=style), out_idx=[2], **options)
    got = k(torch.from_numpy(A).cuda(), torch.from_numpy(X).cuda()).cpu().numpy()
    np.testing.assert_allclose(got, want(A, X, op), rtol=1e-4, atol=1e-3)
