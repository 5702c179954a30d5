"""The layout conversion of tests/test_relayout.py on the GPU, against numpy."""

import numpy as np
import pytest
import tilers
from test_relayout import accumulator_windows, scaled_rows, want, window_inputs

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("M,D,S,threads", [(64, 128, 4, 128), (128, 64, 3, 256), (32, 256, 16, 128)])
@pytest.mark.parametrize("options", [{}, {"wgmma": False, "tma": False}])
def test_against_numpy(M, D, S, threads, options):
    # (a kernel built for sm_80 is refused on this device: the portable path by its options)
    rng = np.random.default_rng(1)
    L = rng.random((S, M), dtype=np.float32)
    P = rng.random((M, D)).astype(np.float16)
    k = tilers.compile(scaled_rows(M, D, S, threads), out_idx=[2], **options)
    out = k(torch.from_numpy(L).cuda(), torch.from_numpy(P).cuda()).cpu().numpy()
    assert np.abs(out - want(L, P)).max() < 1e-4


@pytest.mark.parametrize("options", [{}, {"wgmma": False, "tma": False}])
def test_a_fragment_copy_between_layouts_against_numpy(options):
    from test_relayout import two_gemms, two_gemms_inputs

    A, B, V, want2 = two_gemms_inputs()
    k = tilers.compile(two_gemms(), out_idx=[3], **options)
    out = k(*[torch.from_numpy(x).cuda() for x in (A, B, V)]).cpu().numpy()
    np.testing.assert_allclose(out, want2, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("rows,guarded,device_loop", [(32, True, False), (16, True, True), (32, False, True)])
def test_accumulator_windows(rows, guarded, device_loop):
    A, B, ref = window_inputs()
    c = torch.zeros(64, 64, device="cuda")
    tilers.compile(accumulator_windows(rows=rows, guarded=guarded, device_loop=device_loop))(torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda(), c)
    np.testing.assert_allclose(c.cpu().numpy(), ref, rtol=1e-4, atol=1e-3)
