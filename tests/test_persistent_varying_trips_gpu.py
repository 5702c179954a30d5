"""tests/test_persistent_varying_trips.py's block-triangular product on the GPU: the folded
persistent walk (tiles in pairs of equal work, the ring's position a running sum) against
torch, on grids with more tiles than SMs (several pairs per block), odd tile counts, and
not persistent (persistent=False) for comparison."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import test_persistent_varying_trips as vt  # noqa: E402
import tilers  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def expected(a, b, gx, gy, bm=64, bn=64, bk=64):
    out = torch.zeros(2 * gx * gy, bm, bn, device="cuda")
    af, bf = a.float(), b.float()
    for x in range(gx):
        keys = -(-(x + 1) * bm // bk) * bk
        for y in range(gy):
            out[y * gx + x] = af[x * bm:(x + 1) * bm, :keys] @ bf[:keys, y * bn:(y + 1) * bn]
    return out


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("gx,gy,bk", [(3, 3, 64), (16, 20, 64), (17, 19, 32), (1, 5, 64)], ids=str)
def test_block_triangular(gx, gy, bk, persistent):
    torch.manual_seed(gx * 100 + gy)
    a = torch.randn(gx * 64, gx * 64, device="cuda", dtype=torch.float16)
    b = torch.randn(gx * 64, gy * 64, device="cuda", dtype=torch.float16)
    kernel = tilers.compile(vt.block_triangular(gx, gy, bk=bk), persistent=persistent)
    report = kernel.report()
    assert ("pairs of tiles" in report) == (persistent and gx > 1), report
    c = torch.zeros(2 * gx * gy, 64, 64, device="cuda")
    for _ in range(2):  # twice: C accumulates, so a tile walked twice or skipped shows
        kernel(a, b, c)
    torch.testing.assert_close(c, 2 * expected(a, b, gx, gy, bk=bk), rtol=1e-3, atol=5e-2)
