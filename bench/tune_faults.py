"""An autotuned element-wise add with two deliberately broken configs, for
bench/tune_backends.py: `fault="spin"` never finishes (a device loop on a volatile flag) and
`fault="trap"` ends in a sticky CUDA error (PTX `trap`). Only the process backend survives
them: a worker that hangs past `timeout` is killed and replaced, a worker whose context is
broken is replaced, and each loses only its config. Lives in its own module because the
benchmark workers import the tuned function by its name."""

import tilers
import tilers.language as T
import torch

FAULTS = """
__device__ void tl_spin_forever() {
    volatile unsigned int flag = 0;
    while (flag == 0) { __nanosleep(1000); }
}
__device__ void tl_trap_now() { asm volatile("trap;"); }
"""


def configs(M, N, dtype="float16"):
    good = [
        {"block_M": bm, "block_N": bn, "threads": 128, "fault": "none"}
        for bm in (8, 16, 32)
        for bn in (128, 256)
    ]
    return good + [
        {"block_M": 16, "block_N": 128, "threads": 128, "fault": "spin"},
        {"block_M": 32, "block_N": 128, "threads": 128, "fault": "trap"},
    ]


@tilers.autotune(
    configs=configs,
    ref_prog=torch.add,
    rtol=0,
    atol=0,
    backend="process",
    timeout=20,
    search="exhaustive",
    records=False,
    verbose=True,
)
@tilers.jit(out_idx=[2])
def faulty_add(M, N, block_M, block_N, threads, fault, dtype="float16"):
    @T.prim_func
    def add(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            if fault != "none":
                T.import_source(FAULTS)
                if bx == 0 and by == 0:
                    T.call_extern("handle", "tl_spin_forever" if fault == "spin" else "tl_trap_now")
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = (
                    A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
                )

    return add
