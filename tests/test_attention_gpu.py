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


def check(b, h, n, d, causal, dtype="float16", config=(128, 64, 2, 128), overlap=False, o_in_q=False,
          o_direct=False, **opts):
    bm, bn, st, th = config
    k = tilers.compile(fa.flash_attention(b, h, n, d, causal, bm, bn, st, th, dtype=dtype, overlap=overlap,
                                          o_in_q=o_in_q, o_direct=o_direct), out_idx=[3], **opts)
    if o_direct and opts.get("target", "auto") == "auto":
        assert "T.copy Q -> Q_shared: TMA by the producer warpgroup, once per tile" in k.report()
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


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("config,d", [((128, 128, 3, 256), 128), ((128, 128, 4, 256), 64), ((128, 64, 2, 256), 256)])
@pytest.mark.parametrize("overlap", [False, True])
def test_the_output_staged_in_q(config, d, overlap, causal, dtype):
    # bench/attention.py's fastest configs: more tiles than SMs, so each block stages
    # several tiles' outputs in Q's tile; fast math as the benchmark compiles them
    check(4, 16, 1000, d, causal, dtype, config=config, overlap=overlap, o_in_q=True, fast_math=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("config,d", [((128, 128, 3, 256), 128), ((128, 128, 4, 256), 64), ((192, 128, 2, 384), 64),
                                      ((128, 80, 2, 256), 256)])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("n", [1, 129, 1000])
def test_q_loaded_by_the_producer(n, config, d, overlap, causal, dtype):
    # the output stored from registers, Q filled by the producer's TMA (the next tile's
    # during this one's epilogue): 4 x 16 heads x 8 tiles of 128 rows walk 132 blocks
    check(4, 16, n, d, causal, dtype, config=config, overlap=overlap, o_direct=True, fast_math=True)
    if n == 1000 and not causal:
        check(4, 16, n, d, causal, dtype, config=config, overlap=overlap, o_direct=True, fast_math=True,
              persistent=False)


def torch_reference(q, k, v, causal, window=(-1, -1), softcap=0.0, align="bottom_right"):
    """float32 attention with flash_attention's grouped heads, window, soft cap and mask
    alignment (keys of another length); the [b, h, n] log-sum-exp too. A row that keeps no
    key gives 0 and an infinite log-sum-exp, as FlashAttention does."""
    qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))
    group = qf.shape[1] // kf.shape[1]
    kf, vf = (x.repeat_interleave(group, dim=1) for x in (kf, vf))
    s = qf @ kf.transpose(-1, -2) / (q.shape[-1] ** 0.5)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    n, n_kv = q.shape[1], k.shape[1]
    shift = n_kv - n if align == "bottom_right" else 0
    i = torch.arange(n, device=q.device)[:, None] + shift
    j = torch.arange(n_kv, device=q.device)[None, :]
    left, right = window
    if causal:
        right = 0
    keep = torch.ones(n, n_kv, dtype=torch.bool, device=q.device)
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    s = s.masked_fill(~keep, float("-inf"))
    empty = ~keep.any(-1)[:, None]
    lse = torch.logsumexp(s, dim=-1).masked_fill(empty[:, 0], float("inf"))
    p = torch.softmax(s.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return (p @ vf).transpose(1, 2), lse


GPU_VARIANTS = [
    dict(heads_kv=2), dict(heads_kv=1, causal=True), dict(window=(256, -1), causal=True),
    dict(window=(100, 37)), dict(softcap=30.0), dict(softcap=5.0, heads_kv=2, causal=True),
    dict(return_lse=True, causal=True), dict(return_lse=True, window=(128, 0), heads_kv=4),
]


@pytest.mark.parametrize("variant", GPU_VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("n", [1, 128, 129, 1000])
@pytest.mark.parametrize("config", [(128, 64, 2, 128, False), (128, 128, 2, 256, True)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_variants_against_torch(variant, n, config, dtype):
    variant = dict(variant)
    causal = variant.pop("causal", False)
    lse = variant.get("return_lse", False)
    bm, bn, st, th, overlap = config
    b, h, d = 2, 8, 128
    hk = variant.get("heads_kv", h)
    k = tilers.compile(fa.flash_attention(b, h, n, d, causal, bm, bn, st, th, dtype=dtype, overlap=overlap,
                                          **variant), out_idx=[3, 4] if lse else [3])
    g = torch.Generator(device="cuda").manual_seed(n)
    dt = getattr(torch, dtype)
    q = torch.randn(b, n, h, d, generator=g, device="cuda").to(dt)
    kk, v = (torch.randn(b, n, hk, d, generator=g, device="cuda").to(dt) for _ in range(2))
    got = k(q, kk, v)
    want, want_lse = torch_reference(q, kk, v, causal, variant.get("window", (-1, -1)), variant.get("softcap", 0.0))
    out = got[0] if lse else got
    err = ((out.float() - want).abs().max() / want.abs().max()).item()
    assert err < (5e-3 if dtype == "float16" else 3e-2), f"relative error {err:.3g}"
    if lse:
        assert (got[1] - want_lse).abs().max().item() < 1e-2


@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_256(causal):
    check(2, 4, 1000, 256, causal, config=(64, 64, 2, 128))


@pytest.mark.parametrize("lengths", [[1000, 1, 128, 129], [0, 300, 64], [4096]], ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("config", [(128, 64, 2, 128, False), (128, 128, 2, 256, True)])
def test_varlen_against_torch(lengths, causal, config):
    bm, bn, st, th, overlap = config
    h, hk, d = 8, 2, 128
    k = tilers.compile(fa.flash_attention(len(lengths), h, None, d, causal, bm, bn, st, th, overlap=overlap,
                                          heads_kv=hk, return_lse=True, varlen=True), out_idx=[5, 6])
    g = torch.Generator(device="cuda").manual_seed(len(lengths))
    total = sum(lengths)
    q = torch.randn(total, h, d, generator=g, device="cuda").half()
    kk, v = (torch.randn(total, hk, d, generator=g, device="cuda").half() for _ in range(2))
    cu = torch.tensor([0] + list(__import__("itertools").accumulate(lengths)), dtype=torch.int32, device="cuda")
    out, lse = k(q, kk, v, cu, max(lengths))
    for b, n in enumerate(lengths):
        if n == 0:
            continue
        s, e = cu[b].item(), cu[b + 1].item()
        want, want_lse = torch_reference(q[None, s:e], kk[None, s:e], v[None, s:e], causal)
        err = ((out[s:e].float() - want[0]).abs().max() / want.abs().max()).item()
        assert err < 5e-3, (b, err)
        assert (lse[:, s:e] - want_lse[0]).abs().max().item() < 1e-2


@pytest.mark.parametrize("n,n_kv", [(1, 4096), (300, 2000), (2000, 300), (128, 129)], ids=str)
@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
@pytest.mark.parametrize("config", [(128, 64, 2, 128, False), (128, 128, 3, 256, True)])
def test_query_and_key_lengths_differ_against_torch(n, n_kv, align, config):
    # chunked prefill and decoding with a KV cache (fewer queries than keys), and the reverse
    bm, bn, st, th, overlap = config
    b, h, hk, d = 2, 8, 2, 128
    k = tilers.compile(fa.flash_attention(b, h, n, d, True, bm, bn, st, th, overlap=overlap, heads_kv=hk,
                                          return_lse=True, seq_len_kv=n_kv, align=align, o_in_q=st == 3),
                       out_idx=[3, 4])
    g = torch.Generator(device="cuda").manual_seed(n + n_kv)
    q = torch.randn(b, n, h, d, generator=g, device="cuda").half()
    kk, v = (torch.randn(b, n_kv, hk, d, generator=g, device="cuda").half() for _ in range(2))
    out, lse = k(q, kk, v)
    want, want_lse = torch_reference(q, kk, v, True, align=align)
    assert torch.isfinite(out).all()
    err = ((out.float() - want).abs().max() / want.abs().max()).item()
    assert err < 5e-3, f"relative error {err:.3g}"
    assert torch.equal(torch.isinf(lse), torch.isinf(want_lse))
    finite = torch.isfinite(want_lse)
    assert (lse[finite] - want_lse[finite]).abs().max().item() < 1e-2
