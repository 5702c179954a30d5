"""examples/flash_decoding.py on the GPU against torch: contiguous and paged caches (random
page order), GQA 32 query heads over 8 KV heads, head dim 128, lengths 1, one tile, one tile
+ 1 and mixed per sequence."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_decoding as fd  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def reference(q, k, v, seqlens):
    B, H, D = q.shape
    group = H // k.shape[2]
    out = torch.zeros(B, H, D, device=q.device)
    for b in range(B):
        n = int(seqlens[b])
        kk = k[b, :n].float().repeat_interleave(group, dim=1)  # [n, H, D]
        vv = v[b, :n].float().repeat_interleave(group, dim=1)
        s = torch.einsum("hd,nhd->hn", q[b].float(), kk) / D**0.5
        out[b] = torch.einsum("hn,nhd->hd", s.softmax(-1), vv)
    return out


def paged(k, v, page_size):
    B, S, Hkv, D = k.shape
    pages = S // page_size
    order = torch.randperm(B * pages, device=k.device)
    table = order.view(B, pages).to(torch.int32)
    kp = torch.empty(B * pages, page_size, Hkv, D, device=k.device, dtype=k.dtype)
    vp = torch.empty_like(kp)
    kp[table.flatten().long()] = k.reshape(B * pages, page_size, Hkv, D)
    vp[table.flatten().long()] = v.reshape(B * pages, page_size, Hkv, D)
    return kp, vp, table


def against_torch(page_size, dtype, **config):
    """Batch 4 of lengths 1, 64, 65 and 1000 (of 1024), 32 query heads over 8 KV heads of 128:
    the kernel of `config` against torch; the kernel."""
    B, H, Hkv, D, S = 4, 32, 8, 128, 1024
    torch_dtype = getattr(torch, dtype)
    q = torch.randn(B, H, D, device="cuda").to(torch_dtype)
    k = torch.randn(B, S, Hkv, D, device="cuda").to(torch_dtype)
    v = torch.randn(B, S, Hkv, D, device="cuda").to(torch_dtype)
    seqlens = torch.tensor([1, 64, 65, 1000], device="cuda", dtype=torch.int32)
    want = reference(q, k, v, seqlens)
    # combine="last": a counter of arrivals, zeroed once, left zero by every call
    extra = [torch.zeros(B, Hkv, device="cuda", dtype=torch.int32)] if config.get("combine") == "last" else []
    tol = 2e-2 if dtype == "bfloat16" else 3e-3
    for _ in range(3 if extra else 1):
        if page_size:
            kp, vp, table = paged(k, v, page_size)
            kernel = fd.flash_decode(B, H, Hkv, D, S, page_size=page_size, num_pages=kp.shape[0], dtype=dtype,
                                     **config)
            out = kernel(q, kp, vp, seqlens, table, *extra)
        else:
            kernel = fd.flash_decode(B, H, Hkv, D, S, dtype=dtype, **config)
            out = kernel(q, k, v, seqlens, *extra)
        torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol)
        if extra:
            assert not extra[0].any()
    return kernel


@pytest.mark.parametrize("num_split,block_H", [(8, 16), (1, 16), (8, 64)])
@pytest.mark.parametrize("page_size", [0, 16, 64])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_against_torch(page_size, dtype, num_split, block_H):
    # block_H=64: wgmma, and on the contiguous cache the TMA pipeline (bounds from cache_seqlens)
    against_torch(page_size, dtype, num_split=num_split, block_H=block_H)


@pytest.mark.parametrize("num_split", [2, 8, 16])
@pytest.mark.parametrize("page_size", [0, 16])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cluster_combine_against_torch(page_size, dtype, num_split):
    """combine='cluster': one kernel, the splits of a (sequence, KV head) a thread-block
    cluster combining in the first split's shared memory."""
    kernel = against_torch(page_size, dtype, num_split=num_split, combine="cluster")
    assert kernel.info["cluster"] == [num_split, 1, 1]


@pytest.mark.parametrize("num_split,block_H,block_N", [(8, 8, 64), (1, 8, 64), (8, 16, 64), (16, 8, 128)])
@pytest.mark.parametrize("page_size", [0, 16, 64])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_keys_as_rows_against_torch(page_size, dtype, num_split, block_H, block_N):
    # S^T = K q^T: the scores' gemm on wgmma (m64n8) where the keys fill a warpgroup
    against_torch(page_size, dtype, num_split=num_split, block_H=block_H, block_N=block_N, keys_as_rows=True)


@pytest.mark.parametrize("num_split,block_H,keys_as_rows", [(8, 16, False), (16, 8, True), (3, 16, False)])
@pytest.mark.parametrize("page_size", [0, 16, 64])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_last_split_combine_against_torch(page_size, dtype, num_split, block_H, keys_as_rows):
    # one kernel: the last split of each (sequence, KV head) combines the others' partials,
    # acquired with its ticket; three calls on one counter (each leaves it zero)
    against_torch(page_size, dtype, num_split=num_split, block_H=block_H, keys_as_rows=keys_as_rows, combine="last")


def test_last_split_combine_under_load():
    """Batch 1 at 32k keys, 16 splits, many calls in a row on one counter: a split that read
    a partial before its writer released it would show as a wrong row."""
    B, H, Hkv, D, S = 1, 32, 8, 128, 32768
    q = torch.randn(B, H, D, device="cuda", dtype=torch.float16)
    k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.float16)
    v = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.float16)
    seqlens = torch.tensor([S], device="cuda", dtype=torch.int32)
    want = reference(q, k, v, seqlens)
    arrivals = torch.zeros(B, Hkv, device="cuda", dtype=torch.int32)
    kernel = fd.flash_decode(B, H, Hkv, D, S, num_split=16, num_stages=3, combine="last")
    outs = [kernel(q, k, v, seqlens, arrivals) for _ in range(50)]
    for out in outs:
        torch.testing.assert_close(out.float(), want, rtol=3e-3, atol=3e-3)
    assert not arrivals.any()


@pytest.mark.parametrize("combine_threads,combine_dims", [(32, None), (64, None), (32, 32), (64, 64)])
@pytest.mark.parametrize("page_size", [0, 16])
def test_combine_threads_against_torch(page_size, combine_threads, combine_dims):
    against_torch(page_size, "float16", num_split=16, combine_threads=combine_threads, combine_dims=combine_dims)


@pytest.mark.parametrize("num_split,block_N,stages", [(16, 16, 2), (16, 32, 2), (8, 32, 3)])
@pytest.mark.parametrize("page_size", [0, 16, 64])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_one_warp_blocks_against_torch(page_size, dtype, num_split, block_N, stages):
    # threads=32: one warp a split, its scores in registers from the first gemm to the second
    against_torch(page_size, dtype, num_split=num_split, block_N=block_N, num_stages=stages, threads=32)
