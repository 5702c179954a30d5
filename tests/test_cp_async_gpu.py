"""A kernel's own cp.async on the GPU (tests/test_cp_async.py's kernels), against numpy:
gathers through commit/wait groups, the predicate's zero-fill, and a producer warpgroup
handing shared slots to consumers with cp.async.mbarrier.arrive.noinc."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_cp_async import gather_inputs, gather_rows, staged_rows, uniform_copy  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def cuda(x):
    return torch.from_numpy(x).cuda()


@pytest.mark.parametrize("dtype,elems", [("float16", 8), ("float16", 4), ("float16", 2), ("float32", 1), ("int32", 4)])
def test_gather(dtype, elems):
    N, D, R = 300, 128, 40
    X, I, O = gather_inputs(N, D, R, dtype)
    out = cuda(O)
    tilers.compile(gather_rows(N, D, R, dtype, elems))(cuda(X), cuda(I), out)
    np.testing.assert_array_equal(out.cpu().numpy(), X[I])


def test_predicate_zero_fills():
    N, D, R = 300, 128, 40
    X, I, O = gather_inputs(N, D, R)
    out = cuda(O + 7)
    tilers.compile(gather_rows(N, D, R, valid=17))(cuda(X), cuda(I), out)
    want = X[I]
    want[17:] = 0
    np.testing.assert_array_equal(out.cpu().numpy(), want)


@pytest.mark.parametrize("tiles,stages,producer_first", [(1, 2, False), (7, 2, True), (12, 3, False), (12, 3, True)])
def test_mbarrier_hand_over(tiles, stages, producer_first):
    X = np.random.default_rng(tiles).standard_normal((tiles * 16, 128)).astype(np.float16)
    bias = np.random.default_rng(1).standard_normal(128).astype(np.float16)
    out = torch.zeros(tiles * 16, 128, dtype=torch.float16).cuda()
    tilers.compile(staged_rows(tiles, 128, stages=stages, producer_first=producer_first))(cuda(X), cuda(bias), out)
    np.testing.assert_allclose(out.cpu().numpy().astype(np.float32), (X + bias).astype(np.float32), rtol=1e-3, atol=1e-3)


def test_a_copy_every_thread_would_make_alike():
    X = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float16)
    out = torch.zeros(4, 64, dtype=torch.float16).cuda()
    tilers.compile(uniform_copy())(cuda(X), out)
    np.testing.assert_array_equal(out.cpu().numpy(), X)
