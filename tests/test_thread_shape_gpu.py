"""Block shapes on the GPU (tests/test_thread_shape.py's kernels): threads=(x, y[, z])
coordinates and threads=n of part of a warp, against numpy."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_thread_shape import coordinates, partial_warp_tiles  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(32, 4), (8, 4, 2), (16, 32), (5,), (3, 7), (1,)])
def test_thread_coordinates(shape):
    f, want, _ = coordinates(shape)
    out = torch.full(want.shape, -1, dtype=torch.int32, device="cuda")
    tilers.compile(f)(out)
    np.testing.assert_array_equal(out.cpu().numpy(), want)


def test_partial_warp_per_thread_code():
    A = np.arange(80, dtype=np.float32).reshape(5, 16)
    a, b = torch.from_numpy(A).cuda(), torch.zeros(5, 16, device="cuda")
    cnt = torch.zeros(1, dtype=torch.int32, device="cuda")
    tilers.compile(partial_warp_tiles())(a, b, cnt)
    np.testing.assert_array_equal(b.cpu().numpy(), A * 2 + np.arange(5)[:, None])
    assert cnt.item() == 15
