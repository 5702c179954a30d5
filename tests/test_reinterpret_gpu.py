"""T.reinterpret on the GPU: the same bits as numpy's views (tests/test_reinterpret.py's
kernels and inputs), every pair of widths."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_reinterpret import PAIRS, bits_kernel, inputs, numpy_dtype  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda p: p if isinstance(p, str) else None)
def test_the_bits_against_numpy(src, dst):
    n = 1000
    a = inputs(n, src)
    k = tilers.compile(bits_kernel(n, src, dst), out_idx=[1])
    # through raw bytes: torch has no uint16/uint32 arithmetic but holds them
    ta = torch.from_numpy(a.view(np.uint8).copy()).cuda().view(getattr(torch, src))
    got = k(ta).cpu().view(torch.uint8).numpy()
    assert np.array_equal(got, a.view(numpy_dtype(dst)).view(np.uint8))
