"""wgmma on the H200 (sm_90a): the same user GEMMs as the sm_80 path, selected by the
compiler, checked against torch — shared and register A, both B layouts, one and two
warpgroups split either way, fp16 and bf16, ragged sizes, a fused epilogue and a batch —
and against the mma.sync path of the same source (`wgmma=False`); SASS holds HGMMA."""

import functools
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.dirname(__file__))
import kernels

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


inputs = functools.partial(kernels.gemm_inputs, seed=3)


def check(got, want):
    scale = want.abs().max().item() + 1.0
    err = ((got.double() - want).abs().max() / scale).item()
    assert err < 1e-2, f"max error {err:.3g} of the largest |C|"


def gemm_line(kernel):
    return next(line for line in kernel.report().splitlines() if "T.gemm" in line)


CONFIGS = [
    # block_M, block_N, block_K, stages, threads, policy
    (128, 128, 64, 3, 128, "square"),
    (128, 256, 64, 3, 256, "square"),
    (128, 256, 64, 4, 256, "full_row"),
    (128, 128, 32, 4, 256, "full_col"),
    (64, 64, 32, 2, 128, "square"),
    (64, 128, 64, 1, 128, "square"),
    (192, 128, 64, 3, 128, "square"),
    (256, 128, 64, 3, 256, "full_row"),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_wgmma_gemm(config, trans_A, trans_B, dtype):
    bm, bn, bk, stages, threads, policy = config
    M, N, K = 1000, 520, 333
    kernel = tilers.compile(
        kernels.matmul(M, N, K, bm, bn, bk, stages, threads, dtype=dtype, trans_A=trans_A,
                       trans_B=trans_B, policy=policy),
        out_idx=[2],
    )
    assert "wgmma.m64n" in gemm_line(kernel), kernel.report()
    a, b, want = inputs(M, N, K, dtype, trans_A, trans_B)
    check(kernel(a, b), want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N", [(1, 1), (7, 33), (33, 7), (1000, 1000), (1, 1000), (1000, 7)])
def test_wgmma_ragged_against_torch_and_the_interpreter(M, N, dtype):
    K = 100  # not a multiple of block_K
    kernel = tilers.compile(kernels.matmul(M, N, K, 128, 128, 64, 3, 128, dtype=dtype), out_idx=[2])
    a, b, want = inputs(M, N, K, dtype)
    got = kernel(a, b)
    check(got, want)
    if M * N <= 40000:
        # the reference interpreter on host copies of the same inputs
        check(got, kernel(a.cpu(), b.cpu()).double().cuda())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("threads", [128, 256])
def test_wgmma_register_a(dtype, threads):
    M, N, K = 300, 200, 160
    kernel = tilers.compile(
        kernels.matmul_reg_a(M, N, K, block_M=128, block_N=64, block_K=32, threads=threads,
                             dtype=dtype),
        out_idx=[2],
    )
    assert "A from registers" in gemm_line(kernel), kernel.report()
    a, b, _ = inputs(M, N, K, dtype)
    check(kernel(a, b), (2 * a.double()) @ b.double())


@pytest.mark.parametrize("trans_B", [False, True])
@pytest.mark.parametrize("threads", [128, 256])
def test_wgmma_fused_epilogue_batched(trans_B, threads):
    Bt, M, N, K = 3, 200, 300, 256
    kernel = tilers.compile(
        kernels.batched_matmul_bias_relu(Bt, M, N, K, threads=threads, trans_B=trans_B),
        out_idx=[3],
    )
    assert "wgmma" in gemm_line(kernel)
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn((Bt, M, K), generator=g, device="cuda").half()
    w = torch.randn((N, K) if trans_B else (K, N), generator=g, device="cuda").half()
    bias = torch.randn((N,), generator=g, device="cuda")
    want = torch.relu(a.double() @ (w.T if trans_B else w).double() + bias.double())
    check(kernel(a, w, bias), want)


def test_wgmma_agrees_with_mma_sync_and_can_be_turned_off():
    M, N, K = 512, 384, 256
    f = kernels.matmul(M, N, K, 128, 128, 64, 3, 128)
    on = tilers.compile(f, out_idx=[2])
    off = tilers.compile(f, out_idx=[2], wgmma=False)
    assert "wgmma" in gemm_line(on)
    assert "mma.sync" in gemm_line(off) and "wgmma is off" in gemm_line(off)
    a, b, want = inputs(M, N, K, "float16")
    c_on, c_off = on(a, b), off(a, b)
    check(c_on, want)
    check(c_off, want)
    assert (c_on.float() - c_off.float()).abs().max().item() < 0.1


def test_dynamic_m_wgmma():
    kernel = tilers.compile(kernels.matmul(T.dynamic("M"), 256, 128, 128, 128, 64, 3, 128), out_idx=[2])
    assert "wgmma" in gemm_line(kernel)
    for m in (0, 1, 129, 1000):
        a, b, want = inputs(m, 256, 128, "float16")
        got = kernel(a, b)
        assert got.shape == (m, 256)
        if m:
            check(got, want)


@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="needs cuobjdump")
def test_sass_has_hgmma_in_the_main_loop():
    kernel = tilers.compile(kernels.matmul(4096, 4096, 4096, 128, 256, 64, 3, 256), out_idx=[2])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(kernel.cubin)
        sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    assert "HGMMA" in sass, sass[:2000]
    assert "HMMA" not in sass.replace("HGMMA", "")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_register_a_shared_by_two_warpgroup_columns(dtype):
    """64x256 over two warpgroups splits N (1x2): both hold the same A rows (a replicated
    register A operand)."""
    M, N, K = 300, 520, 160
    kernel = tilers.compile(
        kernels.matmul_reg_a(M, N, K, block_M=64, block_N=256, block_K=32, threads=256,
                             dtype=dtype),
        out_idx=[2],
    )
    line = gemm_line(kernel)
    assert "1x2 warpgroups" in line and "A from registers" in line, line
    a, b, _ = inputs(M, N, K, dtype)
    check(kernel(a, b), (2 * a.double()) @ b.double())
