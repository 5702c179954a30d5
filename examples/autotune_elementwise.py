"""Autotune an element-wise add over 24 tile shapes; a second run reuses the tuning record.

    python examples/autotune_elementwise.py [M N]     # needs a GPU and torch
    python -m tilers tuning                          # the records, per problem
"""

import sys
import time

import tilers
import tilers.language as T
import torch


def configs(M, N, dtype="float16"):
    return [
        {"block_M": block_M, "block_N": block_N, "threads": threads}
        for block_M in (8, 16, 32, 64)
        for block_N in (128, 256, 512)
        for threads in (128, 256)
    ]


@tilers.autotune(
    configs=configs,
    ref_prog=torch.add,
    rtol=0,
    atol=0,
    bytes=lambda M, N, dtype="float16": 3 * M * N * torch.finfo(getattr(torch, dtype)).bits // 8,
)
@tilers.jit(out_idx=[2])
def add(M, N, block_M, block_N, threads, dtype="float16"):
    @T.prim_func
    def add(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = (
                    A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
                )

    return add


if __name__ == "__main__":
    M, N = (int(v) for v in sys.argv[1:3]) if len(sys.argv) >= 3 else (8192, 8192)
    start = time.perf_counter()
    kernel = add(M, N)
    elapsed = time.perf_counter() - start
    result = add.last_result
    how = "reused the record" if result.from_record else "searched"
    print(f"add {M}x{N}: {how} in {elapsed:.2f} s; best {result.config}, {result.ms:.4f} ms")
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    b = torch.randn_like(a)
    assert torch.equal(kernel(a, b), a + b)
    print(kernel.bench())
