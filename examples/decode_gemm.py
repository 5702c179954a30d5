"""The weight GEMMs of decoding: y = x @ W^T (torch.nn.functional.linear), x [M, K] the
batch's activations with M small (1 to 128, a T.dynamic size: one kernel serves every batch),
W [N, K] a weight read once from memory. These are memory-bound: the work is to keep every SM
streaming W. One factory, `linear`, takes the schedule as a config, so the autotuner picks one
per bucket of M (`tuned_linear`, its records keyed by N, K and the dtype):

- "tiles": one block per (N tile, M tile) over the whole K loop, the weight tile as the
  tensor-core A operand (its rows are the long dimension) and the batch as B (y^T = W x^T);
  enough blocks when N / block_N fills the GPU.
- "splitk": the K loop split over `split_k` blocks per tile; each writes its float32 partial
  sums to a T.alloc_global workspace [split_k, M, N], and a second kernel adds them and
  converts (two launches, no atomics, deterministic).
- "atomic": split-K whose partial sums are added into a float32 output with atomics (the
  first kernel zeroes it: also two launches; the order of the additions varies).
- "streamk": a persistent grid of `blocks` blocks shares the tiles' K iterations evenly (one
  block's range may start inside one tile and end inside another), each adding its partial
  tiles into a float32 output with atomics (zeroed by a first kernel): no wave left
  half-empty whatever M and N.
- "gemv": CUDA cores, threads own rows: each block's threads multiply a [block_N, block_K]
  tile of W by x elementwise (16-byte loads along K) and T.reduce_sum adds along K (the
  compiler picks the shuffles; `kernel.report()` names them); for M of 1 to a few.

    python examples/decode_gemm.py           # GPU: every schedule against torch; else the interpreter
"""

import contextlib
import sys

import numpy as np
import tilers
import tilers.language as T

SCHEDULES = ("tiles", "splitk", "atomic", "streamk", "gemv")


@tilers.jit(out_idx=[2])
def linear(N, K, schedule="splitk", block_N=128, block_M=16, block_K=128, split_k=4, num_stages=3,
           threads=128, blocks=132, dtype="float16", order="wx", cluster=1, share="x"):
    """y = x @ W^T for x [M, K] (M symbolic), W [N, K]: y [M, N] of `dtype` (float32 for the
    "atomic" and "streamk" schedules). See the module docstring for the schedules; `order`
    says which tile is the tensor cores' A operand: "wx" the weight's (y^T = W x^T, its
    block_N rows a multiple of wgmma's 64), "xw" the batch's (y = x W^T, block_M rows a
    multiple of 64 on Hopper, block_N any multiple of 8: a tile count that fills the GPU).
    `cluster` (2 or 4; "tiles", "splitk", "atomic") launches the tensor-core kernel in
    thread-block clusters; `share` says which operand's tile the blocks of a cluster share,
    each block loading its part of it, multicast to all (sm_90a; the report says so): "x"
    (clusters of consecutive W tiles, one batch tile) or "w" (clusters of consecutive batch
    tiles, one W tile: W is read from L2 once per cluster, cuBLAS's arrangement at M = 128;
    the batch tiles are padded to a whole number of clusters, a padding block's rows all
    past M)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if order not in ("wx", "xw"):
        raise ValueError(f"order must be 'wx' or 'xw', got {order!r}")
    if share not in ("x", "w"):
        raise ValueError(f"share must be 'x' or 'w', got {share!r}")
    M = T.dynamic("M")
    accum = "float32"
    out_dtype = accum if schedule in ("atomic", "streamk") else dtype
    split = split_k if schedule in ("splitk", "atomic") else 1
    # the K range of one split, a whole number of K tiles
    k_tiles = (K + block_K - 1) // block_K
    tiles_per_split = (k_tiles + split - 1) // split

    # the accumulator tile: [block_N, block_M] (y^T) for "wx", [block_M, block_N] for "xw"
    acc_shape = (block_N, block_M) if order == "wx" else (block_M, block_N)

    def mma(W_s, X_s, acc):
        if order == "wx":
            T.gemm(W_s, X_s, acc, transpose_B=True)
        else:
            T.gemm(X_s, W_s, acc, transpose_B=True)

    def assign(Y, *lead):
        """put(m, n, v) storing v at Y[*lead, m, n]."""
        def put(m, n, v):
            Y[(*lead, m, n)] = v
        return put

    def add(Y):
        """put(m, n, v) adding v at Y[m, n] with an atomic."""
        return lambda m, n, v: T.atomic_add(Y[m, n], v)

    def store(acc, bx, by, put):
        """The accumulator tile's element of row m, column n of y: put(m, n, value)."""
        if order == "wx":
            for i, j in T.Parallel(block_N, block_M):
                put(by * block_M + j, bx * block_N + i, acc[i, j])
        else:
            for i, j in T.Parallel(block_M, block_N):
                put(by * block_M + i, bx * block_N + j, acc[i, j])

    def tensor_core_tile(X, W, acc, bx, by, s):
        """acc = W tile @ x tile^T (or its transpose, by `order`) over split s's K tiles."""
        W_s = T.alloc_shared((block_N, block_K), dtype)
        X_s = T.alloc_shared((block_M, block_K), dtype)
        T.clear(acc)
        for k in T.Pipelined(tiles_per_split, num_stages=num_stages):
            kk = s * tiles_per_split + k
            T.copy(W[bx * block_N, kk * block_K], W_s)
            T.copy(X[by * block_M, kk * block_K], X_s)
            mma(W_s, X_s, acc)

    @contextlib.contextmanager
    def tile_blocks(*rest):
        """The tensor-core kernel's blocks, one per (W tile, batch tile, *rest): yields (bx, by,
        *rest) with bx the W tile and by the batch tile. A cluster runs along the launch's x, so
        with share="w" the batch tiles go there (a whole number of clusters of them)."""
        if cluster > 1 and share == "w":
            grid = (T.ceildiv(M, block_M * cluster) * cluster, T.ceildiv(N, block_N), *rest)
            with T.ClusterKernel(*grid, cluster_dims=cluster, threads=threads) as ids:
                yield (ids[1], ids[0], *ids[2:])
        else:
            grid = (T.ceildiv(N, block_N), T.ceildiv(M, block_M), *rest)
            with T.ClusterKernel(*grid, cluster_dims=cluster, threads=threads) as ids:
                yield tuple(ids)

    @T.macro
    def zero(Y):
        with T.Kernel(T.ceildiv(N, 1024), M, threads=128) as (bx, m):
            nothing = T.alloc_fragment((1024,), accum)
            T.clear(nothing)
            T.copy(nothing, Y[m, bx * 1024])

    if schedule == "tiles":

        @T.prim_func
        def kernel(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), dtype), Y: T.Tensor((M, N), out_dtype)):
            with tile_blocks() as (bx, by):
                acc = T.alloc_fragment(acc_shape, accum)
                tensor_core_tile(X, W, acc, bx, by, 0)
                store(acc, bx, by, assign(Y))

        return kernel

    if schedule == "splitk":

        @T.prim_func
        def kernel(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), dtype), Y: T.Tensor((M, N), out_dtype)):
            partial = T.alloc_global((split, M, N), accum)
            with tile_blocks(split) as (bx, by, s):
                acc = T.alloc_fragment(acc_shape, accum)
                tensor_core_tile(X, W, acc, bx, by, s)
                store(acc, bx, by, assign(partial, s))
            # the second launch: add the splits and convert, 8 outputs of a row per thread
            with T.Kernel(T.ceildiv(N, 1024), M, threads=128) as (bx, m):
                total = T.alloc_fragment((1024,), accum)
                T.clear(total)
                for t in T.serial(split):
                    for n in T.Parallel(1024):
                        total[n] += partial[t, m, bx * 1024 + n]
                T.copy(total, Y[m, bx * 1024])

        return kernel

    if schedule == "atomic":

        @T.prim_func
        def kernel(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), dtype), Y: T.Tensor((M, N), out_dtype)):
            zero(Y)
            with tile_blocks(split) as (bx, by, s):
                acc = T.alloc_fragment(acc_shape, accum)
                tensor_core_tile(X, W, acc, bx, by, s)
                store(acc, bx, by, add(Y))

        return kernel

    if schedule == "streamk":
        tiles_n = (N + block_N - 1) // block_N

        @T.prim_func
        def kernel(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), dtype), Y: T.Tensor((M, N), out_dtype)):
            zero(Y)
            with T.Kernel(blocks, threads=threads) as pid:
                W_s = T.alloc_shared((block_N, block_K), dtype)
                X_s = T.alloc_shared((block_M, block_K), dtype)
                acc = T.alloc_fragment(acc_shape, accum)
                total = tiles_n * T.ceildiv(M, block_M) * k_tiles  # K iterations of every tile
                share = T.ceildiv(total, blocks)
                it = T.alloc_var("int32", init=pid * share)
                end = T.min(pid * share + share, total)
                while it < end:
                    tile = it // k_tiles
                    k0 = it % k_tiles
                    k1 = T.min(k_tiles, k0 + end - it)
                    bx = tile % tiles_n
                    by = tile // tiles_n
                    T.clear(acc)
                    for k in T.Pipelined(k0, k1, num_stages=num_stages):
                        T.copy(W[bx * block_N, k * block_K], W_s)
                        T.copy(X[by * block_M, k * block_K], X_s)
                        mma(W_s, X_s, acc)
                    store(acc, bx, by, add(Y))
                    it = it + (k1 - k0)

        return kernel

    @T.prim_func
    def kernel(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), dtype), Y: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), M, threads=threads) as (bx, m):
            products = T.alloc_fragment((block_N, block_K), accum)
            sums = T.alloc_fragment((block_N,), accum)
            T.clear(products)
            for k in T.serial(k_tiles):
                for i, j in T.Parallel(block_N, block_K):
                    products[i, j] += T.Cast(accum, W[bx * block_N + i, k * block_K + j]) * T.Cast(
                        accum, X[m, k * block_K + j]
                    )
            T.reduce_sum(products, sums, dim=1)
            T.copy(sums, Y[m, bx * block_N])

    return kernel


SMS = 132  # the streaming multiprocessors of an H100 / H200 (SXM), which "xw" tiles fill


def configs(N, K, dtype="float16", M=None):
    """The schedules and tiles tried per bucket of M; given M, only those that suit it (GEMV
    for a few rows, tiles of at least half of M's rows and not more than M's)."""
    if M is not None:
        return [c for c in configs(N, K, dtype) if suits(c, M)]
    out = gemv_and_wx_configs()
    # the batch as the A operand: W's tile any multiple of 8 rows, the narrowest that puts at
    # most one block on each SM (14336 rows: 112 a tile, 128 tiles; 4096: 32), per split of
    # K and count of M tiles; 64-column K tiles, as many stages as fit (up to 8)
    for block_M in (64, 128):
        for m_tiles in ((1, 2) if block_M == 64 else (1,)):
            for split_k in (1, 2, 4):
                block_N = 8 * -(-N * split_k * m_tiles // (SMS * 8))
                if block_N > 256:
                    continue
                # 8 stages, and as many as fit in 220 KiB (up to 16: a thin tile's bytes in
                # flight; 10 stages of 128x32 measured 4% faster than 8 on the H100)
                most = min(16, 220 * 1024 // ((block_N + block_M) * 64 * 2))
                threads = 256 if block_M * block_N > 128 * 128 or block_M == 128 else 128
                for schedule in (("tiles",) if split_k == 1 else ("atomic", "splitk")):
                    for stages in sorted({min(8, most), most}):
                        cfg = {"schedule": schedule, "order": "xw", "block_N": block_N, "block_M": block_M,
                               "block_K": 64, "split_k": split_k, "num_stages": stages, "threads": threads}
                        if cfg not in out:
                            out.append(cfg)
                    # clusters of 2 and 4 W tiles sharing the batch's tile (multicast): it is
                    # read from L2 once per cluster, which matters once it is as wide as W's
                    # (M >= 64; cuBLAS's 1x2 clusters at M = 128)
                    for cluster in (2, 4):
                        if split_k <= 2 and -(-N // block_N) % cluster == 0:
                            out.append({"schedule": schedule, "order": "xw", "block_N": block_N,
                                        "block_M": block_M, "block_K": 64, "split_k": split_k,
                                        "num_stages": most, "threads": threads, "cluster": cluster})
                    # pairs of batch tiles sharing W's tile (two 64-row tiles of M = 128: W is
                    # read from L2 once a pair; cuBLAS's 64x64 tiles in 1x2 clusters). On the
                    # H100 1.09x / 1.03x the time of the 32x128 / 112x128 tiles (session 35)
                    if m_tiles == 2 and split_k <= 2 and block_N % 16 == 0:
                        out.append({"schedule": schedule, "order": "xw", "block_N": block_N,
                                    "block_M": block_M, "block_K": 64, "split_k": split_k,
                                    "num_stages": most, "threads": threads, "cluster": 2, "share": "w"})
    return out


def gemv_and_wx_configs():
    """The GEMVs and the tiles with the weight as the A operand."""
    out = [{"schedule": "gemv", "block_N": bn, "block_K": bk, "threads": t}
           for bn, bk, t in ((8, 256, 128), (16, 128, 128), (4, 512, 128), (32, 128, 256), (2, 1024, 128),
                             (4, 1024, 256))]
    for schedule in ("tiles", "splitk", "atomic", "streamk"):
        # 32 rows of W a tile: N / 32 blocks (128 at N = 4096) before any split of K
        for block_N in (32, 64, 128):
            for block_M in (16, 32, 64, 128):
                for split_k in ((2, 4, 8) if schedule in ("splitk", "atomic") else (1,)):
                    # two warpgroups for the widest tiles (128 rows of W each split in two)
                    threads = (128, 256) if block_N == 128 and block_M >= 64 else (128,)
                    # the stages that fit in shared memory, more for thin tiles (bytes in
                    # flight); wide tiles also as 64-column K tiles, twice the stages: a
                    # wgmma kept in flight holds a stage, so 3 stages of 128 columns leave
                    # one k-tile of W on its way from memory, 6 of 64 columns four (32
                    # columns, 12 stages, measured slower: bench/results/decode-gemm-bk32-*)
                    for block_K in (128, 64) if block_N + block_M >= 192 else (128,):
                        tile_bytes = (block_N + block_M) * block_K * 2
                        if block_K == 128:
                            stages = [s for s in (4, 8) if s * tile_bytes <= 160 * 1024 and (s == 4 or block_N == 32)]
                            stages = stages or [3]
                        else:
                            stages = [min(8, 192 * 1024 // tile_bytes)]
                        for num_stages in stages:
                            for t in threads:
                                out.append({"schedule": schedule, "block_N": block_N, "block_M": block_M,
                                            "block_K": block_K, "split_k": split_k, "num_stages": num_stages,
                                            "threads": t})
    # the thinnest tiles for a few rows of x, with more bytes in flight a block: 32 rows of W
    # 12 and 16 stages deep (one block an SM), 16 rows on two warps (256 blocks, 2-3 an SM)
    for block_N, stages, t in ((32, 12, 128), (32, 16, 128), (16, 8, 64), (16, 12, 64)):
        out.append({"schedule": "tiles", "block_N": block_N, "block_M": 16, "block_K": 128, "split_k": 1,
                    "num_stages": stages, "threads": t})
    return out


def suits(cfg, M):
    """Whether a config is worth timing for M rows of x."""
    if cfg["schedule"] == "gemv":
        return M <= 8
    if cfg.get("order") == "xw":  # 64-row tiles of the batch: for all but one row
        if cfg.get("cluster", 1) > 1 and M < 32:  # a thin batch tile: little to share
            return False
        if cfg.get("share") == "w" and M <= cfg["block_M"]:  # one batch tile: a pair half padding
            return False
        return M >= 2 and (cfg["block_M"] == 64 or M > 64)
    return cfg["block_M"] <= max(16, M) and 2 * cfg["block_M"] >= min(M, 128)


def reference(X, W):
    return (X.float() @ W.float().T).to(X.dtype)


def tuned_linear():
    """`linear` under the autotuner: one record per (N, K, dtype) and bucket of M."""
    return tilers.autotune(configs=configs, ref_prog=reference, rtol=2e-2, atol=2e-2, key=("N", "K", "dtype"),
                           flops=lambda N, K, dtype="float16": 2 * N * K)(linear)


def main():
    rng = np.random.default_rng(0)
    N, K = 1000, 520  # neither a multiple of the tiles
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    for M in (1, 7, 33):
        x = rng.standard_normal((M, K)).astype(np.float16)
        w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
        want = x.astype(np.float32) @ w.astype(np.float32).T
        for schedule in SCHEDULES:
            block_N = 16 if schedule == "gemv" else 64
            kernel = linear(N, K, schedule=schedule, block_N=block_N, block_M=16, block_K=128, split_k=3, blocks=7)
            if gpu:
                y = kernel(torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()).float().cpu().numpy()
            else:
                y = kernel(x, w).astype(np.float32)
            err = float(np.abs(y - want).max())
            print(f"M={M:3d} {schedule:7s}: max error {err:.4f} on {'the GPU' if gpu else 'the interpreter'}")
            assert err < 2e-2, (M, schedule, err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
