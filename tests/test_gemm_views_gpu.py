"""T.gemm on part of a shared tile on the H200: the kernels of tests/test_gemm_views.py (one
stage of the kernel's own ring, K halves of a tile, MN-major column panels, a compiler-made
TMA pipeline over K halves, TileLang's barrier pipeline on T.tma_copy stages) against torch,
fp16 and bf16, ragged shapes, on wgmma (sm_90a) and on mma.sync (wgmma=False)."""

import os
import sys

import pytest
import tilers

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import test_gemm_views as views  # noqa: E402


@pytest.mark.parametrize("wgmma", [True, False])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("factory,mnk,arches", views.CASES, ids=[c[0].__name__ for c in views.CASES])
def test_against_torch(factory, mnk, arches, dtype, wgmma):
    if not wgmma and "sm_80" not in arches:
        pytest.skip("the barrier pipeline needs sm_90a's mbarriers and TMA")
    M, N, K = mnk
    for scale in (1, 4):
        M2, N2, K2 = M * scale, N * scale, (K if factory is views.k_halves else K * scale)
        kernel = tilers.compile(factory(M2, N2, K2, dtype=dtype), out_idx=[2], wgmma=wgmma)
        a_t = factory is views.column_panels
        b_t = factory is views.k_halves
        dt = getattr(torch, dtype)
        a = torch.randn((K2, M2) if a_t else (M2, K2), device="cuda").to(dt)
        b = torch.randn((N2, K2) if b_t else (K2, N2), device="cuda").to(dt)
        want = (a.T if a_t else a).double() @ (b.T if b_t else b).double()
        got = kernel(a, b)
        torch.cuda.synchronize()
        err = ((got.double() - want).abs().max() / (want.abs().max() + 1)).item()
        assert err < 1e-2, f"{factory.__name__} {M2}x{N2}x{K2}: max error {err:.3g}"
