"""FlashAttention forward in tilers, written the way TileLang's flash-attention examples are:
BSHD tensors, one block per (query tile, head, batch), K and V tiles streamed through a
T.Pipelined loop, the online softmax on fragments (T.reduce_max / T.reduce_sum, T.exp2 with
log2(e) folded into the scale), the output rescaled per row, P cast to the input dtype and
fed to the second gemm; the causal mask is decided at trace time (only tiles at or below
the diagonal are visited, and only those crossing it, or the sequence's end, are masked).

    python examples/flash_attention.py            # GPU: against torch's SDPA; else the interpreter against numpy
    python examples/flash_attention.py --causal

The baseline of issue 15: bench/attention.py times it beside SDPA's cuDNN and flash back ends.
"""

import argparse
import math

import tilers
import tilers.language as T

LOG2E = 1.4426950408889634


def flash_attention(batch, heads, seq_len, dim, is_causal=False, block_M=128, block_N=64,
                    num_stages=2, threads=128, dtype="float16", sm_scale=None, overlap=False,
                    heads_kv=None, window=(-1, -1), softcap=0.0, return_lse=False, varlen=False,
                    o_in_q=False, seq_len_kv=None, align="bottom_right", o_direct=False):
    """Q: [batch, seq_len, heads, dim], K and V: [batch, seq_len_kv, heads_kv, dim] (seq_len_kv
    defaults to seq_len); returns the
    @T.prim_func computing O = softmax(mask(softcap(Q K^T * sm_scale))) V, O of Q's shape and
    dtype (and, with return_lse, LSE [batch, heads, seq_len] float32: the log of each row's
    softmax denominator, natural units, as FlashAttention returns it).

    heads_kv < heads is grouped-query attention (query head h reads key/value head
    h // (heads // heads_kv)); window=(left, right) keeps the keys j with i - left <= j <=
    i + right (-1: unbounded; causal is right = 0); softcap > 0 maps each score s to
    softcap * tanh(s / softcap) before the softmax. When the query and key lengths differ, the
    causal mask and the window are aligned at the bottom right (align="bottom_right", as
    FlashAttention does: query i sits at key position i + seq_len_kv - seq_len, the chunked
    prefill convention) or at the top left (align="top_left", as SDPA's is_causal); a query
    row that keeps no key gets a zero output and an infinite log-sum-exp (FlashAttention's).

    varlen=True packs the batch's sequences (FlashAttention's varlen API): Q [total, heads,
    dim], K and V [total, heads_kv, dim] with total a T.dynamic size, cu_seqlens [batch + 1]
    int32 (sequence b is rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1) and max_seqlen (an int
    parameter: the grid's query tiles) come after V; seq_len is unused; LSE is [heads, total].

    overlap=True schedules the loop by hand (TileLang's stage=/order=/group=): step k issues
    Q K_k^T, rescales the output and issues P_{k-1} V_{k-1}, then computes the softmax of
    S_k while the tensor cores still run P_{k-1} V_{k-1} (FlashAttention-3's overlap).

    o_in_q=True stages the output tile in Q's shared tile (dead once the last Q K^T is done)
    instead of a tile of its own: 32 KB fewer at block_M=128, d=128, room for a third K/V
    stage. (The compiler now finds this itself — plan_shared_memory overlays the output tile
    on Q's, with the barriers it needs — so both spellings give the same kernel size.)

    o_direct=True stores the output from registers, with no shared tile: Q's tile is then
    read by nothing after the loop, so on sm_90a the producer warpgroup loads Q by TMA too
    (a persistent kernel loads the next tile's Q during this one's epilogue; the kernel's
    report says so), and a third K/V stage still fits at d=128."""
    heads_kv = heads if heads_kv is None else heads_kv
    if heads % heads_kv:
        raise ValueError(f"heads ({heads}) must be a multiple of heads_kv ({heads_kv})")
    group = heads // heads_kv
    left, right = window
    if is_causal:
        right = 0 if right < 0 else min(right, 0)
    if align not in ("bottom_right", "top_left"):
        raise ValueError(f"align must be 'bottom_right' or 'top_left', got {align!r}")
    if varlen:
        if seq_len_kv is not None:
            raise ValueError("varlen takes its lengths from cu_seqlens: seq_len_kv must be None")
        total = T.dynamic("total")
        q_shape, kv_shape = (total, heads, dim), (total, heads_kv, dim)
    else:
        seq_len_kv = seq_len if seq_len_kv is None else seq_len_kv
        q_shape = (batch, seq_len, heads, dim)
        kv_shape = (batch, seq_len_kv, heads_kv, dim)
    # where query row 0 sits among the keys (a compile-time constant; 0 in varlen batches,
    # whose query and key lengths are the same)
    shift = seq_len_kv - seq_len if not varlen and align == "bottom_right" else 0
    accum = "float32"
    sm_scale = 1.0 / math.sqrt(dim) if sm_scale is None else sm_scale
    # the exponent's factor: with a soft cap the scores are scaled (and capped) before it
    scale = LOG2E if softcap > 0 else sm_scale * LOG2E
    # every sequence of a varlen batch may end inside a tile
    ragged = varlen or seq_len_kv % block_N != 0
    masked = ragged or right >= 0 or left >= 0
    # rows that keep no key of a tile they visit (left of a window, or above a bottom-right
    # diagonal that starts past the first key): their max stays -inf there
    empty_rows = left >= 0 or (right >= 0 and shift + right < 0)

    @T.macro
    def body(Q, K, V, Output, LSE, cu_seqlens, max_seqlen):
        tiles_q = T.ceildiv(max_seqlen if varlen else seq_len, block_M)
        with T.Kernel(tiles_q, heads, batch, threads=threads) as (bx, by, bz):
            # this block's sequence: its first row in the packed tensors and its length
            if varlen:
                base = cu_seqlens[bz]
                length = cu_seqlens[bz + 1] - base
                length_kv = length
            else:
                base, length, length_kv = 0, seq_len, seq_len_kv

            def rows(t, lo, n, head):  # rows lo .. lo + n - 1 of the block's sequence
                if varlen:
                    return t[base + lo:base + lo + n, head, :]
                return t[bz, lo:lo + n, head, :]

            tiles_k = T.ceildiv(length_kv, block_N)
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            if not o_direct:
                O_shared = Q_shared if o_in_q else T.alloc_shared((block_M, dim), dtype)
            acc_s = T.alloc_fragment((block_M, block_N), accum)
            acc_s_cast = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, dim), accum)
            scores_max = T.alloc_fragment((block_M,), accum)
            scores_max_prev = T.alloc_fragment((block_M,), accum)
            scores_scale = T.alloc_fragment((block_M,), accum)
            scores_sum = T.alloc_fragment((block_M,), accum)
            logsum = T.alloc_fragment((block_M,), accum)

            hk = by // group
            T.copy(rows(Q, bx * block_M, block_M, by), Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum))
            # the key tiles a window (or the causal mask) leaves: from the first row's left
            # edge to the last row's right edge
            first = T.max(bx * block_M + shift - left, 0) // block_N if left >= 0 else 0
            if right >= 0:
                last = T.min(tiles_k, T.ceildiv(T.max((bx + 1) * block_M + shift + right, 0), block_N))
            else:
                last = tiles_k
            if varlen:
                # a query tile past its sequence's end visits nothing (and stores nothing)
                last = T.if_then_else(bx * block_M < length, last, first)
            # the body's statements: 0 copy K; 1 S = Q K^T; the soft cap (when asked); the
            # mask (when some tile needs one); 7 of the softmax; rescale O; copy V; O += P V
            extra = int(softcap > 0) + int(masked)
            softmax = list(range(2, 9 + extra))
            schedule = dict(order=[-1, 0, 3, 1, -1, 2], stage=[-1, 0, 0, 1, -1, 1],
                            group=[[0], [1], softmax, [9 + extra], [10 + extra], [11 + extra]]) if overlap else {}
            for k in T.Pipelined(first, last, num_stages=num_stages, **schedule):
                T.copy(rows(K, k * block_N, block_N, hk), K_shared)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)
                if softcap > 0:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.tanh(acc_s[i, j] * (sm_scale / softcap)) * softcap
                # keys past the sequence (the ragged last tile) and outside the window: only
                # the tiles that hold such keys are masked (a tile-level condition)
                if masked:
                    crosses_right = (k + 1) * block_N > bx * block_M + shift + right + 1 if right >= 0 else False
                    crosses_left = k * block_N < bx * block_M + block_M - 1 + shift - left if left >= 0 else False
                    at_end = k == tiles_k - 1 if ragged else False
                    if crosses_right or crosses_left or at_end:
                        for i, j in T.Parallel(block_M, block_N):
                            row = bx * block_M + i + shift
                            col = k * block_N + j
                            keep = col < length_kv
                            if right >= 0:
                                keep = keep and col <= row + right
                            if left >= 0:
                                keep = keep and col >= row - left
                            acc_s[i, j] = T.if_then_else(keep, acc_s[i, j], -T.infinity(accum))
                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                # a row with every key masked so far keeps its max at -inf: scale by 0 then
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.if_then_else(
                        scores_max[i] == -T.infinity(accum), 0,
                        T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale))
                if empty_rows:
                    # a row's first visited tiles may lie wholly outside its window: its max is
                    # still -inf there, and exp2(-inf - -inf) would be NaN (FA's Check_inf)
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - T.if_then_else(
                            scores_max[i] == -T.infinity(accum), 0, scores_max[i] * scale))
                else:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.copy(rows(V, k * block_N, block_N, hk), V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            if empty_rows:
                # a row that kept no key: output 0 (its sum is 0)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] = T.if_then_else(logsum[i] == 0, 0, acc_o[i, j] / logsum[i])
            else:
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] /= logsum[i]
            if varlen:
                # the tile's rows past the sequence's end belong to the next sequence
                for i, j in T.Parallel(block_M, dim):
                    if bx * block_M + i < length:
                        Output[base + bx * block_M + i, by, j] = acc_o[i, j]
            elif o_direct:
                T.copy(acc_o, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])
            else:
                T.copy(acc_o, O_shared)
                T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])
            if return_lse:
                # ln(sum_j exp(s_j)) = (max * scale + log2(sum of the exp2 terms)) / log2(e)
                for i in T.Parallel(block_M):
                    if bx * block_M + i < length:
                        value = (scores_max[i] * scale + T.log2(logsum[i])) / LOG2E
                        if empty_rows:
                            value = T.if_then_else(logsum[i] == 0, T.infinity(accum), value)
                        if varlen:
                            LSE[by, base + bx * block_M + i] = value
                        else:
                            LSE[bz, by, bx * block_M + i] = value

    lse_shape = (heads, total) if varlen else (batch, heads, seq_len)
    if varlen and return_lse:
        @T.prim_func
        def flash_fwd(Q: T.Tensor(q_shape, dtype), K: T.Tensor(kv_shape, dtype), V: T.Tensor(kv_shape, dtype),
                      cu_seqlens: T.Tensor((batch + 1,), "int32"), max_seqlen: T.int32,
                      Output: T.Tensor(q_shape, dtype), LSE: T.Tensor(lse_shape, accum)):
            body(Q, K, V, Output, LSE, cu_seqlens, max_seqlen)
    elif varlen:
        @T.prim_func
        def flash_fwd(Q: T.Tensor(q_shape, dtype), K: T.Tensor(kv_shape, dtype), V: T.Tensor(kv_shape, dtype),
                      cu_seqlens: T.Tensor((batch + 1,), "int32"), max_seqlen: T.int32,
                      Output: T.Tensor(q_shape, dtype)):
            body(Q, K, V, Output, None, cu_seqlens, max_seqlen)
    elif return_lse:
        @T.prim_func
        def flash_fwd(Q: T.Tensor(q_shape, dtype), K: T.Tensor(kv_shape, dtype), V: T.Tensor(kv_shape, dtype),
                      Output: T.Tensor(q_shape, dtype), LSE: T.Tensor(lse_shape, accum)):
            body(Q, K, V, Output, LSE, None, None)
    else:
        @T.prim_func
        def flash_fwd(Q: T.Tensor(q_shape, dtype), K: T.Tensor(kv_shape, dtype), V: T.Tensor(kv_shape, dtype),
                      Output: T.Tensor(q_shape, dtype)):
            body(Q, K, V, Output, None, None, None)

    return flash_fwd


def reference_numpy(q, k, v, is_causal, sm_scale=None, window=(-1, -1), softcap=0.0, lse=False,
                    align="bottom_right"):
    """Attention in float64 numpy on [batch, seq, heads, dim] arrays (K and V may have fewer
    heads: grouped-query attention, and another length: the mask aligned as flash_attention
    aligns it), with flash_attention's window and soft cap; a row that keeps no key gives 0
    (and an infinite log-sum-exp). With lse=True also the [batch, heads, seq] log-sum-exp."""
    import numpy as np

    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k, v = (np.repeat(x, group, axis=2) for x in (k, v))
    dim = q.shape[-1]
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(dim) if sm_scale is None else sm_scale)
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    n, n_kv = q.shape[1], k.shape[1]
    shift = n_kv - n if align == "bottom_right" else 0
    i, j = np.arange(n)[:, None] + shift, np.arange(n_kv)[None, :]
    left, right = window
    if is_causal:
        right = 0 if right < 0 else min(right, 0)
    keep = np.ones((n, n_kv), bool)
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    empty = ~keep.any(-1)[:, None]
    p = np.where(empty, 0.0, np.exp(s - np.where(empty, 0.0, m)))
    total = p.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", p / np.where(empty, 1.0, total), v)
    if lse:
        return out, np.where(empty, np.inf, m + np.log(np.where(empty, 1.0, total)))[..., 0]
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    from tilers import runtime

    gpu = runtime.gpu_probe()[0] > 0
    if gpu:
        import torch
        import torch.nn.functional as F

        b, h, n, d = args.batch, args.heads, args.seq, args.dim
        kernel = tilers.compile(flash_attention(b, h, n, d, args.causal), out_idx=[3])
        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
        out = kernel(q, k, v)
        want = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=args.causal
        ).transpose(1, 2)
        err = ((out.float() - want.float()).abs().max() / want.float().abs().max()).item()
        print(f"flash attention {b}x{n}x{h}x{d} causal={args.causal} on the GPU: relative error {err:.2e} "
              f"against SDPA")
        print("check:", "OK" if err < 2e-2 else "FAILED")
    else:
        import numpy as np

        b, h, n, d = 1, 2, 100, 64
        kernel = tilers.compile(flash_attention(b, h, n, d, args.causal, block_M=64, block_N=32),
                                out_idx=[3], target="interp")
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((b, n, h, d)).astype(np.float16) for _ in range(3))
        out = kernel(q, k, v)
        err = np.abs(out.astype(np.float64) - reference_numpy(q, k, v, args.causal)).max()
        print(f"flash attention {b}x{n}x{h}x{d} causal={args.causal} on the interpreter: max error {err:.2e}")
        print("check:", "OK" if err < 2e-2 else "FAILED")


if __name__ == "__main__":
    main()
