"""Export the kernels the C++ example (main.cpp) launches: a GEMM in two specializations with
a dispatcher choosing by M (block_M 64 for M <= 256, block_M 128 above), the same GEMM split
over K (two kernels in one call: float32 partial sums in a T.alloc_global workspace the
caller passes, then their sum), and a row softmax.

    python examples/cpp/export_kernels.py OUT_DIR [--arch sm_90a]

writes, per kernel, NAME.cu / NAME.json / NAME.cubin / tilers_NAME.h / tilers_NAME.c, and the
dispatcher tilers_gemm.h / tilers_gemm.c (docs/export.md). Runs without a GPU (NVRTC only).
"""

import argparse

import tilers
import tilers.language as T

N, K = 1024, 1024  # the GEMM's fixed sizes; M is symbolic
SOFTMAX_ROWS, SOFTMAX_COLS = 4096, 1000


def gemm(block_M, block_N=128, block_K=64, stages=3):
    M = T.dynamic("M")

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * block_M, bx * block_N])

    return gemm


def splitk_gemm(split=4, block_M=64, block_N=128, block_K=64, stages=3):
    M = T.dynamic("M")
    k_tiles = K // block_K // split  # the K tiles of one split

    @T.prim_func
    def splitk_gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
                    C: T.Tensor((M, N), "float16")):
        partial = T.alloc_global((split, M, N), "float32")
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split, threads=128) as (bx, by, s):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(acc)
            for k in T.Pipelined(k_tiles, num_stages=stages):
                T.copy(A[by * block_M, (s * k_tiles + k) * block_K], A_s)
                T.copy(B[(s * k_tiles + k) * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, partial[s, by * block_M, bx * block_N])
        # the second kernel of the call: one row of C per block
        with T.Kernel(M, threads=128) as m:
            total = T.alloc_fragment((N,), "float32")
            T.clear(total)
            for t in T.serial(split):
                for n in T.Parallel(N):
                    total[n] += partial[t, m, n]
            T.copy(total, C[m, 0])

    return splitk_gemm


@T.prim_func
def softmax(X: T.Tensor((SOFTMAX_ROWS, SOFTMAX_COLS), "float32"),
            Y: T.Tensor((SOFTMAX_ROWS, SOFTMAX_COLS), "float32")):
    with T.Kernel(T.ceildiv(SOFTMAX_ROWS, 4), threads=128) as bx:
        x = T.alloc_fragment((4, 1024), "float32")
        row_max = T.alloc_fragment((4,), "float32")
        row_sum = T.alloc_fragment((4,), "float32")
        T.copy(X[bx * 4, 0], x, pad=-T.infinity("float32"))
        T.reduce_max(x, row_max, dim=1)
        for i, j in T.Parallel(4, 1024):
            x[i, j] = T.exp(x[i, j] - row_max[i])
        T.reduce_sum(x, row_sum, dim=1)
        for i, j in T.Parallel(4, 1024):
            x[i, j] = x[i, j] / row_sum[i]
        T.copy(x, Y[bx * 4, 0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    target = f"cuda:{args.arch}"
    small = tilers.compile(gemm(block_M=64), target=target)
    large = tilers.compile(gemm(block_M=128), target=target)
    tilers.export.dispatcher(args.out_dir, "gemm", [
        ("gemm_m64", small, {"M": (None, 256)}),
        ("gemm_m128", large, {}),
    ])
    tilers.compile(splitk_gemm(), target=target).export(args.out_dir, name="splitk_gemm")
    tilers.compile(softmax, target=target).export(args.out_dir, name="softmax")
    print(f"exported gemm (gemm_m64, gemm_m128), splitk_gemm and softmax for {args.arch} to {args.out_dir}")


if __name__ == "__main__":
    main()
