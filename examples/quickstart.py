"""The main job: compile tile kernels and run them against a reference.

On a machine with an NVIDIA GPU the kernels run there and are checked against torch. Without
one they run on the tilers interpreter, checked against numpy, and the CUDA generated for
sm_90a (H100/H200) is shown and compiled with NVRTC.
"""

import sys

import tilers
import tilers.language as T

M, N = 1000, 1000  # not multiples of the block: ragged edges are padded and dropped
block_M, block_N = 32, 128
ELF_MAGIC = b"\x7fELF"


@T.prim_func
def add(
    A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float16")
):
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            C[by * block_M + i, bx * block_N + j] = (
                A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
            )


@T.prim_func
def softmax(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
    with T.Kernel(T.ceildiv(M, 4), threads=128) as bx:
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


def on_gpu():
    import torch

    k_add = tilers.compile(add, out_idx=[2])
    k_softmax = tilers.compile(softmax, out_idx=[1])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    b = torch.randn(M, N, device="cuda", dtype=torch.float16)
    x = torch.randn(M, N, device="cuda")
    add_err = (k_add(a, b).float() - (a + b).float()).abs().max().item()
    sm_err = ((k_softmax(x) - torch.softmax(x, 1)).abs() / torch.softmax(x, 1)).max().item()
    print(f"device: {torch.cuda.get_device_name()} ({k_add.arch})")
    print(f"add     fp16 {M}x{N}: max abs error vs torch {add_err:.3g}")
    print(f"softmax fp32 {M}x{N}: max rel error vs torch {sm_err:.3g}")
    ok = add_err == 0 and sm_err <= 1e-5
    print("check:", "OK" if ok else "MISMATCH")
    return ok


def without_gpu():
    import numpy as np

    k_add = tilers.compile(add, out_idx=[2])
    k_softmax = tilers.compile(softmax, out_idx=[1])
    print(k_add.source)  # the CUDA it would run on a GPU (sm_90a)
    cubin = k_add.cubin
    print(f"// NVRTC compiled it to a {len(cubin)}-byte sm_90a cubin (ELF: {cubin[:4] == ELF_MAGIC})")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, N)).astype(np.float16)
    b = rng.standard_normal((M, N)).astype(np.float16)
    x = rng.standard_normal((M, N)).astype(np.float32)
    add_err = np.abs(k_add(a, b).astype(np.float64) - (a + b).astype(np.float64)).max()
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    sm_err = (np.abs(k_softmax(x) - want) / want).max()
    print("no GPU here: the kernels ran on the tilers interpreter (host numpy arrays)")
    print(f"add     fp16 {M}x{N}: max abs error vs numpy {add_err:.3g}")
    print(f"softmax fp32 {M}x{N}: max rel error vs numpy {sm_err:.3g}")
    ok = add_err == 0 and sm_err <= 1e-5
    print("check:", "OK" if ok else "MISMATCH")
    return ok


if __name__ == "__main__":
    from tilers import runtime

    ok = on_gpu() if runtime.gpu_available() else without_gpu()
    sys.exit(0 if ok else 1)
