"""tests/test_simt_gemm.py's CUDA-core gemms on the GPU, against float64 numpy: float32 x
float32 at ragged sizes, every transpose, a fragment A operand, pipelined and not."""

import numpy as np
import pytest
import tilers
from test_simt_gemm import CASES, gemm, operands, want

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("a_fragment", [False, True])
@pytest.mark.parametrize("M,N,K,ta,tb,stages", CASES + [(256, 256, 512, False, False, 3)])
@pytest.mark.parametrize("options", [{}, {"wgmma": False, "tma": False}])
def test_against_numpy(M, N, K, ta, tb, stages, a_fragment, options):
    a, b = operands(M, N, K, ta, tb, np.float32, seed=M + K)
    k = tilers.compile(gemm(M, N, K, ta=ta, tb=tb, stages=stages, a_fragment=a_fragment), out_idx=[2], **options)
    out = k(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()
    assert np.abs(out - want(a, b, ta, tb)).max() < 1e-3 * K


def test_float64():
    a, b = operands(64, 64, 64, False, False, np.float64)
    k = tilers.compile(gemm(64, 64, 64, adt="float64", cdt="float64"), out_idx=[2])
    out = k(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()
    assert np.abs(out - want(a, b, False, False)).max() < 1e-9
