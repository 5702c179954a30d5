"""Manual pipeline schedules on the GPU: the chain kernel of tests/test_schedule.py and the
FlashAttention forward with FA3's stage=/order= overlap, against torch, at trip counts 0 to
num_stages + 1, ragged lengths, fp16 and bf16, every pipeline form."""

import os
import sys

import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from test_attention_gpu import check  # noqa: E402
from test_schedule import OVERLAP, SPREAD, chain, two_reads  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def chain_torch(q, k, v):
    s = (q.float() @ k.float().T) * 0.125
    return s.to(q.dtype).float() @ v.float()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("n", [64, 128, 192, 256, 1000])
def test_chain_against_torch(n, stages, dtype):
    dt = getattr(torch, dtype)
    k = tilers.compile(chain(512, n, 64, 64, stages=stages, dtype=dtype, **OVERLAP), out_idx=[3])
    q, kk, v = (torch.randn(s, device="cuda").to(dt) for s in ((512, 64), (n, 64), (n, 64)))
    out = k(q, kk, v).float()
    want = chain_torch(q, kk, v)
    assert ((out - want).abs().max() / want.abs().max()).item() < 2e-2


@pytest.mark.parametrize("n", [0, 8, 64, 200, 4096])
def test_chain_with_a_dynamic_length(n):
    k = tilers.compile(chain(256, T.dynamic("N", multiple_of=8), 64, 64, **OVERLAP), out_idx=[3])
    q, kk, v = (torch.randn(s, device="cuda").half() for s in ((256, 64), (n, 64), (n, 64)))
    out = k(q, kk, v).float()
    want = chain_torch(q, kk, v)
    assert torch.allclose(out, want, atol=2e-2 * max(1.0, want.abs().max().item()))


@pytest.mark.parametrize("options", [{"persistent": False}, {"persistent": "pingpong"}, {"tma": False}])
def test_chain_in_other_pipelines(options):
    k = tilers.compile(chain(1024, 1000, 64, 64, **OVERLAP), out_idx=[3], **options)
    q, kk, v = (torch.randn(s, device="cuda").half() for s in ((1024, 64), (1000, 64), (1000, 64)))
    want = chain_torch(q, kk, v)
    assert ((k(q, kk, v).float() - want).abs().max() / want.abs().max()).item() < 2e-2


@pytest.mark.parametrize("n", [64, 192, 320])
def test_a_ring_tile_read_two_stages_apart(n):
    k = tilers.compile(two_reads(64, n, 64, 3, **SPREAD), out_idx=[2, 3])
    a, b = torch.randn(n, 64, device="cuda").half(), torch.randn(n, 64, device="cuda").half()
    c, d = k(a, b)
    want = a.float().T @ b.float()
    for x in (c, d):
        assert torch.allclose(x.float(), want, atol=5e-2, rtol=1e-2)


def attention(b, h, n, d, causal, dtype="float16", config=(128, 128, 2, 256)):
    check(b, h, n, d, causal, dtype, config, overlap=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,d", [(1000, 128), (257, 64), (2048, 128), (128, 64)])
def test_flash_attention_overlap_against_sdpa(n, d, causal, dtype):
    attention(2, 4, n, d, causal, dtype)


@pytest.mark.parametrize("config", [(128, 64, 2, 256), (128, 64, 3, 256), (64, 64, 2, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_overlap_configs(config, causal):
    attention(1, 8, 1536, 128, causal, config=config)
