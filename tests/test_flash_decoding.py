"""examples/flash_decoding.py: grouped-query decoding attention over a KV cache split across
blocks and combined by a second kernel, contiguous and paged (pages of 16 and 64 tokens in a
random order): against numpy on the interpreter for lengths of 1, one tile, one tile + 1 and
different lengths per sequence, splits that hold no key, fp16 and bf16; every pass on the CPU
model; NVRTC at the issue's shapes; the argument checks."""

import os
import re
import sys

import numpy as np
import pytest
import tilers
from tilers import testing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_decoding as fd  # noqa: E402


def case(B, H, Hkv, D, S, lengths, dtype="float16", seed=0):
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, D)).astype(np_dtype)
    k = rng.standard_normal((B, S, Hkv, D)).astype(np_dtype)
    v = rng.standard_normal((B, S, Hkv, D)).astype(np_dtype)
    seqlens = np.array(lengths, np.int32)
    return q, k, v, seqlens, fd.reference(q, k, v, seqlens)


def check_at_lengths(lengths, dtype="float16", page_size=0, extra=(), **config):
    """The kernel of `config` (batch 4, 8 query heads over 2 KV heads of 64, 256 keys),
    contiguous or paged, against numpy; `extra` arguments after the cache's."""
    S = 256
    q, k, v, seqlens, want = case(4, 8, 2, 64, S, lengths, dtype)
    pages = 4 * S // page_size if page_size else 0
    kernel = fd.flash_decode(4, 8, 2, 64, S, dtype=dtype, page_size=page_size, num_pages=pages, **config)
    if page_size:
        kp, vp, table = fd.paged_cache(k, v, page_size)
        out = kernel(q, kp, vp, seqlens, table, *extra)
    else:
        out = kernel(q, k, v, seqlens, *extra)
    tol = 2e-2 if dtype == "bfloat16" else 2e-3
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("lengths,num_split", [([1, 64, 65, 256], 4), ([256, 3, 130, 200], 3), ([17, 1, 1, 255], 8),
                                               ([1, 64, 65, 256], 1)])
@pytest.mark.parametrize("heads,heads_kv", [(8, 2), (4, 4), (16, 1)])
def test_contiguous_against_numpy(lengths, num_split, heads, heads_kv):
    q, k, v, seqlens, want = case(4, heads, heads_kv, 64, 256, lengths)
    out = fd.flash_decode(4, heads, heads_kv, 64, 256, num_split=num_split)(q, k, v, seqlens)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("page_size", [0, 16])
def test_one_split_writes_the_output_itself(page_size):
    """num_split=1: the split kernel writes O (no scratch, no combine kernel)."""
    S = 256
    q, k, v, seqlens, want = case(3, 8, 2, 64, S, [256, 1, 100])
    pages = 3 * S // page_size if page_size else 0
    f = fd.flash_decode.prim_func(3, 8, 2, 64, S, num_split=1, page_size=page_size, num_pages=pages)
    testing.check_passes(f, arch="sm_90a", check=True)
    kernel = fd.flash_decode(3, 8, 2, 64, S, num_split=1, page_size=page_size, num_pages=pages)
    src = kernel.get_kernel_source()
    assert src.count("__global__") == 1 and "O_partial" not in src
    if page_size:
        kp, vp, table = fd.paged_cache(k, v, page_size)
        out = kernel(q, kp, vp, seqlens, table)
    else:
        out = kernel(q, k, v, seqlens)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-3, atol=2e-3)


def test_many_splits_wide_heads():
    """64 splits of head dim 256 (the combine's registers spread over 256 threads), most
    splits past every sequence's end."""
    q, k, v, seqlens, want = case(2, 4, 2, 256, 256, [200, 1])
    testing.check_passes(fd.flash_decode.prim_func(2, 4, 2, 256, 256, num_split=64), arch="sm_90a", check=True)
    kernel = fd.flash_decode(2, 4, 2, 256, 256, num_split=64)
    assert "__launch_bounds__(256)" in kernel.get_kernel_source()
    out = kernel(q, k, v, seqlens)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("page_size,block_N,S", [(16, 64, 256), (64, 64, 256), (16, 128, 256), (64, 128, 256), (48, 64, 192)],
                         ids=["4-pages-a-tile", "a-page-a-tile", "8-pages-a-tile", "2-pages-a-tile", "rows-across-pages"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_paged_against_numpy(page_size, block_N, S, dtype):
    q, k, v, seqlens, want = case(3, 8, 2, 64, S, [1, 65, S], dtype)
    kp, vp, table = fd.paged_cache(k, v, page_size)
    kernel = fd.flash_decode(3, 8, 2, 64, S, num_split=3, block_N=block_N, page_size=page_size, num_pages=kp.shape[0],
                             dtype=dtype)
    out = kernel(q, kp, vp, seqlens, table)
    tol = 2e-2 if dtype == "bfloat16" else 2e-3
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol)


def test_head_dim_128_and_a_larger_group():
    q, k, v, seqlens, want = case(2, 32, 8, 128, 128, [128, 70])
    out = fd.flash_decode(2, 32, 8, 128, 128, num_split=2)(q, k, v, seqlens)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("page_size,block_N", [(0, 64), (16, 64), (64, 64), (64, 128)])
def test_every_pass_agrees(arch, page_size, block_N):
    pages = 2 * 256 // page_size if page_size else 0
    f = fd.flash_decode.prim_func(2, 8, 2, 64, 256, num_split=2, block_N=block_N, page_size=page_size, num_pages=pages)
    testing.check_passes(f, arch=arch, check=True)


@pytest.mark.parametrize("page_size,block_N,stages", [(0, 64, 4), (0, 128, 3), (16, 64, 3), (64, 128, 4)])
def test_deeper_pipelines_agree_and_match_numpy(page_size, block_N, stages):
    """num_stages 3 and 4 (more K/V bytes in flight at batch 1): every pass on the CPU model,
    and the result against numpy, with splits shorter than the pipeline and one of no key."""
    S = 512
    q, k, v, seqlens, want = case(2, 8, 2, 64, S, [S, 70], "float16")
    pages = 2 * S // page_size if page_size else 0
    f = fd.flash_decode.prim_func(2, 8, 2, 64, S, num_split=4, block_N=block_N, page_size=page_size, num_pages=pages,
                                  num_stages=stages)
    testing.check_passes(f, arch="sm_90a", check=True)
    kernel = fd.flash_decode(2, 8, 2, 64, S, num_split=4, block_N=block_N, page_size=page_size, num_pages=pages,
                             num_stages=stages)
    if page_size:
        kp, vp, table = fd.paged_cache(k, v, page_size)
        out = kernel(q, kp, vp, seqlens, table)
    else:
        out = kernel(q, k, v, seqlens)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("page_size,block_N,stages", [(0, 16, 2), (0, 32, 3), (16, 32, 2), (16, 16, 4)])
def test_one_warp_blocks_agree_and_match_numpy(page_size, block_N, stages):
    """threads=32: a block of one warp owns its split's whole tile (no cross-warp reduction,
    the scores reach the second gemm in registers), tiles of 16 and 32 keys, many splits
    (some of no key): every pass on the CPU model, and the result against numpy."""
    config = dict(num_split=8, block_N=block_N, num_stages=stages, threads=32)
    pages = 2 * 256 // page_size if page_size else 0
    f = fd.flash_decode.prim_func(2, 8, 2, 64, 256, page_size=page_size, num_pages=pages, **config)
    testing.check_passes(f, arch="sm_90a", check=True)
    check_at_lengths([256, 70, 1, 33], page_size=page_size, **config)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("page_size", [0, 16, 64])
def test_nvrtc_at_the_issues_shapes(arch, page_size):
    S = 32768
    pages = S // page_size if page_size else 0
    f = fd.flash_decode.prim_func(1, 32, 8, 128, S, num_split=16, page_size=page_size, num_pages=pages)
    assert len(tilers.compile(f, out_idx=[-1], target=f"cuda:{arch}").cubin) > 0


@pytest.mark.parametrize("block_N", [32, 64, 128])
def test_a_paged_copy_reads_the_block_table_once(block_N):
    """A paged K/V tile's cp.async chunks share one load of the block table (bound before the
    chunks), not one per chunk: each cp.async is a volatile asm with a memory clobber, so the
    C compiler cannot merge the loads itself. 128 keys span two 64-token pages: two loads."""
    f = fd.flash_decode.prim_func(1, 32, 8, 128, 8192, num_split=16, block_N=block_N, page_size=64, num_pages=128)
    source = tilers.compile(f, out_idx=[-1], target="cuda:sm_90a").get_kernel_source()
    copies = [line for line in source.splitlines() if "cp.async.cg.shared.global" in line]
    assert copies and not [line for line in copies if "block_table[" in line]
    lets = [line for line in source.splitlines() if re.match(r"\s*const int block_table_at(_\d+)? = block_table\[", line)]
    assert len(lets) == source.count("block_table[")
    # K's and V's pages (1, or 2 for 128 keys), in the loop and once before it (2 stages)
    assert len(lets) == 2 * (1 if block_N <= 64 else 2) * 2


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="must be a multiple of heads_kv"):
        fd.flash_decode.prim_func(1, 6, 4, 64, 128)
    with pytest.raises(ValueError, match="at most block_H"):
        fd.flash_decode.prim_func(1, 64, 2, 64, 128, block_H=16)
    with pytest.raises(ValueError, match="whole pages"):
        fd.flash_decode.prim_func(1, 8, 2, 64, 100, page_size=16, num_pages=7)
    with pytest.raises(ValueError, match=r"combine_dims: expected a divisor of dim \(64\), got 48"):
        fd.flash_decode.prim_func(1, 8, 2, 64, 128, combine_dims=48)


@pytest.mark.parametrize("lengths,num_split", [([1, 64, 65, 256], 4), ([256, 3, 130, 200], 3), ([17, 1, 1, 255], 8),
                                               ([0, 256, 2, 9], 2), ([256, 129, 1, 64], 16)])
@pytest.mark.parametrize("page_size", [0, 16])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cluster_combine_against_numpy(lengths, num_split, page_size, dtype):
    """combine='cluster': the splits of a (sequence, KV head) are one thread-block cluster and
    combine in the first one's shared memory (T.copy_cluster): lengths of 0 and 1, splits
    with no key, paged, fp16 and bf16."""
    check_at_lengths(lengths, dtype, page_size, num_split=num_split, combine="cluster")


@pytest.mark.parametrize("page_size,num_split", [(0, 2), (16, 4), (0, 8)])
def test_cluster_combine_every_pass_agrees(page_size, num_split):
    pages = 2 * 256 // page_size if page_size else 0
    f = fd.flash_decode.prim_func(2, 8, 2, 64, 256, num_split=num_split, combine="cluster", page_size=page_size,
                                  num_pages=pages)
    testing.check_passes(f, arch="sm_90a", check=True, blocks="all")


@pytest.mark.parametrize("num_split", [8, 16])
def test_cluster_combine_at_the_issues_shape(num_split):
    """Batch 1, 8k keys, 32 query heads over 8 KV heads: 8 splits (a portable cluster) or 16
    (128 blocks, a cluster of 16 per GPC)."""
    f = fd.flash_decode.prim_func(1, 32, 8, 128, 8192, num_split=num_split, combine="cluster", num_stages=3)
    k = tilers.compile(f, out_idx=[-1], target="cuda:sm_90a")
    assert k.info["cluster"] == [num_split, 1, 1] and len(k.cubin) > 0
    src = k.get_kernel_source()
    assert f"__cluster_dims__({num_split}, 1, 1)" in src
    # the cluster barrier tilers adds is split around the KV loop: arrived at before the
    # first copy, waited for just before the first store into split 0
    assert src.index("barrier.cluster.arrive.release") < src.index("cp.async") < src.index(
        "barrier.cluster.wait.acquire") < src.index("tl_cluster_ptr(&o_all[")
    src = k.get_kernel_source()
    assert src.count("__global__") == 1 and "tl_cluster_ptr(&o_all[" in src


def test_bad_cluster_combines_are_refused():
    with pytest.raises(ValueError, match="combine: expected 'kernel', 'cluster' or 'last'"):
        fd.flash_decode.prim_func(1, 8, 2, 64, 128, combine="dsmem")
    with pytest.raises(ValueError, match="num_split: combine='cluster' takes 2 to 16 splits"):
        fd.flash_decode.prim_func(1, 8, 2, 64, 128, num_split=32, combine="cluster")
    with pytest.raises(tilers.errors.TileError, match="no thread-block clusters"):
        tilers.compile(fd.flash_decode.prim_func(1, 8, 2, 64, 128, num_split=2, combine="cluster"), out_idx=[-1],
                       target="cuda:sm_80")


@pytest.mark.parametrize("lengths,num_split", [([1, 64, 65, 256], 4), ([256, 3, 130, 200], 3), ([17, 1, 1, 255], 8),
                                               ([1, 64, 65, 256], 1)])
@pytest.mark.parametrize("page_size,block_H,block_N", [(0, 8, 64), (16, 16, 64), (64, 8, 128), (0, 16, 128)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_keys_as_rows_against_numpy(lengths, num_split, page_size, block_H, block_N, dtype):
    """S^T = K q^T, O^T = V^T P^T (the keys on the tensor cores' rows): the same answers, for
    lengths of 1, one tile and one tile + 1, splits with no key, paged or not, fp16 and bf16."""
    check_at_lengths(lengths, dtype, page_size, num_split=num_split, block_H=block_H, block_N=block_N,
                     keys_as_rows=True)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("page_size,block_H,block_N,stages", [(0, 8, 64, 3), (16, 16, 64, 2), (64, 8, 128, 3)])
def test_keys_as_rows_every_pass_agrees(arch, page_size, block_H, block_N, stages):
    pages = 2 * 256 // page_size if page_size else 0
    f = fd.flash_decode.prim_func(2, 8, 2, 64, 256, num_split=2, block_H=block_H, block_N=block_N, num_stages=stages,
                                  page_size=page_size, num_pages=pages, keys_as_rows=True)
    testing.check_passes(f, arch=arch, check=True)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("block_H,block_N,threads", [(8, 64, 128), (8, 128, 128), (16, 64, 128), (8, 32, 64)])
def test_keys_as_rows_at_the_issues_shape(arch, block_H, block_N, threads):
    f = fd.flash_decode.prim_func(1, 32, 8, 128, 8192, num_split=16, block_H=block_H, block_N=block_N,
                                  threads=threads, num_stages=2 if block_N == 128 else 3, keys_as_rows=True)
    assert len(tilers.compile(f, out_idx=[-1], target=f"cuda:{arch}").cubin) > 0


def test_keys_as_rows_wants_heads_in_eights():
    with pytest.raises(ValueError, match="block_H must be a multiple of 8"):
        fd.flash_decode.prim_func(1, 8, 2, 64, 128, block_H=4, keys_as_rows=True)


@pytest.mark.parametrize("lengths,num_split", [([1, 64, 65, 256], 4), ([256, 3, 130, 200], 3), ([17, 1, 1, 255], 8),
                                               ([1, 64, 65, 256], 1)])
@pytest.mark.parametrize("page_size,keys_as_rows", [(0, False), (16, False), (0, True), (64, True)])
def test_last_split_combines_against_numpy(lengths, num_split, page_size, keys_as_rows):
    """combine="last": one kernel; the last split of each (sequence, KV head) to take its
    ticket combines them and sets the counter back to 0, so the next call starts clean."""
    arrivals = np.zeros((4, 2), np.int32)
    for _ in range(2):
        check_at_lengths(lengths, "float16", page_size, extra=(arrivals,), num_split=num_split, combine="last",
                         block_H=8 if keys_as_rows else 16, keys_as_rows=keys_as_rows)
        assert not arrivals.any()


def test_last_split_combine_is_one_kernel_and_releases_the_block():
    f = fd.flash_decode.prim_func(1, 32, 8, 128, 8192, num_split=16, combine="last")
    kern = tilers.compile(f, out_idx=[-1], target="cuda:sm_90a")
    src = kern.source
    assert src.count('extern "C" __global__') == 1
    # every thread's partial stores, then a barrier, then thread 0's acquire-release ticket
    before = src[:src.index("tl_atomic_add_acq_rel_fetch(&arrivals")]
    assert before.rstrip().endswith("if ((tid == 0)) {\n    {") or before.rfind("__syncthreads()") > before.rfind("LSE[")
    assert len(tilers.compile(f, out_idx=[-1], target="cuda:sm_80").cubin) > 0


def test_last_split_combine_every_pass_agrees():
    f = fd.flash_decode.prim_func(2, 8, 2, 64, 256, num_split=4, combine="last")
    for arch in ("sm_90a", "sm_80"):
        testing.check_passes(f, arch=arch, blocks="all", zeros=("arrivals",), check=True)


def test_last_split_combine_refuses_a_dirty_counter():
    q, k, v, seqlens, _ = case(4, 8, 2, 64, 256, [1, 64, 65, 256])
    kernel = fd.flash_decode(4, 8, 2, 64, 256, num_split=4, combine="last")
    with pytest.raises(tilers.TileError, match="arrivals must be zero when a call starts"):
        kernel(q, k, v, seqlens, np.full((4, 2), 7, np.int32))


@pytest.mark.parametrize("combine_threads,combine_dims", [(32, None), (64, None), (32, 32), (32, 16), (64, 32)])
def test_combine_threads_against_numpy(combine_threads, combine_dims):
    """The combine kernel on one warp (shuffles only, no barrier) or two, over the whole head
    dimension or a part of it a block: same answers, every pass on the CPU model."""
    config = dict(combine_threads=combine_threads, combine_dims=combine_dims)
    q, k, v, seqlens, want = case(4, 8, 2, 64, 256, [1, 64, 65, 256])
    out = fd.flash_decode(4, 8, 2, 64, 256, num_split=8, **config)(q, k, v, seqlens)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-3, atol=2e-3)
    f = fd.flash_decode.prim_func(2, 8, 2, 64, 256, num_split=4, **config)
    testing.check_passes(f, arch="sm_90a", check=True)
