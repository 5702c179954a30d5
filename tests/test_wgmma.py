"""wgmma selection without a GPU: which gemms take wgmma on sm_90a and why the others stay
on mma.sync (the report), the layouts it gives the operands, the option that turns it off,
and that every wgmma GEMM compiles with NVRTC for sm_90a."""

import os
import sys

import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.dirname(__file__))
import kernels


def gemm_line(kernel):
    return next(line for line in kernel.report().splitlines() if "T.gemm" in line)


def compiled(f, **options):
    return tilers.compile(f, out_idx=[2], target="cuda:sm_90a", **options)


@pytest.mark.parametrize("trans_A", [False, True])
@pytest.mark.parametrize("trans_B", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_hopper_gemms_take_wgmma_and_say_how(trans_A, trans_B, dtype):
    k = compiled(kernels.matmul(1000, 520, 333, 128, 256, 64, 3, 256, dtype=dtype,
                                trans_A=trans_A, trans_B=trans_B))
    line = gemm_line(k)
    assert "wgmma.m64n" in line, line
    a_major = "M-major" if trans_A else "K-major"
    b_major = "K-major" if trans_B else "N-major"
    assert f"A by descriptor ({a_major}, 128-byte swizzle)" in line, line
    assert f"B by descriptor ({b_major}, 128-byte swizzle)" in line, line
    assert "wgmma.mma_async.sync.aligned.m64n" in k.source
    assert "wgmma.wait_group.sync.aligned" in k.source
    assert len(k.cubin) > 0  # NVRTC accepts it for sm_90a


@pytest.mark.parametrize("config, want", [
    ((128, 128, 64, 3, 128, T.GemmWarpPolicy.Square), "wgmma.m64n128k16, 1x1 warpgroups of 128x128"),
    ((128, 256, 64, 3, 256, T.GemmWarpPolicy.FullRow), "wgmma.m64n256k16, 2x1 warpgroups of 64x256"),
    ((128, 256, 64, 3, 256, T.GemmWarpPolicy.FullCol), "wgmma.m64n128k16, 1x2 warpgroups of 128x128"),
    ((64, 64, 32, 2, 128, T.GemmWarpPolicy.Square), "wgmma.m64n64k16, 1x1 warpgroups of 64x64"),
])
def test_warp_policies_map_onto_warpgroups(config, want):
    bm, bn, bk, st, th, policy = config
    line = gemm_line(compiled(kernels.matmul(512, 512, 512, bm, bn, bk, st, th, policy=policy)))
    assert want in line, line


@pytest.mark.parametrize("factory, why", [
    (lambda: kernels.matmul(256, 256, 256, 32, 64, 32, 2, 128), "does not split into 64-row"),
    (lambda: kernels.matmul(256, 256, 256, 64, 64, 32, 2, 64), "64 threads are not whole warpgroups"),
    (lambda: kernels.matmul(256, 256, 256, 64, 64, 64, 2, 128, dtype="int8", accum_dtype="int32"),
     "wgmma takes float16 and bfloat16 operands, these are int8"),
    (lambda: kernels.matmul(256, 256, 256, 64, 64, 32, 2, 128, accum_dtype="float16"),
     "the accumulator is float16"),
    (lambda: kernels.matmul_reg_b(256, 256, 256), "B is not a shared tile"),
])
def test_gemms_that_stay_on_mma_sync_say_why(factory, why):
    line = gemm_line(compiled(factory()))
    assert "mma.sync" in line and "; not wgmma: " in line and why in line, line


def test_wgmma_can_be_turned_off_and_sm80_never_has_it():
    f = kernels.matmul(512, 512, 512, 128, 128, 64, 3, 128)
    off = compiled(f, wgmma=False)
    assert "not wgmma: wgmma is off" in gemm_line(off) and "wgmma" not in off.source.replace("not wgmma", "")
    on = compiled(f)
    assert "wgmma.m64n128k16" in gemm_line(on)
    sm80 = tilers.compile(f, out_idx=[2], target="cuda:sm_80")
    assert "mma.sync" in gemm_line(sm80) and "not wgmma" not in gemm_line(sm80)
    assert "wgmma" not in sm80.source


def test_operand_tiles_take_wgmma_layouts_and_the_pipeline_keeps_a_group_in_flight():
    # the cp.async pipeline (tests/test_tma.py has the warp-specialized one)
    k = compiled(kernels.matmul(512, 512, 512, 128, 128, 64, 3, 128), tma=False)
    report = k.report()
    assert "shared tile 'A_shared' in wgmma's layout: panels of 128-byte rows" in report
    assert "copies into A_shared, B_shared issued 1 iteration(s) ahead" in report
    assert "the wgmma group of each k-tile stays in flight into the next" in report
    layouts = k.layouts()
    assert "panels of 64 columns" in str(layouts), layouts
    # two stages: no room for a group in flight, the copies run one iteration ahead
    k2 = compiled(kernels.matmul(512, 512, 512, 128, 128, 64, 2, 128), tma=False)
    assert "stays in flight" not in k2.report()
    assert "wgmma.wait_group.sync.aligned 0;" in k2.source
    assert "wgmma.wait_group.sync.aligned 1;" not in k2.source
    # the dynamic shared memory base is rounded up to the 1024-byte swizzle period
    assert "__align__(1024)" in k.source


def test_register_a_is_the_rs_form():
    k = compiled(kernels.matmul_reg_a(256, 256, 256, block_M=128, block_N=64, block_K=32))
    assert "A from registers" in gemm_line(k)
    assert '"r"(tl_ra[0])' in k.source


def test_same_program_same_wgmma_cuda():
    f = kernels.matmul(1000, 1000, 1000, 128, 256, 64, 4, 256)
    a = tilers.compile(f, out_idx=[2], target="cuda:sm_90a").source
    b = tilers.compile(kernels.matmul(1000, 1000, 1000, 128, 256, 64, 4, 256), out_idx=[2],
                       target="cuda:sm_90a").source
    assert a == b


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_user_names_never_meet_the_instructions_locals(arch):
    # a fragment named c (or a, b, r, ...) once met `float* c = &c[0]` in the wgmma and mma
    # emitters: a pointer initialised from itself
    @T.prim_func
    def named(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 64), "float16"),
              C: T.Tensor((128, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_shared((128, 64), "float16")
            b = T.alloc_shared((64, 64), "float16")
            c = T.alloc_fragment((128, 64), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, clear_accum=True)
            T.copy(c, C)

    src = tilers.compile(named, target=f"cuda:{arch}").get_kernel_source()
    for local in ("float* c =", "int* c =", "int* a =", "int* b =", "int* r =", "long long da ", "long long db ",
                  "int* ra ="):
        assert local not in src
    assert "* tl_c = &c[" in src or "* tl_c = (&c[" in src
