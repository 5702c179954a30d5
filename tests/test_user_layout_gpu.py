"""T.Layout on the GPU (tests/test_user_layout.py's kernels): the dQ layout of TileLang's
backward attention, accumulated with element and tile atomics and read back by a copy; a
transposed store; a swizzled shared tile. Against numpy."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_user_layout import (  # noqa: E402
    accumulate,
    dq_storage,
    postprocess,
    shared_layout_kernel,
    transpose_store,
)

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("tile_atomic", [False, True])
@pytest.mark.parametrize("L", [128, 96])
def test_the_dq_layout(tile_atomic, L):
    B, H, D, bl = 2, 4, 64, 64
    x = torch.randn(B, L, H, D, device="cuda")
    dq = torch.zeros_like(x)
    acc = tilers.compile(accumulate(B, L, H, D, bl, tile_atomic))
    acc(x, dq)
    acc(x, dq)
    np.testing.assert_allclose(dq.cpu().numpy(), dq_storage(2 * x.cpu().numpy()), rtol=1e-5, atol=1e-5)
    out = tilers.compile(postprocess(B, L, H, D, bl), out_idx=[1])(dq)
    torch.testing.assert_close(out.float(), 2 * x, rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("M", [64, 50])
def test_a_transposed_store(M):
    N = 16
    a = torch.randn(M, N, device="cuda")
    b = torch.zeros_like(a)
    tilers.compile(transpose_store(M, N, 32))(a, b)
    torch.testing.assert_close(b.view(-1), (2 * a).t().reshape(-1))


def test_a_swizzled_shared_tile():
    a = torch.randn(32, 64, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(tilers.compile(shared_layout_kernel(32, 64), out_idx=[1])(a), a)
