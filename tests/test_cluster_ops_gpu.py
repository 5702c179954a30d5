"""`T.copy_cluster` / `T.cluster_sync` on the GPU (sm_90a): the gather and ring kernels of
tests/test_cluster_ops.py against numpy, clusters of 2, 4, 8 and 16 (non-portable: allowed when loaded), repeated launches. Run per
file with a timeout (scripts/gpu-check): a hang fails this file."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_cluster_ops import (  # noqa: E402
    gather,
    gather_rows,
    rank_per_block,
    reduce_ring,
    ring_reference,
    split_barrier_gather,
    zeroed_through_a_view,
)

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
    pytest.skip("thread-block clusters need an sm_90 GPU", allow_module_level=True)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_gather(n):
    k = tilers.compile(gather(n, rows=33))
    A = torch.randn(n * 33, 64, device="cuda")
    for _ in range(3):
        B = torch.zeros_like(A)
        k(A, B)
        torch.cuda.synchronize()
        assert torch.equal(B, 2 * A)


@pytest.mark.parametrize("n", [2, 4])
def test_ring(n):
    k = tilers.compile(reduce_ring(n))
    A = torch.randn(n * 2, 96, device="cuda")
    B = torch.zeros_like(A)
    k(A, B)
    torch.cuda.synchronize()
    np.testing.assert_allclose(B.cpu().numpy(), ring_reference(A.cpu().numpy(), n), rtol=1e-6, atol=1e-6)


def test_a_grid_of_symbolic_size():
    k = tilers.compile(gather_rows(4))
    for m in (4, 12, 4096):
        A = torch.randn(m, 64, device="cuda")
        B = torch.zeros_like(A)
        k(A, B)
        torch.cuda.synchronize()
        assert torch.equal(B, 2 * A)
    A = torch.randn(6, 64, device="cuda")
    with pytest.raises(ValueError, match="clusters of 4 blocks along x, so it must be a multiple of 4"):
        k(A, torch.zeros_like(A))


def test_a_reached_tile_zeroed_through_a_view():
    k = tilers.compile(zeroed_through_a_view())
    A = torch.randn(4, 64, device="cuda")
    for _ in range(3):
        B = torch.zeros_like(A)
        k(A, B)
        torch.cuda.synchronize()
        assert torch.equal(B, A + 1)


@pytest.mark.parametrize("n", [2, 4, 16])
def test_split_cluster_barrier(n):
    # T.cluster_arrive / T.cluster_wait around work on a tile no peer reaches
    k = tilers.compile(split_barrier_gather(n))
    A = torch.randn(n * 2, 64, device="cuda")
    for _ in range(3):
        B, C = torch.zeros_like(A), torch.zeros_like(A)
        k(A, B, C)
        torch.cuda.synchronize()
        assert torch.equal(B, 2 * A) and torch.equal(C, (A + 1).flip(1))


@pytest.mark.parametrize("n", [4, 16])
def test_rank_per_block(n):
    k = tilers.compile(rank_per_block(n))
    A = torch.zeros(128, dtype=torch.int32, device="cuda")
    k(A)
    torch.cuda.synchronize()
    assert torch.equal(A.cpu(), torch.arange(128, dtype=torch.int32) % n)
