"""T.copy of a fixed part of a fragment on the H200: the kernels of
tests/test_fragment_parts.py against torch, on wgmma (sm_90a) and mma.sync (wgmma=False)."""

import os
import sys

import pytest
import tilers

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import test_fragment_parts as parts  # noqa: E402


@pytest.mark.parametrize("wgmma", [True, False])
@pytest.mark.parametrize("mode", ["shared", "global", "offset"])
def test_a_part_of_an_accumulator(mode, wgmma):
    M, N, K, V = parts.M, parts.N, parts.K, parts.V
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    full = a.double() @ b.double()
    want = full[8:8 + V] if mode == "offset" else full[:V]
    k = tilers.compile(parts.out_of_gemm(mode), out_idx=[2], wgmma=wgmma)
    torch.testing.assert_close(k(a, b).double(), want, rtol=1e-2, atol=5e-2)


def test_into_a_part():
    M, N, V = parts.M, parts.N, parts.V
    a = torch.randn(V, N, device="cuda", dtype=torch.float32)
    want = torch.ones(M, N, device="cuda")
    want[8:8 + V] = a
    k = tilers.compile(parts.into_a_part, out_idx=[1])
    assert torch.equal(k(a), want)
