"""tests/test_register_a_pipeline.py's kernels on the GPU, against numpy: a register-A wgmma
operand written by the pipelined loop's body, at every stage count, plain and transposed."""

import numpy as np
import pytest
import tilers
from test_register_a_pipeline import inputs, scaled_a, want

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("options", [{}, {"wgmma": False, "tma": False}])
@pytest.mark.parametrize("M,N,K", [(64, 128, 256), (100, 200, 200), (256, 256, 1024)])
def test_against_numpy(M, N, K, stages, transposed, options):
    a, s, b = inputs(M, N, K, transposed, seed=stages)
    k = tilers.compile(scaled_a(M, N, K, stages=stages, transposed=transposed), out_idx=[3], **options)
    out = k(*(torch.from_numpy(x).cuda() for x in (a, s, b))).cpu().numpy()
    ref = want(a, s, b, transposed)
    assert np.abs(out - ref).max() <= 1e-2 * (1 + np.abs(ref).max())
