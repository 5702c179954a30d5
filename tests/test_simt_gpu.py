"""SIMT code on the thread index and device `break` on the GPU (tests/test_simt.py's
kernels), against numpy."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_simt import countdown, first_above, histogram, mask_inputs, mask_rows, mask_want  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def cuda(x):
    return torch.from_numpy(x).cuda()


@pytest.mark.parametrize("M,N", [(6, 1000), (64, 4096)])
def test_strided_masking(M, N):
    L, ks, ke = mask_inputs(M, N)
    got = cuda(L)
    tilers.compile(mask_rows(M, N))(got, cuda(ks), cuda(ke))
    np.testing.assert_array_equal(got.cpu().numpy(), mask_want(L, ks, ke))


@pytest.mark.parametrize("N", [1000, 4096])
def test_histogram(N):
    X = np.random.default_rng(1).integers(0, 1 << 20, N).astype(np.int32)
    H, P = torch.zeros(64, dtype=torch.int32).cuda(), torch.zeros(64, dtype=torch.int32).cuda()
    tilers.compile(histogram(N))(cuda(X), H, P)
    want = np.bincount(X % 64, minlength=64)
    np.testing.assert_array_equal(H.cpu().numpy(), want)
    np.testing.assert_array_equal(P.cpu().numpy(), np.cumsum(want))


def test_per_thread_break():
    R, N = 200, 37
    A = np.random.default_rng(2).random((R, N)).astype(np.float32) * 0.6
    O = torch.zeros(R, dtype=torch.int32).cuda()
    tilers.compile(first_above(R, N))(cuda(A), O)
    hit = A > 0.5
    np.testing.assert_array_equal(O.cpu().numpy(), np.where(hit.any(1), hit.argmax(1), -1))


@pytest.mark.parametrize("start", [10, 0, 100])
def test_block_wide_break(start):
    N = 8
    Y = torch.zeros(N, dtype=torch.int32).cuda()
    tilers.compile(countdown(N))(cuda(np.array([start], np.int32)), Y)
    want = [max(0, start - 3 * r) if start - 3 * r > 0 and all(start - 3 * q > 0 for q in range(r)) else 0
            for r in range(N)]
    np.testing.assert_array_equal(Y.cpu().numpy(), np.array(want, np.int32))
