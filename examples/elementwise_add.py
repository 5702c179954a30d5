"""Element-wise add of two fp16 matrices whose sizes are not multiples of the block."""

import tilers
import tilers.language as T

M, N = 1000, 1000
block_M, block_N = 32, 128


@T.prim_func
def add(
    A: T.Tensor((M, N), "float16"),
    B: T.Tensor((M, N), "float16"),
    C: T.Tensor((M, N), "float16"),
):
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            C[by * block_M + i, bx * block_N + j] = (
                A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
            )


if __name__ == "__main__":
    kernel = tilers.compile(add, out_idx=[2], target="cuda:sm_90a")
    print(kernel.get_kernel_source())
