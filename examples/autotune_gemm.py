"""Autotune a pipelined GEMM over Hopper tile shapes (tile sizes first, then warpgroups, how
they split the tile, stages); a second run reuses the record, another M/N/K searches again.

On sm_90a each T.gemm runs on wgmma: `threads` is 1 or 2 warpgroups, `policy` stacks them
along M (full_row: each warpgroup issues wgmma of N = block_N) or N (full_col: N =
block_N / 2), and the pipeline keeps one wgmma group in flight. Elsewhere the same configs
run on mma.sync.

    python examples/autotune_gemm.py [M N K]         # needs a GPU and torch
    python -m tilers tuning --plot tuning.png
"""

import sys
import time

import tilers
import tilers.language as T
import torch

POLICIES = {"full_row": T.GemmWarpPolicy.FullRow, "full_col": T.GemmWarpPolicy.FullCol}


def configs(M, N, K, dtype="float16"):
    return [
        {"block_M": block_M, "block_N": block_N, "block_K": block_K,
         "num_stages": num_stages, "threads": threads, "policy": policy}
        for block_M, block_N in ((128, 128), (128, 256), (256, 128), (64, 256), (128, 64))
        for block_K in (32, 64)
        for num_stages in (3, 4)
        for threads in (128, 256)
        for policy in ("full_row", "full_col")
    ]


def reference(A, B):
    return (A.float() @ B.float()).to(A.dtype)


@tilers.autotune(
    configs=configs,
    ref_prog=reference,
    rtol=1e-2,
    atol=1e-2,
    flops=lambda M, N, K, dtype="float16": 2 * M * N * K,
    # round 1 times one config per (tile, warpgroups, split): on Hopper the threads and the
    # policy decide each warpgroup's share of the tile (its registers), as much as the tile
    tile_keys=("block_M", "block_N", "block_K", "threads", "policy"),
)
@tilers.jit(out_idx=[2])
def matmul(M, N, K, block_M, block_N, block_K, num_stages, threads, policy, dtype="float16"):
    accum_dtype = "float32"

    @T.prim_func
    def matmul(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, policy=POLICIES[policy])
            T.copy(C_local, C[by * block_M, bx * block_N])

    return matmul


if __name__ == "__main__":
    M, N, K = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (4096, 4096, 4096)
    start = time.perf_counter()
    kernel = matmul(M, N, K)
    elapsed = time.perf_counter() - start
    result = matmul.last_result
    how = "reused the record" if result.from_record else "searched"
    print(f"matmul {M}x{N}x{K}: {how} in {elapsed:.2f} s over {len(result.results)} configs; "
          f"best {result.config}, {result.ms:.4f} ms, {2 * M * N * K / result.ms / 1e9:.1f} TFLOP/s")
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(A, B), reference(A, B), rtol=1e-2, atol=1e-2)
    print(kernel.bench(flops=2 * M * N * K))
