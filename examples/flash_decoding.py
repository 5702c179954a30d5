"""Attention of decoding: one new query per sequence against its KV cache, grouped-query heads
(`heads` query heads share each of `heads_kv` key/value heads), the cache read once. The KV
sequence of each (sequence, KV head) is split over `num_split` blocks so that a batch of one
still fills the GPU: each block runs the online softmax over its share of the keys for the
group's query heads (the rows of its tiles) and writes a partial output and its log-sum-exp;
a second kernel combines the splits (weights exp(lse_s - max lse)) — or, with
combine="cluster" (sm_90), the splits of a (sequence, KV head) are one thread-block cluster
and split 0 combines them in its shared memory, which the others write (T.copy_cluster).

The cache is either contiguous, K/V [batch, max_seqlen, heads_kv, dim] with `cache_seqlens`
[batch] int32 holding each sequence's length, or paged as inference engines store it:
K/V [num_pages, page_size, heads_kv, dim] and `block_table` [batch, max_pages] int32 mapping
each sequence's logical page to a physical one (`page_size` 16 or 64 tokens, any order).

    python examples/flash_decoding.py          # GPU: against torch; else the interpreter
"""

import math
import sys

import numpy as np
import tilers
import tilers.language as T

LOG2E = 1.4426950408889634


@tilers.jit(out_idx=[-1], fast_math=True)
def flash_decode(batch, heads, heads_kv, dim, max_seqlen, num_split=4, block_H=16, block_N=64, threads=128,
                 dtype="float16", page_size=0, num_pages=0, sm_scale=None, num_stages=2, combine="kernel",
                 keys_as_rows=False, combine_threads=None, q_registers=True, combine_dims=None):
    """O [batch, heads, dim] = softmax(q K^T * sm_scale) V per sequence and query head, over
    the first cache_seqlens[b] keys. page_size=0: a contiguous cache (K, V [batch, max_seqlen,
    heads_kv, dim]); else a paged one (K, V [num_pages, page_size, heads_kv, dim], with
    block_table [batch, max_seqlen // page_size]). The kernel's parameters: Q, K, V,
    cache_seqlens, (block_table,) O. num_stages: K/V tiles in flight per block (a memory-bound
    kernel wants more bytes in flight than two stages give at batch 1). combine: how the
    splits meet — "kernel", a second kernel reading their partial outputs from global memory;
    "cluster" (sm_90, 2 to 16 splits; past 8, Hopper's non-portable cluster sizes), one kernel whose splits of a (sequence, KV head) form a
    thread-block cluster and send their partial outputs into the first one's shared memory
    (T.copy_cluster), which combines them: one launch, no round trip through global memory —
    measured slower on an H100 all the same (a fixed cost of about 22 us per call in clusters
    of 16, 4 to 9 in clusters of 8; bench/results/README.md, session 31); "last", one kernel
    whose last split of a (sequence, KV head) to finish combines them: each split writes its
    partial output, then takes a ticket from `arrivals` [batch, heads_kv] int32 (an atomic
    add with acquire-release order), and the one that draws num_split - 1 reads the others'
    partials and sets the counter back to 0 — the kernel then takes `arrivals` before O, a
    tensor the caller zeroes once and passes to every call (not to two calls running at
    once); a counter found above num_split - 1 stops the kernel. On an H100 at batch 1 and
    8k keys the last block's tail costs what the second kernel does (17.9 against 18.3 us a
    call in one run, 18.4 against 17.3 in another; session 32). keys_as_rows: the
    scores as S^T = K q^T and the output as O^T = V^T P^T — the tile's block_N keys are the
    rows (the tensor cores' 16-row side) and the group's query heads the columns (block_H:
    8 or more): with 4 query heads a KV head, a quarter of the rows of q K^T are real, half
    of the columns of K q^T, so a tile costs ~18% fewer instructions — measured 2x slower on
    an H100 all the same (the wgmma reading a cp.async tile needs a proxy fence each tile;
    with block_H 16 both gemms take wgmma and the TMA pipeline, 4x slower), so the benchmark
    leaves it out unless asked (DECODE_KEYS_AS_ROWS=0,1). combine_threads: the combine
    kernel's threads (None: 128, or 256 past 64 x 128 values a block) — one warp reduces over
    the splits with shuffles alone, several through shared memory; combine_dims: the head
    dimensions one combine block takes (None: all; 32 with combine_threads=32 gives each
    thread one column: no reduction leaves a warp, and dim / 32 times the blocks). q_registers: the group's
    queries load once into registers, in the layout the scores' gemm reads its A operand in
    (else they stay in shared memory and every tile reads them again by ldmatrix); not with
    keys_as_rows, where q is the gemm's B operand. threads=32: one warp owns a split's whole
    tile — no reduction crosses warps and the scores reach the second gemm in registers —
    where more warps split each tile's keys and meet through shared memory per tile."""
    if combine not in ("kernel", "cluster", "last"):
        raise ValueError(f"combine: expected 'kernel', 'cluster' or 'last', got {combine!r}")
    if combine == "cluster" and not 2 <= num_split <= 16:
        raise ValueError(f"num_split: combine='cluster' takes 2 to 16 splits (a cluster's blocks), got {num_split}")
    group = heads // heads_kv
    if keys_as_rows and block_H % 8:
        raise ValueError(f"block_H: keys_as_rows=True puts the query heads on the tensor cores' 8-column side, "
                         f"so block_H must be a multiple of 8, got {block_H}")
    if heads % heads_kv or group > block_H:
        raise ValueError(f"heads ({heads}) must be a multiple of heads_kv ({heads_kv}) with at most block_H "
                         f"({block_H}) query heads per KV head")
    paged = page_size > 0
    if paged and max_seqlen % page_size:
        raise ValueError(f"max_seqlen ({max_seqlen}) must be whole pages of {page_size} tokens")
    accum = "float32"
    sm_scale = 1.0 / math.sqrt(dim) if sm_scale is None else sm_scale
    scale = sm_scale * LOG2E
    # the keys of one split: whole tiles
    split_len = ((max_seqlen + num_split - 1) // num_split + block_N - 1) // block_N * block_N
    cache_rows = num_pages if paged else batch
    cache_len = page_size if paged else max_seqlen
    pages_per_seq = max_seqlen // page_size if paged else 1

    @T.macro
    def load_tile(cache, shared, b, hk, n0, table):
        """Rows n0 .. n0 + block_N - 1 of sequence b's keys (or values) of KV head hk."""
        if not paged:
            T.copy(cache[b, n0:n0 + block_N, hk, :], shared)
        elif page_size % block_N == 0:
            # the tile lies in one page
            page = table[b, n0 // page_size]
            T.copy(cache[page, n0 % page_size:n0 % page_size + block_N, hk, :], shared)
        elif block_N % page_size == 0:
            # the tile is whole pages: a copy per page (past the table's end, its last page:
            # those rows lie beyond the split, their scores masked)
            for p in T.unroll(block_N // page_size):  # unrolled by the compiler: each copy runs ahead
                page = table[b, T.min(n0 // page_size + p, pages_per_seq - 1)]
                T.copy(cache[page, 0:page_size, hk, :], shared[p * page_size:(p + 1) * page_size, :])
        else:
            # the tile spans pages: each row from its own
            for n, d in T.Parallel(block_N, dim):
                row = n0 + n
                page = table[b, T.min(row // page_size, pages_per_seq - 1)]
                shared[n, d] = T.if_then_else(row < max_seqlen, cache[page, row % page_size, hk, d], 0)

    def online_softmax(Q, K, V, cache_seqlens, table, b, hk, s):
        """Split s of sequence b, KV head hk: the online softmax over its keys (the group's
        query heads are the tiles' rows, or with keys_as_rows their columns); its
        unnormalized output acc_o ([block_H, dim], or [dim, block_H]), the running max and
        the sum of exponentials it returns."""
        K_shared = T.alloc_shared((block_N, dim), dtype)
        V_shared = T.alloc_shared((block_N, dim), dtype)
        scores = (block_N, block_H) if keys_as_rows else (block_H, block_N)
        acc_s = T.alloc_fragment(scores, accum)
        acc_o = T.alloc_fragment((dim, block_H) if keys_as_rows else (block_H, dim), accum)
        scores_max = T.alloc_fragment((block_H,), accum)
        scores_max_prev = T.alloc_fragment((block_H,), accum)
        scores_scale = T.alloc_fragment((block_H,), accum)
        scores_sum = T.alloc_fragment((block_H,), accum)
        logsum = T.alloc_fragment((block_H,), accum)
        length = cache_seqlens[b]
        start = s * split_len
        stop = T.min(start + split_len, length)
        # the group's query heads are the tile's rows (the rest zero)
        if q_registers and not keys_as_rows:
            Q_tile = T.alloc_fragment((block_H, dim), dtype)
        else:
            Q_tile = T.alloc_shared((block_H, dim), dtype)
        for i, d in T.Parallel(block_H, dim):
            Q_tile[i, d] = T.if_then_else(i < group, Q[b, hk * group + T.min(i, group - 1), d], 0)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, -T.infinity(accum))
        tiles = T.ceildiv(T.max(stop - start, 0), block_N)
        # the scores' tile in the type the second gemm reads: P^T in shared memory when the
        # keys are the rows (a gemm's B operand), else the cast fragment
        P = T.alloc_shared((block_N, block_H), dtype) if keys_as_rows else T.alloc_fragment(scores, dtype)
        keys = 0 if keys_as_rows else 1  # the scores' dimension of keys
        for k in T.Pipelined(tiles, num_stages=num_stages):
            n0 = start + k * block_N
            load_tile(K, K_shared, b, hk, n0, table)
            if keys_as_rows:
                T.gemm(K_shared, Q_tile, acc_s, transpose_B=True, clear_accum=True)  # S^T = K q^T
            else:
                T.gemm(Q_tile, K_shared, acc_s, transpose_B=True, clear_accum=True)
            for x, y in T.Parallel(*scores):
                acc_s[x, y] = T.if_then_else(n0 + (x, y)[keys] < stop, acc_s[x, y], -T.infinity(accum))
            T.copy(scores_max, scores_max_prev)
            T.reduce_max(acc_s, scores_max, dim=keys, clear=False)
            for i in T.Parallel(block_H):
                scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
            for x, y in T.Parallel(*scores):
                acc_s[x, y] = T.exp2(acc_s[x, y] * scale - scores_max[(y, x)[keys]] * scale)
            T.reduce_sum(acc_s, scores_sum, dim=keys)
            for i in T.Parallel(block_H):
                logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
            T.copy(acc_s, P)
            for x, y in T.Parallel(*acc_o.shape):
                acc_o[x, y] *= scores_scale[(y, x)[keys]]
            load_tile(V, V_shared, b, hk, n0, table)
            if keys_as_rows:
                T.gemm(V_shared, P, acc_o, transpose_A=True)  # O^T += V^T P^T
            else:
                T.gemm(P, V_shared, acc_o)
        return acc_o, scores_max, logsum

    def out(acc_o, i, d):
        """Element (query head i, dim d) of an online softmax's output."""
        return acc_o[d, i] if keys_as_rows else acc_o[i, d]

    def reciprocal(logsum):
        """1 / logsum per query head (0 for a split without keys, whose output is 0): one
        division a row, the output's elements then multiply."""
        inv = T.alloc_fragment((block_H,), accum)
        for i in T.Parallel(block_H):
            inv[i] = T.if_then_else(logsum[i] > 0, 1.0 / logsum[i], 0)
        return inv

    @T.macro
    def combine_group(O_partial, LSE, O, b, hk):
        """The splits of (sequence b, KV head hk) from global memory into O: weights
        exp2(lse_t - max lse), a split with no key weighing 0. Every split's output and
        log-sum-exp load at once (fragments), then reductions over the splits."""
        lse = T.alloc_fragment((group, num_split), accum)
        lse_max = T.alloc_fragment((group,), accum)
        weight = T.alloc_fragment((group, num_split), accum)
        weight_sum = T.alloc_fragment((group,), accum)
        partial = T.alloc_fragment((group, num_split, dim), accum)
        total = T.alloc_fragment((group, dim), accum)
        T.copy(LSE[b, hk * group:(hk + 1) * group, :], lse)
        T.copy(O_partial[b, hk * group:(hk + 1) * group, :, :], partial)
        T.reduce_max(lse, lse_max, dim=1)
        for i, t in T.Parallel(group, num_split):
            weight[i, t] = T.if_then_else(lse[i, t] == -T.infinity(accum), 0, T.exp2(lse[i, t] - lse_max[i]))
        T.reduce_sum(weight, weight_sum, dim=1)
        for i, t, d in T.Parallel(group, num_split, dim):
            partial[i, t, d] *= weight[i, t]
        T.reduce_sum(partial, total, dim=1)
        for i, d in T.Parallel(group, dim):
            O[b, hk * group + i, d] = T.if_then_else(weight_sum[i] > 0, total[i, d] / weight_sum[i], 0)

    @T.macro
    def split_kernel(Q, K, V, cache_seqlens, table, O_partial, LSE, arrivals=None, O=None):
        with T.Kernel(heads_kv, batch, num_split, threads=threads) as (hk, b, s):
            acc_o, scores_max, logsum = online_softmax(Q, K, V, cache_seqlens, table, b, hk, s)
            inv = reciprocal(logsum)

            if num_split == 1:
                # one split: the output itself (O_partial is O), no combine
                for i, d in T.Parallel(block_H, dim):
                    if i < group:
                        O_partial[b, hk * group + i, d] = out(acc_o, i, d) * inv[i]
                return
            # a split with no key of its sequence: weight 0 in the combine (lse -inf)
            for i, d in T.Parallel(block_H, dim):
                if i < group:
                    O_partial[b, hk * group + i, s, d] = out(acc_o, i, d) * inv[i]
            for i in T.Parallel(block_H):
                if i < group:
                    LSE[b, hk * group + i, s] = T.if_then_else(
                        logsum[i] > 0, T.log2(logsum[i]) + scores_max[i] * scale, -T.infinity(accum))
            if arrivals is not None:
                # the partials above are released with the ticket; the last split acquires
                # every other split's with its own
                ticket = T.atomic_add(arrivals[b, hk], 1, memory_order="acq_rel", return_prev=True)
                T.device_assert(ticket < num_split, "arrivals must be zero when a call starts")
                if ticket == num_split - 1:
                    arrivals[b, hk] = 0
                    combine_group(O_partial, LSE, O, b, hk)

    @T.macro
    def cluster_kernel(Q, K, V, cache_seqlens, table, O):
        # the splits of a (sequence, KV head) are one cluster along bx: split s is block s
        with T.ClusterKernel(num_split, heads_kv, batch, threads=threads, cluster_dims=num_split) as (s, hk, b):
            acc_o, scores_max, logsum = online_softmax(Q, K, V, cache_seqlens, table, b, hk, s)
            inv = reciprocal(logsum)
            # this split's normalized output and log-sum-exp, and (in split 0) every split's
            o_mine = T.alloc_shared((block_H, dim), accum)
            lse_mine = T.alloc_shared((block_H,), accum)
            o_all = T.alloc_shared((num_split, group, dim), accum)
            lse_all = T.alloc_shared((num_split, group), accum)
            for i, d in T.Parallel(block_H, dim):
                o_mine[i, d] = out(acc_o, i, d) * inv[i]
            for i in T.Parallel(block_H):
                lse_mine[i] = T.if_then_else(logsum[i] > 0, T.log2(logsum[i]) + scores_max[i] * scale,
                                             -T.infinity(accum))
            T.copy_cluster(o_mine[0:group, :], o_all[s, :, :], dst_block=0)
            T.copy_cluster(lse_mine[0:group], lse_all[s, :], dst_block=0)
            T.cluster_sync()
            if s == 0:
                # weights exp2(lse_t - max lse); a split with no key weighs 0
                for i, d in T.Parallel(group, dim):
                    top = lse_all[0, i]
                    for t in range(1, num_split):
                        top = T.max(top, lse_all[t, i])
                    num = T.float32(0)
                    den = T.float32(0)
                    for t in range(num_split):
                        w = T.if_then_else(lse_all[t, i] == -T.infinity(accum), 0, T.exp2(lse_all[t, i] - top))
                        num = num + w * o_all[t, i, d]
                        den = den + w
                    O[b, hk * group + i, d] = T.if_then_else(den > 0, num / den, 0)

    if combine_dims is None:
        combine_dims = dim
    if dim % combine_dims:
        raise ValueError(f"combine_dims: expected a divisor of dim ({dim}), got {combine_dims}")
    # the combine holds every split's output (its block's dims) in registers: more threads
    # when they are many
    if combine_threads is None:
        combine_threads = 128 if num_split * combine_dims <= 64 * 128 else 256

    @T.macro
    def combine_kernel(O_partial, LSE, O):
        with T.Kernel(heads, batch, dim // combine_dims, threads=combine_threads) as (h, b, c):
            lse = T.alloc_fragment((num_split,), accum)
            lse_max = T.alloc_fragment((1,), accum)
            weight = T.alloc_fragment((num_split,), accum)
            weight_sum = T.alloc_fragment((1,), accum)
            partial = T.alloc_fragment((num_split, combine_dims), accum)
            out = T.alloc_fragment((combine_dims,), accum)
            d0 = c * combine_dims
            # every split's output loads at once, alongside the LSEs
            T.copy(LSE[b, h, :], lse)
            T.copy(O_partial[b, h, :, d0:d0 + combine_dims], partial)
            T.reduce_max(lse, lse_max, dim=0)
            for s in T.Parallel(num_split):
                weight[s] = T.if_then_else(lse[s] == -T.infinity(accum), 0, T.exp2(lse[s] - lse_max[0]))
            T.reduce_sum(weight, weight_sum, dim=0)
            for s, d in T.Parallel(num_split, combine_dims):
                partial[s, d] *= weight[s]
            T.reduce_sum(partial, out, dim=0)
            for d in T.Parallel(combine_dims):
                O[b, h, d0 + d] = T.if_then_else(weight_sum[0] > 0, out[d] / weight_sum[0], 0)

    @T.macro
    def decode(Q, K, V, cache_seqlens, table, O, arrivals=None):
        if combine == "cluster":
            cluster_kernel(Q, K, V, cache_seqlens, table, O)
        elif num_split == 1:
            split_kernel(Q, K, V, cache_seqlens, table, O, None)
        else:
            O_partial = T.alloc_global((batch, heads, num_split, dim), accum)
            LSE = T.alloc_global((batch, heads, num_split), accum)
            if combine == "last":
                split_kernel(Q, K, V, cache_seqlens, table, O_partial, LSE, arrivals, O)
            else:
                split_kernel(Q, K, V, cache_seqlens, table, O_partial, LSE)
                combine_kernel(O_partial, LSE, O)

    if paged and combine == "last":

        @T.prim_func
        def kernel(Q: T.Tensor((batch, heads, dim), dtype),
                   K: T.Tensor((cache_rows, cache_len, heads_kv, dim), dtype),
                   V: T.Tensor((cache_rows, cache_len, heads_kv, dim), dtype),
                   cache_seqlens: T.Tensor((batch,), "int32"),
                   block_table: T.Tensor((batch, pages_per_seq), "int32"),
                   arrivals: T.Tensor((batch, heads_kv), "int32"),
                   O: T.Tensor((batch, heads, dim), dtype)):
            decode(Q, K, V, cache_seqlens, block_table, O, arrivals)

        return kernel

    if paged:

        @T.prim_func
        def kernel(Q: T.Tensor((batch, heads, dim), dtype),
                   K: T.Tensor((cache_rows, cache_len, heads_kv, dim), dtype),
                   V: T.Tensor((cache_rows, cache_len, heads_kv, dim), dtype),
                   cache_seqlens: T.Tensor((batch,), "int32"),
                   block_table: T.Tensor((batch, pages_per_seq), "int32"),
                   O: T.Tensor((batch, heads, dim), dtype)):
            decode(Q, K, V, cache_seqlens, block_table, O)

        return kernel

    if combine == "last":

        @T.prim_func
        def kernel(Q: T.Tensor((batch, heads, dim), dtype),
                   K: T.Tensor((cache_rows, cache_len, heads_kv, dim), dtype),
                   V: T.Tensor((cache_rows, cache_len, heads_kv, dim), dtype),
                   cache_seqlens: T.Tensor((batch,), "int32"),
                   arrivals: T.Tensor((batch, heads_kv), "int32"),
                   O: T.Tensor((batch, heads, dim), dtype)):
            decode(Q, K, V, cache_seqlens, None, O, arrivals)

        return kernel

    @T.prim_func
    def kernel(Q: T.Tensor((batch, heads, dim), dtype),
               K: T.Tensor((cache_rows, cache_len, heads_kv, dim), dtype),
               V: T.Tensor((cache_rows, cache_len, heads_kv, dim), dtype),
               cache_seqlens: T.Tensor((batch,), "int32"),
               O: T.Tensor((batch, heads, dim), dtype)):
        decode(Q, K, V, cache_seqlens, None, O)

    return kernel


def reference(q, k, v, seqlens, sm_scale=None):
    """numpy, float64: q [B, H, D], k/v [B, S, Hkv, D] (contiguous), lengths [B]."""
    B, H, D = q.shape
    Hkv = k.shape[2]
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = np.zeros((B, H, D))
    for b in range(B):
        n = int(seqlens[b])
        for h in range(H):
            kk = k[b, :n, h // (H // Hkv)].astype(np.float64)
            vv = v[b, :n, h // (H // Hkv)].astype(np.float64)
            if n == 0:
                continue
            s = kk @ q[b, h].astype(np.float64) * sm_scale
            p = np.exp(s - s.max())
            out[b, h] = p @ vv / p.sum()
    return out


def paged_cache(k, v, page_size, seed=0):
    """The contiguous cache as pages in a random order, and the block table."""
    B, S, Hkv, D = k.shape
    pages = S // page_size
    order = np.random.default_rng(seed).permutation(B * pages)
    kp = np.zeros((B * pages, page_size, Hkv, D), k.dtype)
    vp = np.zeros_like(kp)
    table = order.reshape(B, pages).astype(np.int32)
    for b in range(B):
        for p in range(pages):
            kp[table[b, p]] = k[b, p * page_size:(p + 1) * page_size]
            vp[table[b, p]] = v[b, p * page_size:(p + 1) * page_size]
    return kp, vp, table


def main():
    rng = np.random.default_rng(0)
    B, H, Hkv, D, S = 3, 8, 2, 64, 256
    q = rng.standard_normal((B, H, D)).astype(np.float16)
    k = rng.standard_normal((B, S, Hkv, D)).astype(np.float16)
    v = rng.standard_normal((B, S, Hkv, D)).astype(np.float16)
    seqlens = np.array([1, 65, 256], np.int32)
    want = reference(q, k, v, seqlens)
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    run = (lambda f, *a: f(*(torch.from_numpy(x).cuda() for x in a)).float().cpu().numpy()) if gpu else (
        lambda f, *a: f(*a).astype(np.float64))
    out = run(flash_decode(B, H, Hkv, D, S, num_split=3), q, k, v, seqlens)
    print(f"contiguous: max error {np.abs(out - want).max():.4f}")
    for page in (16, 64):
        kp, vp, table = paged_cache(k, v, page)
        f = flash_decode(B, H, Hkv, D, S, num_split=3, page_size=page, num_pages=kp.shape[0])
        out = run(f, q, kp, vp, seqlens, table)
        print(f"paged ({page} tokens): max error {np.abs(out - want).max():.4f}")
        assert np.abs(out - want).max() < 1e-2
    return 0


if __name__ == "__main__":
    sys.exit(main())
