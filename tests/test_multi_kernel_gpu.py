"""Several T.Kernel blocks in one prim_func on the GPU: every call launches them in order on
torch's stream with one scratch allocation, against torch at ragged and symbolic sizes, with
TMA and wgmma in the first or a later kernel, captured in a CUDA graph, in the eager style."""

import os
import sys

import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.dirname(__file__))
from test_multi_kernel import dynamic_reverse, gemm_then_scale, scale_then_gemm, split_sum

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(1, 64), (33, 128), (100, 256), (4097, 512)])
def test_split_then_combine_matches_torch(shape):
    M, K = shape
    kernel = tilers.compile(split_sum(M, K), out_idx=[1])
    a = torch.randn(shape, device="cuda")
    for _ in range(3):  # reused scratch from the caching allocator holds old partials
        torch.testing.assert_close(kernel(a), a.sum(dim=1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("options", [{}, {"wgmma": False}])
def test_a_later_kernel_reads_the_output_of_a_gemm(options):
    M, N, K = 200, 96, 80
    kernel = tilers.compile(gemm_then_scale(M, N, K), out_idx=[3, 4], **options)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    scale = torch.randn(M, device="cuda")
    c, d = kernel(a, b, scale)
    want = a.float() @ b.float()
    torch.testing.assert_close(c, want, rtol=1e-3, atol=1e-2)
    torch.testing.assert_close(d, want * scale[:, None], rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("options", [{}, {"tma": False}])
def test_tensor_maps_of_a_later_kernel(options):
    M, N, K = 256, 384, 512
    kernel = tilers.compile(scale_then_gemm(M, N, K), out_idx=[2, 3], **options)
    if torch.cuda.get_device_capability() >= (9, 0) and not options:
        assert kernel.info["then"][0]["tensor_maps"]
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    for _ in range(2):
        a2, c = kernel(a, b)
        torch.testing.assert_close(a2, a * 2, rtol=0, atol=0)
        torch.testing.assert_close(c, (a.float() * 2) @ b.float().T, rtol=1e-3, atol=1e-1)


def test_symbolic_sizes_for_every_m():
    kernel = tilers.compile(dynamic_reverse, out_idx=[1])
    for m in (0, 1, 7, 33, 1000, 4097):
        a = torch.randn(m, 64, device="cuda")
        torch.testing.assert_close(kernel(a), a.flip(0) + 1, rtol=0, atol=0)


def test_calls_do_not_synchronize_and_are_captured_in_a_cuda_graph():
    kernel = tilers.compile(split_sum(300, 512), out_idx=[1])
    a = torch.randn(300, 512, device="cuda")
    kernel(a)  # load the module outside capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = kernel(a)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a.sum(dim=1), rtol=1e-4, atol=1e-3)
    if hasattr(torch.cuda, "set_sync_debug_mode"):
        torch.cuda.set_sync_debug_mode("error")
        try:
            kernel(a)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def test_eager_style():
    @tilers.jit
    def twice_reversed(A, block_N=128, dtype=T.float32):
        N = T.const("N")
        A: T.Tensor[[N], dtype]
        B = T.empty([N], dtype=dtype)
        C = T.alloc_global([N], dtype)
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            for i in T.Parallel(block_N):
                if bx * block_N + i < N:
                    C[bx * block_N + i] = A[bx * block_N + i] * 2.0
        with T.Kernel(N, threads=32) as i:
            B[i] = C[N - 1 - i]
        return B

    for n in (1000, 37, 1):
        a = torch.randn(n, device="cuda")
        torch.testing.assert_close(twice_reversed(a), (a * 2).flip(0), rtol=0, atol=0)


def test_the_profiler_times_the_whole_call():
    kernel = tilers.compile(split_sum(4096, 1024), out_idx=[1])
    profiler = kernel.profiler()
    profiler.assert_allclose(lambda a: a.sum(dim=1), rtol=1e-4, atol=1e-3)
    assert profiler.do_bench() > 0
