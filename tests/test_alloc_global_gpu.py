"""T.alloc_global on the GPU: scratch the launcher allocates for every call, against torch at
ragged sizes, symbolic sizes, the eager and factory styles, calls that never synchronize
(captured in a CUDA graph), and TileLang's own alloc_global test with the import renamed."""

import os
import sys

import pytest
import tilers
import tilers.language as T

sys.path.insert(0, os.path.dirname(__file__))
from test_alloc_global import rowsum, staged

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(1, 7), (33, 129), (70, 200), (1000, 1000), (4097, 64)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("arch_option", [{}, {"wgmma": False}])
def test_partials_then_reduction_match_torch(shape, dtype, arch_option):
    M, K = shape
    kernel = tilers.compile(rowsum(M, K, dtype=dtype), out_idx=[1], **arch_option)
    a = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))
    for _ in range(3):  # reused scratch from the caching allocator holds old partials
        out = kernel(a)
        torch.testing.assert_close(out, a.float().sum(dim=1), rtol=1e-4, atol=1e-3)


def test_symbolic_scratch_for_every_m():
    kernel = tilers.compile(staged, out_idx=[1])
    for m in (0, 1, 7, 33, 1000, 4097):
        a = torch.randn(m, 64, device="cuda")
        torch.testing.assert_close(kernel(a), a.half().float(), rtol=0, atol=0)


def test_calls_do_not_synchronize_and_are_captured_in_a_cuda_graph():
    """A launch allocates its scratch through torch's caching allocator on the kernel's
    stream and never synchronizes: capturing it in a CUDA graph would fail otherwise."""
    kernel = tilers.compile(rowsum(300, 500), out_idx=[1])
    a = torch.randn(300, 500, device="cuda")
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
    # and outside a graph: a call queues work without waiting on the device
    if hasattr(torch.cuda, "set_sync_debug_mode"):
        torch.cuda.set_sync_debug_mode("error")
        try:
            kernel(a)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def test_calls_on_several_streams_keep_their_scratch_apart():
    kernel = tilers.compile(rowsum(512, 1024), out_idx=[1])
    streams = [torch.cuda.Stream() for _ in range(4)]
    inputs = [torch.randn(512, 1024, device="cuda") for _ in streams]
    torch.cuda.synchronize()
    outputs = []
    for stream, a in zip(streams, inputs):
        with torch.cuda.stream(stream):
            outputs.append(kernel(a))
    torch.cuda.synchronize()
    for a, out in zip(inputs, outputs):
        torch.testing.assert_close(out, a.sum(dim=1), rtol=1e-4, atol=1e-3)


def test_eager_and_factory_styles():
    @tilers.jit
    def copy_through(A, block_N=128, dtype=T.float16):
        N = T.const("N")
        A: T.Tensor[[N], dtype]
        B = T.empty([N], dtype=dtype)
        C = T.alloc_global([N], dtype)
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            T.copy(A[bx * block_N : (bx + 1) * block_N], C[bx * block_N : (bx + 1) * block_N])
            T.copy(C[bx * block_N : (bx + 1) * block_N], B[bx * block_N : (bx + 1) * block_N])
        return B

    @tilers.jit(out_idx=[1])
    def factory(N, block_N=128):
        @T.prim_func
        def main(A: T.Tensor((N,), "float16"), B: T.Tensor((N,), "float16")):
            C = T.alloc_global((N,), "float16")
            with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
                T.copy(A[bx * block_N : (bx + 1) * block_N], C[bx * block_N : (bx + 1) * block_N])
                T.copy(C[bx * block_N : (bx + 1) * block_N], B[bx * block_N : (bx + 1) * block_N])

        return main

    for n in (1024, 1000, 37):
        a = torch.randn(n, device="cuda", dtype=torch.float16)
        assert torch.equal(copy_through(a), a)
        assert torch.equal(factory(n)(a), a)


def test_gpu_matches_the_interpreter():
    kernel = tilers.compile(rowsum(70, 200), out_idx=[1])
    a = torch.randn(70, 200, device="cuda")
    on_host = kernel(a.cpu().numpy())
    torch.testing.assert_close(kernel(a).cpu(), torch.from_numpy(on_host), rtol=1e-5, atol=1e-5)
