"""Programmatic dependent launch (tile_passes::grid_dependence): where the kernels of one
call wait for the ones before them (griddepcontrol.wait) and let the next start
(griddepcontrol.launch_dependents), read from the generated CUDA, the report and KernelInfo;
sm_80 and single kernels get neither; the interpreter runs the programs as before."""

import os
import sys

import numpy as np
import tilers

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import decode_gemm  # noqa: E402
from dependent_launch import read_then_overwrite, slow_then_read  # noqa: E402

WAIT = 'asm volatile("griddepcontrol.wait;" ::: "memory");'
LAUNCH = 'asm volatile("griddepcontrol.launch_dependents;" ::: "memory");'


def kernels_of(source):
    """The source of each __global__ function, in order."""
    parts = source.split('extern "C" __global__')[1:]
    return parts


def test_the_second_kernel_waits_before_it_reads_what_the_first_wrote():
    kernel = tilers.compile(slow_then_read(1000), target="cuda:sm_90a")
    first, second = kernels_of(kernel.get_kernel_source())
    assert LAUNCH in first and WAIT not in first
    # the load of X (written by no kernel) comes before the wait, the load of A after it
    assert second.index("X[") < second.index(WAIT) < second.index("A[")
    # threads that take no path to A wait as the kernel ends
    assert second.rstrip().endswith(WAIT + "\n}")
    assert LAUNCH not in second  # the last kernel has nobody to let start
    info = kernel.info
    assert not info.get("dependent_launch") and info["then"][0]["dependent_launch"]
    report = kernel.report()
    assert "programmatic dependent launch" in report and "before its first access to 'A'" in report


def test_a_kernel_that_overwrites_what_an_earlier_one_reads_waits_first():
    kernel = tilers.compile(read_then_overwrite(300), target="cuda:sm_90a")
    first, second, third = kernels_of(kernel.get_kernel_source())
    assert LAUNCH in first and LAUNCH in second and LAUNCH not in third
    # kernel 1 writes X, which kernel 0 reads: the wait precedes the write
    assert second.index(WAIT) < second.index("X[")
    # kernel 2 touches nothing of the others: it waits only before it ends (so that it
    # completes after them, and whatever waits for it waits for them)
    assert third.count(WAIT) == 1 and third.index("Z[") < third.index(WAIT)
    report = kernel.report()
    assert "before its first access to 'X'\n" in report
    assert "touches nothing the kernels before it write or read" in report


def test_split_k_overlaps_its_main_loop_with_the_zeroing_kernel():
    """The atomic split-K GEMM: the consumers wait after their K loop, before the atomics
    into Y (zeroed by the first kernel); the producer's TMA loads of X and W never wait."""
    cfg = dict(schedule="atomic", order="xw", block_M=64, block_N=64, block_K=64, split_k=2, num_stages=4)
    kernel = tilers.compile(decode_gemm.linear.prim_func(4096, 4096, **cfg), out_idx=[2], target="cuda:sm_90a")
    zero, gemm = kernels_of(kernel.get_kernel_source())
    assert LAUNCH in zero
    first_wait = gemm.index(WAIT)
    assert gemm.index("wgmma.mma_async") < first_wait < gemm.index("tl_atomic_add")
    # each producer branch (one per version of the kernel) issues its copies before any wait
    producers = gemm.split("if ((tid == 128))")[1:]
    assert producers
    for branch in producers:
        assert "cp.async.bulk.tensor" in branch.split(WAIT)[0]


def test_the_combine_of_split_k_waits_before_it_reads_the_partials():
    cfg = dict(schedule="splitk", block_N=64, block_M=16, split_k=2, num_stages=4)
    kernel = tilers.compile(decode_gemm.linear.prim_func(4096, 4096, **cfg), out_idx=[2], target="cuda:sm_90a")
    gemm, combine = kernels_of(kernel.get_kernel_source())
    assert LAUNCH in gemm and combine.index(WAIT) < combine.index("partial[")


def test_sm80_and_single_kernels_have_no_grid_dependence():
    kernel = tilers.compile(slow_then_read(1000), target="cuda:sm_80")
    assert "griddepcontrol" not in kernel.get_kernel_source()
    assert not kernel.info["then"][0].get("dependent_launch")
    single = tilers.compile(decode_gemm.linear.prim_func(4096, 4096, schedule="tiles", block_N=64, block_M=16),
                            out_idx=[2], target="cuda:sm_90a")
    assert "griddepcontrol" not in single.get_kernel_source()


def test_the_interpreter_runs_the_programs_unchanged():
    n = 300
    x = np.arange(n, dtype=np.float32) / 7
    a = np.full(n, -1, np.float32)
    b = np.zeros(n, np.float32)
    tilers.compile(slow_then_read(n, work=3), target="interp")(x, a, b)
    np.testing.assert_allclose(b, np.arange(n) + x, rtol=1e-6)
    x = np.arange(n, dtype=np.float32)
    y, z = np.zeros(n, np.float32), np.zeros(n, np.float32)
    tilers.compile(read_then_overwrite(n), target="interp")(x, y, z)
    np.testing.assert_allclose(y, 2 * np.arange(n))
    assert not x.any() and (z == 1).all()


def test_every_pass_agrees_with_the_grid_dependence_stage():
    """The CPU model runs each kernel through every stage, grid_dependence's included."""
    from tilers import testing

    result = testing.check_passes(read_then_overwrite(300), arch="sm_90a", check=True)
    stages = str(result)
    for k in range(3):
        assert f"kernel{k}/grid_dependence" in stages


def test_a_tma_load_of_what_the_kernel_before_wrote_waits_first():
    """A later kernel whose producer loads, by TMA, a tensor the first kernel wrote: the
    producer waits before it issues the copy (the consumers' own accesses need no wait)."""
    from test_multi_kernel import scale_then_gemm

    kernel = tilers.compile(scale_then_gemm(256, 256, 512), out_idx=[3], target="cuda:sm_90a")
    scale, gemm = kernels_of(kernel.get_kernel_source())
    load = "cp.async.bulk.tensor.2d.shared::cluster.global"
    assert load in gemm
    producer = gemm[gemm.index("} else {"):]  # the producer warpgroup's branch
    assert WAIT in producer[:producer.index(load)]
    # the epilogue's TMA store of C (which no other kernel touches) needs no wait
    store = gemm.index("cp.async.bulk.tensor.2d.global.shared::cta")
    assert WAIT not in gemm[:store]
    assert "before its first access to 'A2'" in kernel.report()
