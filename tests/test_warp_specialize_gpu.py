"""Explicit warp specialization on the H200: the kernels of tests/test_warp_specialize.py
against torch, for ragged shapes and both 16-bit dtypes, in the eager style too; the SASS
has the bulk tensor copies (UTMALDG) feeding HGMMA."""

import os
import subprocess
import sys

import pytest
import tilers

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import test_warp_specialize as ws  # noqa: E402


def run(factory, M, N, K, dtype):
    name = "float16" if dtype is torch.float16 else "bfloat16"
    kernel = tilers.compile(factory(M, N, K, dtype=name), out_idx=[2])
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    c = kernel(a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    return kernel


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mnk", [(256, 256, 128), (200, 136, 192), (1024, 1024, 1024), (64, 256, 320),
                                 (128, 128, 64), (1000, 1000, 1024)])
@pytest.mark.parametrize("factory", [ws.producer_consumer, ws.two_slot_ring, ws.split_columns])
def test_against_torch(factory, mnk, dtype):
    run(factory, *mnk, dtype)


def test_the_eager_style_against_torch():
    for M, N, K in [(256, 128, 192), (512, 512, 512)]:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        c = ws.eager_producer_consumer(a, b)
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)


def test_sass_has_tma_feeding_hgmma(tmp_path):
    kernel = run(ws.producer_consumer, 1024, 1024, 1024, torch.float16)
    path = tmp_path / "k.cubin"
    path.write_bytes(kernel.cubin)
    sass = subprocess.run(["cuobjdump", "-sass", str(path)], capture_output=True, text=True).stdout
    assert "UTMALDG" in sass and "HGMMA" in sass and "SYNCS" in sass, sass[:2000]


@pytest.mark.parametrize("tiles", [1, 5, 12])
def test_a_tma_copy_at_a_position_read_from_shared_memory(tiles):
    x = torch.randn(8 * 64, 64, device="cuda", dtype=torch.float16)
    off = torch.randint(-20, 20, (tiles,), device="cuda", dtype=torch.int32)
    w = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    out = torch.zeros(tiles * 64, 64, device="cuda", dtype=torch.float32)
    tilers.compile(ws.gathered_tiles(tiles))(x, off, w, out)
    want = torch.cat([x[int(o) % 8 * 64:(int(o) % 8 + 1) * 64].float() @ w.float() for o in off.cpu()])
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-1)
