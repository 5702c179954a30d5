"""examples/decode_gemm.py on the GPU: every schedule against torch for batches of 1 to 128
rows, fp16 and bf16, ragged and LLM-sized weights; split-K's float32 sums within the error of
a float32 GEMM."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import decode_gemm  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def config(schedule, block_M=16):
    if schedule == "gemv":
        return dict(schedule="gemv", block_N=8, block_K=256, threads=128)
    return dict(schedule=schedule, block_N=128, block_M=block_M, block_K=128, split_k=4, num_stages=4, blocks=132)


@pytest.mark.parametrize("schedule", decode_gemm.SCHEDULES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("N,K", [(1000, 520), (4096, 4096), (4096, 14336)])
def test_against_torch(schedule, dtype, N, K):
    kernel = decode_gemm.linear(N, K, dtype=dtype, **config(schedule))
    torch_dtype = getattr(torch, dtype)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch_dtype)
    for M in (1, 7, 33, 128):
        x = torch.randn(M, K, device="cuda").to(torch_dtype)
        y = kernel(x, w)
        want = x.float() @ w.float().T
        tol = 3e-2 if dtype == "bfloat16" else 5e-3
        torch.testing.assert_close(y.float(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("schedule", ["tiles", "splitk", "atomic", "streamk"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("N,K,block_N", [(1000, 520, 40), (14336, 4096, 112), (4096, 4096, 32)])
def test_the_batch_as_the_a_operand_against_torch(schedule, dtype, N, K, block_N):
    """order="xw" (x's tile the wgmma A operand, W's tile of any multiple of 8 rows as B) for
    batches of 1 to 128 rows: tiles of 64 and 128 batch rows."""
    torch_dtype = getattr(torch, dtype)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch_dtype)
    for block_M, threads in ((64, 128), (128, 256)):
        kernel = decode_gemm.linear(N, K, dtype=dtype, schedule=schedule, order="xw", block_M=block_M,
                                    block_N=block_N, block_K=64, split_k=2, num_stages=4, threads=threads,
                                    blocks=132)
        for M in (1, 7, 64, 65, 128):
            x = torch.randn(M, K, device="cuda").to(torch_dtype)
            want = x.float() @ w.float().T
            tol = 3e-2 if dtype == "bfloat16" else 5e-3
            torch.testing.assert_close(kernel(x, w).float(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("schedule", ["tiles", "splitk", "atomic"])
@pytest.mark.parametrize("cluster", [2, 4])
@pytest.mark.parametrize("N,K,block_N", [(1000, 520, 64), (14336, 4096, 112), (4096, 4096, 32)])
def test_clusters_sharing_the_batch_tile_against_torch(schedule, cluster, N, K, block_N):
    """cluster=2 / 4 (x's tile multicast to the W tiles of a cluster): bit for bit the
    kernel without a cluster (the same wgmmas on the same tiles), and torch, for batches of 1
    to 128 rows; twice (the barriers start afresh at each launch)."""
    w = (torch.randn(N, K, device="cuda") / K**0.5).half()
    for block_M, threads in ((64, 128), (128, 256)):
        cfg = dict(schedule=schedule, order="xw", block_M=block_M, block_N=block_N, block_K=64, split_k=2,
                   num_stages=4, threads=threads)
        kernel = decode_gemm.linear(N, K, cluster=cluster, **cfg)
        plain = decode_gemm.linear(N, K, **cfg)
        for M in (1, 7, 64, 65, 128):
            x = torch.randn(M, K, device="cuda").half()
            got = kernel(x, w)
            want = x.float() @ w.float().T
            torch.testing.assert_close(got.float(), want, rtol=5e-3, atol=5e-3)
            if schedule != "atomic":  # (the atomics' order of additions varies)
                assert torch.equal(got, plain(x, w))
            assert torch.equal(kernel(x, w), got) or schedule == "atomic"


@pytest.mark.parametrize("schedule", ["tiles", "splitk", "atomic"])
@pytest.mark.parametrize("N,K,block_N", [(1000, 520, 48), (14336, 4096, 224), (4096, 4096, 64)])
def test_pairs_of_batch_tiles_sharing_the_w_tile_against_torch(schedule, N, K, block_N):
    """share="w" (W's tile multicast to a cluster's two batch tiles, the batch tiles padded to
    pairs): bit for bit the kernel without a cluster and torch, for batches of 1 (a pair whose
    second block lies wholly past M) to 200 rows; twice."""
    w = (torch.randn(N, K, device="cuda") / K**0.5).half()
    cfg = dict(schedule=schedule, order="xw", block_M=64, block_N=block_N, block_K=64, split_k=2,
               num_stages=4, threads=128)
    kernel = decode_gemm.linear(N, K, cluster=2, share="w", **cfg)
    plain = decode_gemm.linear(N, K, **cfg)
    for M in (1, 7, 64, 65, 128, 200):
        x = torch.randn(M, K, device="cuda").half()
        got = kernel(x, w)
        want = x.float() @ w.float().T
        torch.testing.assert_close(got.float(), want, rtol=5e-3, atol=5e-3)
        if schedule != "atomic":
            assert torch.equal(got, plain(x, w))
        assert torch.equal(kernel(x, w), got) or schedule == "atomic"


def test_split_k_float32_is_within_a_float32_gemm():
    N, K = 4096, 14336
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    x = torch.randn(8, K, device="cuda", dtype=torch.float16)
    exact = x.double() @ w.double().T
    plain = (x.float() @ w.float().T).double()
    y = decode_gemm.linear(N, K, **config("atomic"))(x, w).double()
    bound = (plain - exact).abs().max().item()
    assert (y - exact).abs().max().item() <= 4 * bound + 1e-3
