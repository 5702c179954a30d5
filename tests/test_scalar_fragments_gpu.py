"""Fragments read or written by scalar code on the GPU: every thread keeps the whole
fragment, against numpy on the interpreter's reference, on sm_90a and the mma.sync path."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_scalar_fragments import inputs, masked_rows, reference

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("options", [{}, {"wgmma": False}])
def test_masked_rows_match_numpy(seed, options):
    kernel = tilers.compile(masked_rows(), out_idx=[3], **options)
    A, Mask, last = inputs(seed)
    out = kernel(torch.from_numpy(A).cuda(), torch.from_numpy(Mask).cuda(), torch.from_numpy(last).cuda())
    np.testing.assert_allclose(out.cpu().numpy(), reference(A, Mask, last), rtol=1e-5, atol=1e-5)
