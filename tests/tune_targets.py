"""Autotuned functions at a module's top level (the process and Ray backends find the search's
function by its name in their workers), with picklable test hooks: a fake timing that can
hang or crash on a chosen config, and a check that runs each kernel on the interpreter."""

import os
import time

import kernels
import numpy as np
import tilers
from tilers.profiler import Timing

CONFIGS = [{"block_M": bm, "block_N": bn, "threads": 128} for bm in (16, 32, 64) for bn in (64, 128)]


def fake_gpu():
    return {"name": "Fake H200", "arch": "sm_90a", "sms": 132}


class Bench:
    """Bigger tiles are faster; `hang` never returns, `crash` ends the worker's process and
    `cuda_error` raises as a sticky CUDA error would."""

    def __init__(self, hang=None, crash=None, cuda_error=None):
        self.hang, self.crash, self.cuda_error = hang, crash, cuda_error

    def __call__(self, kernel, config, cutoff_ms, **_):
        if config == self.hang:
            time.sleep(3600)
        if config == self.crash:
            os._exit(3)
        if config == self.cuda_error:
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")
        ms = 1000.0 / (config["block_M"] * config["block_N"])
        if cutoff_ms is not None and ms > cutoff_ms:
            return Timing(ms, 5, stopped_early=True)
        return Timing(ms, 100)


def check(kernel, config, **_):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(kernel.info["params"][p]["shape"]).astype(np.float16)
            for p in kernel._input_positions)
    np.testing.assert_allclose(kernel(a, b).astype(np.float32), (a + b).astype(np.float32), rtol=1e-2, atol=1e-2)


@tilers.autotune(configs=CONFIGS, backend="process", timeout=8, verbose=False, records=False)
@tilers.jit(out_idx=[2], target="cuda:sm_90a")
def add(M, N, block_M, block_N, threads, dtype="float16"):
    return kernels.add(M, N, dtype, block_M, block_N, threads)


add.check_fn = check
add.device_info_fn = fake_gpu
add.bench_fn = Bench()


@tilers.autotune(configs=CONFIGS, backend="ray", timeout=15, verbose=False, records=False)
@tilers.jit(out_idx=[2], target="cuda:sm_90a")
def add_ray(M, N, block_M, block_N, threads, dtype="float16"):
    return kernels.add(M, N, dtype, block_M, block_N, threads)


add_ray.check_fn = check
add_ray.device_info_fn = fake_gpu
add_ray.bench_fn = Bench()
