"""Warp-specialized TMA pipelines without a GPU: which sm_90a pipelined loops get a
producer warpgroup issuing bulk tensor copies on mbarriers, what the report and KernelInfo
say (the launched block, the tensor maps), why the others stay on cp.async, the option that
turns it off, and that every such GEMM compiles with NVRTC for sm_90a."""

import os
import sys

import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.dirname(__file__))
import kernels


def compiled(f, **options):
    return tilers.compile(f, out_idx=[2], target="cuda:sm_90a", **options)


@pytest.mark.parametrize("trans_A", [False, True])
@pytest.mark.parametrize("trans_B", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_hopper_gemm_pipelines_are_warp_specialized(trans_A, trans_B, dtype):
    k = compiled(kernels.matmul(1000, 520, 1000, 128, 256, 64, 4, 256, dtype=dtype,
                                trans_A=trans_A, trans_B=trans_B, policy="full_row"))
    report = k.report()
    assert "warp-specialized: threads 0..256 run the kernel (consumers)" in report, report
    assert "setmaxnreg: producer 24, consumers 240" in report, report
    assert "TMA copies into A_shared, B_shared" in report and "4 stages on full/empty mbarriers" in report
    assert k.info["threads"] == 256 and k.info["block"] == [384, 1, 1]
    maps = k.info["tensor_maps"]
    assert [m["param"] for m in maps] == [0, 1] and all(m["swizzle"] == 128 for m in maps)
    # a panel of 64 fp16 (128 bytes) per box, the tile's rows in the other dimension: A
    # stored K x M has a 64 x 128 tile, two panels of 64
    a_box = [64, 64] if trans_A else [128, 64]
    assert maps[0]["box"] == a_box, maps
    src = k.source
    assert "cp.async.bulk.tensor.2d" in src and "mbarrier.try_wait.parity" in src
    assert "setmaxnreg.inc.sync.aligned.u32 240" in src and "__launch_bounds__(384, 1)" in src
    assert "cp.async.cg" not in src and "__syncthreads();" in src  # only the one after init
    assert src.count("__syncthreads();") == 1
    assert len(k.cubin) > 0  # NVRTC accepts it for sm_90a


def test_one_consumer_warpgroup_needs_no_register_budgets():
    k = compiled(kernels.matmul(512, 512, 512, 128, 128, 64, 3, 128))
    assert "no setmaxnreg (248 registers per thread for every warp)" in k.report()
    assert "setmaxnreg" not in k.source and k.info["block"] == [256, 1, 1]
    assert len(k.cubin) > 0


@pytest.mark.parametrize("factory, why", [
    (lambda: kernels.matmul(256, 256, 333, 128, 128, 64, 3, 128),
     "the rows of 'A' are not a multiple of 16 bytes long"),
    (lambda: kernels.matmul(256, 256, 256, 64, 64, 64, 2, 128, dtype="int8", accum_dtype="int32"),
     "'A_shared' is not in a swizzled panel layout"),
    (lambda: kernels.matmul(256, 256, T.dynamic("K"), 64, 64, 64, 2, 128),
     "declare T.dynamic(\"K\", multiple_of=8)"),
])
def test_pipelines_that_stay_on_cp_async_say_why(factory, why):
    report = compiled(factory()).report()
    line = next(x for x in report.splitlines() if "stays on cp.async, not TMA" in x)
    assert why in line, line
    assert "warp-specialized" not in report


def test_tma_can_be_turned_off_and_sm80_never_has_it():
    f = kernels.matmul(512, 512, 512, 128, 128, 64, 3, 128)
    off = compiled(f, tma=False)
    assert "TMA is off (tma=False)" in off.report() and off.info["block"] == [128, 1, 1]
    assert not off.info["tensor_maps"] and "cp.async.cg" in off.source
    sm80 = tilers.compile(f, out_idx=[2], target="cuda:sm_80")
    assert "TMA" not in sm80.report() and not sm80.info["tensor_maps"]


def test_batched_operands_take_3d_boxes():
    k = tilers.compile(kernels.batched_matmul_bias_relu(3, 200, 304, 256, threads=256),
                       out_idx=[3], target="cuda:sm_90a")
    assert "warp-specialized" in k.report(), k.report()
    assert k.info["tensor_maps"][0]["box"][0] == 1
    assert "cp.async.bulk.tensor.3d" in k.source
    assert len(k.cubin) > 0


def test_same_program_same_cuda():
    f = kernels.matmul(1024, 1024, 1024, 128, 256, 64, 4, 256, policy="full_row")
    assert compiled(f).source == compiled(f).source


def test_fixed_grids_are_persistent_and_say_so():
    k = compiled(kernels.matmul(4096, 4096, 4096, 128, 256, 64, 4, 256, policy="full_row", panel=8))
    assert k.info["persistent"] is True and k.info["grid"][0]["const"] == 16
    assert "persistent: min(512 tiles, SMs) blocks walk the tiles" in k.report()
    src = k.source
    assert "gridDim.x" in src and "T.use_swizzle(8" in src  # the raster numbers the tiles
    off = compiled(kernels.matmul(4096, 4096, 4096, 128, 256, 64, 4, 256, policy="full_row"),
                   persistent=False)
    assert "persistent" not in off.info and "not persistent: persistent=False" in off.report()
    dyn = compiled(kernels.matmul(T.dynamic("M"), 4096, 4096, 128, 256, 64, 4, 256))
    assert "not persistent: the kernel has symbolic sizes" in dyn.report()
    assert len(k.cubin) > 0 and len(off.cubin) > 0


@pytest.mark.parametrize("k_tiles", [0, 1, 2, 3, 4])
def test_warp_specialized_gemm_passes_the_pass_check_at_every_trip_count(k_tiles):
    """On the CPU warp model (mbarrier phases, TMA landing, roles scheduled on their own, a
    persistent walk of 4 tiles by 3 blocks): 0, 1, 2, num_stages and num_stages + 1 k-tiles
    terminate and agree with the tile-level result after every pass."""
    from tilers import testing

    # 0: a T.dynamic K, which the pass check draws at 0, 8, one tile and more
    K = 64 * k_tiles if k_tiles else T.dynamic("K", multiple_of=8)
    f = kernels.matmul(256, 200, K, 128, 128, 64, 3, 128)
    assert "warp-specialized" in compiled(f).report()
    testing.check_passes(f, arch="sm_90a", blocks="all", check=True)


def test_a_pipelined_loop_inside_another_loop_says_why_it_stays_on_cp_async():
    @T.prim_func
    def batched(A: T.Tensor((4, 512, 512), "float16"), B: T.Tensor((512, 512), "float16"),
                C: T.Tensor((4, 512, 512), "float16")):
        with T.Kernel(4, 4, threads=128) as (bx, by):
            As = T.alloc_shared((128, 64), "float16")
            Bs = T.alloc_shared((64, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            for z in T.serial(4):
                T.clear(acc)
                for ko in T.Pipelined(8, num_stages=3):
                    T.copy(A[z, by * 128, ko * 64], As)
                    T.copy(B[ko * 64, bx * 128], Bs)
                    T.gemm(As, Bs, acc)
                T.copy(acc, C[z, by * 128, bx * 128])

    k = tilers.compile(batched, target="cuda:sm_90a")
    assert "it is inside another statement" in k.report() and not k.info["tensor_maps"]


@pytest.mark.parametrize("persistent", [True, "pingpong"])
def test_a_never_cleared_accumulator_starts_at_zero_on_every_tile(persistent):
    """The articles' GEMM never clears its accumulator (a gemm into it sums from zero): a
    persistent block walking several tiles zeroes it at each tile's start, not once."""
    from tilers import testing

    f = kernels.article_matmul(512, 512, 256)
    result = testing.check_passes(f, arch="sm_90a", blocks="all", compile_options={"persistent": persistent})
    assert result.ok, result.failure_message()
