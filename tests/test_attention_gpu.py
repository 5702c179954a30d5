"""The FlashAttention forward of examples/flash_attention.py on the H200, against torch's
SDPA: ragged sequence lengths, causal or not, head dims 64 and 128, fp16 and bf16, the
configurations bench/attention.py tunes over."""

import os
import sys

import pytest
import tilers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def check(b, h, n, d, causal, dtype="float16", config=(128, 64, 2, 128), overlap=False):
    bm, bn, st, th = config
    k = tilers.compile(fa.flash_attention(b, h, n, d, causal, bm, bn, st, th, dtype=dtype, overlap=overlap),
                       out_idx=[3])
    g = torch.Generator(device="cuda").manual_seed(1)
    dt = getattr(torch, dtype)
    q, kk, v = (torch.randn(b, n, h, d, generator=g, device="cuda").to(dt) for _ in range(3))
    out = k(q, kk, v)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), kk.transpose(1, 2).float(), v.transpose(1, 2).float(), is_causal=causal
    ).transpose(1, 2)
    err = ((out.float() - want).abs().max() / want.abs().max()).item()
    assert err < (5e-3 if dtype == "float16" else 3e-2), f"relative error {err:.3g}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,d", [(1000, 128), (257, 64), (2048, 64), (128, 128)])
def test_against_sdpa(n, d, causal, dtype):
    check(2, 4, n, d, causal, dtype)


@pytest.mark.parametrize("config", [(128, 64, 2, 128), (128, 128, 2, 256), (64, 64, 3, 128), (128, 64, 3, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_benchmarked_configs(config, causal):
    check(1, 8, 1536, 128, causal, config=config)
