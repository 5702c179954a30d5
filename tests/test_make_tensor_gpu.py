"""tests/test_make_tensor.py's grouped GEMM on the GPU: groups of 16, 33 and 64 rows (and a
larger case) in separate tensors reached through address tables, against torch."""

import os
import sys

import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_make_tensor import grouped_gemm  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("sizes,K,N,tiles", [((16, 33, 64), 128, 96, (32, 32, 32)),
                                             ((64, 128, 256), 1024, 512, (64, 128, 64))])
def test_grouped_gemm_against_torch(sizes, K, N, tiles):
    bm, bn, bk = tiles
    max_M = max(sizes)
    A = [torch.randn(max_M, K, device="cuda", dtype=torch.float16) for _ in sizes]
    B = [torch.randn(K, N, device="cuda", dtype=torch.float16) for _ in sizes]
    C = [torch.zeros(max_M, N, device="cuda", dtype=torch.float16) for _ in sizes]
    table = lambda ts: torch.tensor([t.data_ptr() for t in ts], device="cuda", dtype=torch.int64)  # noqa: E731
    offsets, acc = [], 0
    for m in sizes:
        offsets.append(acc)
        acc += (m + bm - 1) // bm
    kernel = tilers.compile(grouped_gemm(sizes, K, N, bm, bn, bk))
    kernel(table(A), table(B), table(C), torch.tensor(offsets, device="cuda", dtype=torch.int32))
    for a, b, c, m in zip(A, B, C, sizes):
        torch.testing.assert_close(c[:m].float(), (a[:m].float() @ b.float()), rtol=2e-2, atol=2e-1)
