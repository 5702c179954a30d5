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
                    num_stages=2, threads=128, dtype="float16", sm_scale=None, overlap=False):
    """Q, K, V: [batch, seq_len, heads, dim]; returns the @T.prim_func computing
    O = softmax(Q K^T * sm_scale (+ causal mask)) V, O of the same shape and dtype.

    overlap=True schedules the loop by hand (TileLang's stage=/order=/group=): step k issues
    Q K_k^T, rescales the output and issues P_{k-1} V_{k-1}, then computes the softmax of
    S_k while the tensor cores still run P_{k-1} V_{k-1} (FlashAttention-3's overlap)."""
    shape = (batch, seq_len, heads, dim)
    accum = "float32"
    scale = (1.0 / math.sqrt(dim) if sm_scale is None else sm_scale) * LOG2E
    tiles_q = T.ceildiv(seq_len, block_M)

    @T.prim_func
    def flash_fwd(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
                  Output: T.Tensor(shape, dtype)):
        with T.Kernel(tiles_q, heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            O_shared = T.alloc_shared((block_M, dim), dtype)
            acc_s = T.alloc_fragment((block_M, block_N), accum)
            acc_s_cast = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, dim), accum)
            scores_max = T.alloc_fragment((block_M,), accum)
            scores_max_prev = T.alloc_fragment((block_M,), accum)
            scores_scale = T.alloc_fragment((block_M,), accum)
            scores_sum = T.alloc_fragment((block_M,), accum)
            logsum = T.alloc_fragment((block_M,), accum)

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum))
            # causal: the key tiles up to this query tile's last row
            if is_causal:
                loop_range = T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
            else:
                loop_range = T.ceildiv(seq_len, block_N)
            # the body's statements: 0 copy K; 1 S = Q K^T; 2 the mask (when some tile needs
            # one); then 7 of the softmax, 1 rescaling O, 1 copy of V, O += P V
            ragged = seq_len % block_N != 0
            m = int(is_causal or ragged)
            softmax = list(range(2, 9 + m))
            schedule = dict(order=[-1, 0, 3, 1, -1, 2], stage=[-1, 0, 0, 1, -1, 1],
                            group=[[0], [1], softmax, [9 + m], [10 + m], [11 + m]]) if overlap else {}
            for k in T.Pipelined(loop_range, num_stages=num_stages, **schedule):
                T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)
                # keys past the sequence (the ragged last tile) and, causally, past the query:
                # only the tiles that hold such keys are masked (a tile-level condition)
                crosses = (k + 1) * block_N > bx * block_M + 1 if is_causal else False
                last = k == loop_range - 1 if ragged else False
                if crosses or last:
                    for i, j in T.Parallel(block_M, block_N):
                        if is_causal:
                            acc_s[i, j] = T.if_then_else(
                                (bx * block_M + i >= k * block_N + j) and (k * block_N + j < seq_len),
                                acc_s[i, j], -T.infinity(accum))
                        else:
                            acc_s[i, j] = T.if_then_else(k * block_N + j < seq_len, acc_s[i, j],
                                                         -T.infinity(accum))
                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                # a row with every key masked so far keeps its max at -inf: scale by 0 then
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.if_then_else(
                        scores_max[i] == -T.infinity(accum), 0,
                        T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale))
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return flash_fwd


def reference_numpy(q, k, v, is_causal, sm_scale=None):
    """Attention in float64 numpy on [batch, seq, heads, dim] arrays."""
    import numpy as np

    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    dim = q.shape[-1]
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(dim) if sm_scale is None else sm_scale)
    if is_causal:
        n = q.shape[1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v)


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
