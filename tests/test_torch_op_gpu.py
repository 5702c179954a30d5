"""tilers.torch.custom_op on the GPU (tests/test_torch_op.py's kernels, compiled for the
device): torch.compile(fullgraph=True) with the default back end matches eager, a CUDA
graph of the same replays 100 times with the same results, torch.export keeps the op."""

import os
import sys

import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
from test_torch_op import opname, scale_kernel, two_outputs_kernel  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
import tilers.torch as tt  # noqa: E402


def two_kernels():
    scale = tt.custom_op(scale_kernel("auto"), opname("scale"))
    split = tt.custom_op(two_outputs_kernel("auto"), opname("split"))

    def f(x, h):
        y = scale(x, 3.0)
        s, d = split(h)
        return torch.relu(y) + scale(y, 0.5), s.float() * d

    return f


def test_fullgraph_compile_matches_eager():
    f = two_kernels()
    x = torch.randn(200, 64, device="cuda")
    h = torch.randn(32, 16, device="cuda", dtype=torch.float16)
    compiled = torch.compile(f, fullgraph=True)
    for got, want in zip(compiled(x, h), f(x, h)):
        torch.testing.assert_close(got, want)


def test_a_cuda_graph_replays_the_same_results():
    f = two_kernels()
    x = torch.randn(256, 64, device="cuda")
    h = torch.randn(32, 16, device="cuda", dtype=torch.float16)
    want = [t.clone() for t in f(x, h)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        f(x, h)  # warm: compiled and loaded before capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = f(x, h)
    for _ in range(100):
        graph.replay()
    torch.cuda.synchronize()
    for got, w in zip(outs, want):
        torch.testing.assert_close(got, w)


def test_export():
    scale = tt.custom_op(scale_kernel("auto"), opname("scale"))

    class Model(torch.nn.Module):
        def forward(self, x):
            return scale(x, 2.0) + 1

    x = torch.randn(64, 64, device="cuda")
    ep = torch.export.export(Model(), (x,))
    assert "tilers_test" in str(ep.graph)
    torch.testing.assert_close(ep.module()(x), x * 2 + 1)
    assert isinstance(scale_kernel("auto"), tilers.JITKernel)
