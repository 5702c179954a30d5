"""Warp-specialized TMA pipelines on the H200 (sm_90a): GEMMs whose operand copies a
producer warpgroup issues as bulk tensor copies on full/empty mbarriers, checked against
torch and against the same source on cp.async (`tma=False`, the same wgmma sequence, so the
results agree bit for bit): every transpose, fp16 and bf16, ragged M/N/K, trip counts 0, 1,
2 and num_stages ± 1, symbolic sizes, a batched GEMM with a fused epilogue; SASS has UTMALDG
feeding HGMMA. Each file runs in its own process with a timeout (scripts/gpu-check), so a
hang fails this file instead of the session."""

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


def specialized(kernel):
    report = kernel.report()
    assert "warp-specialized" in report and "TMA copies into" in report, report
    assert kernel.info["block"][0] == kernel.info["threads"] + 128
    assert kernel.info["tensor_maps"], kernel.info


CONFIGS = [
    # block_M, block_N, block_K, stages, threads, policy
    (128, 128, 64, 3, 128, "square"),
    (128, 256, 64, 4, 256, "full_row"),
    (128, 256, 64, 3, 256, "square"),
    (128, 128, 32, 4, 256, "full_col"),
    (64, 64, 32, 2, 128, "square"),
    (256, 128, 64, 3, 256, "full_row"),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_tma_gemm_agrees_with_torch_and_cp_async(config, trans_A, trans_B, dtype):
    bm, bn, bk, stages, threads, policy = config
    M, N, K = 1000, 520, 1000  # ragged in every dimension; rows of 16-byte multiples
    f = kernels.matmul(M, N, K, bm, bn, bk, stages, threads, dtype=dtype, trans_A=trans_A,
                       trans_B=trans_B, policy=policy)
    kernel = tilers.compile(f, out_idx=[2])
    specialized(kernel)
    plain = tilers.compile(f, out_idx=[2], tma=False)
    assert "warp-specialized" not in plain.report()
    a, b, want = inputs(M, N, K, dtype, trans_A, trans_B)
    got = kernel(a, b)
    check(got, want)
    assert torch.equal(got, plain(a, b)), "TMA and cp.async pipelines differ"


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("tiles", [1, 2, 3, 4, 5])
def test_trip_counts_around_the_ring(stages, tiles):
    """K loops of 1, 2, num_stages - 1, num_stages, num_stages + 1 k-tiles terminate."""
    M, N, K = 256, 256, 64 * tiles
    kernel = tilers.compile(kernels.matmul(M, N, K, 128, 128, 64, stages, 128), out_idx=[2])
    specialized(kernel)
    a, b, want = inputs(M, N, K, "float16")
    check(kernel(a, b), want)
    torch.cuda.synchronize()


def test_dynamic_sizes_including_zero_k_tiles():
    kernel = tilers.compile(
        kernels.matmul(T.dynamic("M"), 256, T.dynamic("K", multiple_of=8), 128, 128, 64, 3, 128),
        out_idx=[2],
    )
    specialized(kernel)
    for m, k in [(1, 8), (129, 64), (1000, 1000), (300, 8 * 37), (256, 0)]:
        a, b, want = inputs(m, 256, k, "float16")
        got = kernel(a, b)
        assert got.shape == (m, 256)
        check(got, want)


@pytest.mark.parametrize("trans_B", [False, True])
def test_batched_gemm_with_fused_epilogue(trans_B):
    Bt, M, N, K = 3, 200, 304, 256
    kernel = tilers.compile(
        kernels.batched_matmul_bias_relu(Bt, M, N, K, threads=256, trans_B=trans_B), out_idx=[3]
    )
    specialized(kernel)
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn((Bt, M, K), generator=g, device="cuda").half()
    w = torch.randn((N, K) if trans_B else (K, N), generator=g, device="cuda").half()
    bias = torch.randn((N,), generator=g, device="cuda")
    want = torch.relu(a.double() @ (w.T if trans_B else w).double() + bias.double())
    check(kernel(a, w, bias), want)


def test_maps_follow_the_tensors_of_each_call():
    """The launcher encodes the maps per call: new buffers, the same buffers again, views."""
    kernel = tilers.compile(kernels.matmul(512, 512, 512, 128, 128, 64, 3, 128), out_idx=[2])
    for seed in range(3):
        a, b, want = inputs(512, 512, 512, "float16", seed=seed)
        check(kernel(a, b), want)
        check(kernel(a, b), want)
    big = torch.randn(2, 512, 512, device="cuda").half()
    b = torch.randn(512, 512, device="cuda").half()
    check(kernel(big[1], b), big[1].double() @ b.double())


def test_misaligned_tensor_is_an_error_naming_the_parameter():
    kernel = tilers.compile(kernels.matmul(256, 256, 256, 128, 128, 64, 3, 128), out_idx=[2])
    flat = torch.randn(256 * 256 + 1, device="cuda").half()
    a = flat[1:].view(256, 256)
    b = torch.randn(256, 256, device="cuda").half()
    with pytest.raises(Exception, match="'A'"):
        kernel(a, b)


@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="needs cuobjdump")
def test_sass_feeds_hgmma_from_utmaldg():
    kernel = tilers.compile(
        kernels.matmul(4096, 4096, 4096, 128, 256, 64, 4, 256, policy="full_row"), out_idx=[2]
    )
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(kernel.cubin)
        sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    assert "UTMALDG" in sass and "HGMMA" in sass, sass[:2000]
    assert "LDGSTS" not in sass  # no cp.async left


@pytest.mark.parametrize("panel", [0, 8])
@pytest.mark.parametrize("shape", [(1000, 520, 1000), (4096, 2048, 512), (128, 128, 64)])
def test_persistent_tiles_agree_with_one_tile_per_block(shape, panel):
    """A persistent kernel (one block per SM walking the tiles, the ring's phase carried
    across tiles, rasterized or not) gives the bits of the one-tile-per-block kernel."""
    M, N, K = shape
    f = kernels.matmul(M, N, K, 128, 256, 64, 3, 256, policy="full_row", panel=panel)
    persistent = tilers.compile(f, out_idx=[2])
    assert persistent.info.get("persistent") is True, persistent.report()
    plain = tilers.compile(f, out_idx=[2], persistent=False)
    a, b, want = inputs(M, N, K, "float16")
    got = persistent(a, b)
    check(got, want)
    assert torch.equal(got, plain(a, b))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(1, 8, 8), (7, 24, 40), (129, 200, 72), (200, 136, 1000)])
def test_ragged_against_the_interpreter(M, N, K, dtype):
    """Boxes past every edge (zero fill) on the GPU agree with the reference interpreter on
    host copies of the same inputs."""
    kernel = tilers.compile(kernels.matmul(M, N, K, 128, 128, 64, 3, 128, dtype=dtype), out_idx=[2])
    specialized(kernel)
    a, b, want = inputs(M, N, K, dtype)
    got = kernel(a, b)
    check(got, want)
    check(got, kernel(a.cpu(), b.cpu()).double().cuda())


@pytest.mark.parametrize("persistent", [True, "pingpong"])
def test_a_never_cleared_accumulator_on_more_tiles_than_sms(persistent):
    """The articles' GEMM (no T.clear) at 2048^2: 256 tiles over 132 SMs, so blocks walk two;
    each tile's accumulator starts at zero."""
    M = N = K = 2048
    k = tilers.compile(kernels.article_matmul(M, N, K), out_idx=[2], persistent=persistent)
    a, b, want = inputs(M, N, K, "float16")
    check(k(a, b), want)
