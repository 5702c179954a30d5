"""One launch of each main GEMM configuration at 4096^3, for Nsight Compute on the H200:

    ncu --clock-control none -k regex:matmul --metrics <bank-conflict metrics> \
        python3 scripts/gemm-ncu.py

(scripts/gpu-check ncu runs it and writes $OUT/ncu-gemm.txt). The kernels are compiled and
warmed up before the profiled launches; a check against torch.matmul follows each."""

import os
import sys

import tilers
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import kernels  # noqa: E402

M = N = K = 4096
CONFIGS = [  # block_M, block_N, block_K, stages, threads, trans_B
    (128, 128, 32, 3, 128, False),
    (128, 256, 64, 3, 256, False),
    (128, 128, 32, 3, 128, True),
]

a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
for bm, bn, bk, stages, threads, trans_b in CONFIGS:
    kernel = tilers.compile(
        kernels.matmul(M, N, K, bm, bn, bk, stages, threads, trans_B=trans_b), out_idx=[2]
    )
    bb = b.t().contiguous() if trans_b else b
    c = kernel(a, bb)
    torch.cuda.synchronize()
    want = a.float() @ b.float()
    err = ((c.float() - want).abs().max() / want.abs().max()).item()
    print(f"{bm}x{bn}x{bk} s{stages} t{threads} {'TN' if trans_b else 'NN'}: max rel err {err:.2e}")
