"""Register-A gemm (TileLang's `T.copy(A_shared, A_local); T.gemm(A_local, B_shared, C)`)
against the same GEMM with A read from shared memory (`T.gemm(A_shared, B_shared, C)`), fp16
4096^3 and 8192x8192x4096 on the GPU: checked against torch, then timed interleaved (SS, RS,
SS, RS, ...) over ROUNDS rounds of CUDA-event timing; prints each round and the median ratio.
Run with the wheel under test on PYTHONPATH (`gpu-check ab`): main moves A_local to shared
memory (a shared-to-shared copy each K tile); branch wip/register-a-from-shared keeps it in
registers (wgmma RS) — measured slower than both on an H100 (bench/results, session 34)."""

import os
import statistics

import tilers
import tilers.language as T
import torch

ROUNDS = int(os.environ.get("ROUNDS", "5"))


def gemm(M, N, K, bm, bn, bk, stages, threads, register_a):
    @T.prim_func
    def kern(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            a_s = T.alloc_shared((bm, bk), "float16")
            b_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            if register_a:
                a_f = T.alloc_fragment((bm, bk), "float16")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], a_s)
                T.copy(B[k * bk, bx * bn], b_s)
                if register_a:
                    T.copy(a_s, a_f)
                    T.gemm(a_f, b_s, acc)
                else:
                    T.gemm(a_s, b_s, acc)
            T.copy(acc, C[by * bm, bx * bn])

    return kern


def time_us(fn, reps=50):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


for M, N, K in [(4096, 4096, 4096), (8192, 8192, 4096)]:
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    want = (a.float() @ b.float())
    for bm, bn, bk, stages, threads in [(128, 128, 64, 3, 128), (128, 256, 64, 3, 256), (128, 128, 32, 4, 128)]:
        kernels = {}
        for name, ra in (("ss", False), ("rs", True)):
            try:
                k = tilers.compile(gemm(M, N, K, bm, bn, bk, stages, threads, ra), out_idx=[2])
                c = k(a, b)
                torch.cuda.synchronize()
                err = ((c.float() - want).abs().max() / want.abs().max()).item()
                kernels[name] = k
                print(f"{M}x{N}x{K} {bm}x{bn}x{bk} s{stages} t{threads} {name}: max rel err {err:.1e}"
                      + ("  WRONG" if err > 1e-2 else ""))
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"{M}x{N}x{K} {bm}x{bn}x{bk} s{stages} t{threads} {name}: {type(e).__name__}: {str(e)[:300]}")
        if len(kernels) < 2:
            continue
        ratios, times = [], {"ss": [], "rs": []}
        for _ in range(ROUNDS):
            for name in ("ss", "rs"):
                times[name].append(time_us(lambda: kernels[name](a, b)))
            ratios.append(times["ss"][-1] / times["rs"][-1])
        flops = 2 * M * N * K
        ss, rs = statistics.median(times["ss"]), statistics.median(times["rs"])
        print(f"  ss {ss:.1f} us ({flops / ss / 1e6:.0f} TFLOP/s)  rs {rs:.1f} us ({flops / rs / 1e6:.0f} TFLOP/s)"
              f"  rs speed / ss: median {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
