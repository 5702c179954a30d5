"""Programmatic dependent launch on the GPU: a later kernel of a call started while the one
before it runs still reads what that one wrote, and does not overwrite what it reads —
eagerly and in a CUDA graph, with dependent launch on and off."""

import os
import sys

import pytest
import tilers
import tilers.runtime

sys.path.insert(0, os.path.dirname(__file__))
from dependent_launch import read_then_overwrite, slow_then_read  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.fixture(params=[True, False], ids=["dependent", "serial"])
def dependent(request):
    before = tilers.runtime.dependent_launch(request.param)
    yield request.param
    tilers.runtime.dependent_launch(before)


@pytest.mark.parametrize("n", [1000, 1 << 20])
def test_a_later_kernel_reads_what_the_one_before_wrote(dependent, n):
    kernel = tilers.compile(slow_then_read(n, work=2000))
    x = torch.rand(n, device="cuda")
    want = torch.arange(n, device="cuda", dtype=torch.float32) + x
    for _ in range(3):
        a = torch.full((n,), -1.0, device="cuda")
        b = torch.zeros(n, device="cuda")
        kernel(x, a, b)
        torch.testing.assert_close(b, want)


def test_a_later_kernel_does_not_overwrite_what_the_one_before_reads(dependent):
    n = 1 << 22
    kernel = tilers.compile(read_then_overwrite(n))
    for _ in range(3):
        x = torch.rand(n, device="cuda")
        want = 2 * x
        y, z = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
        kernel(x, y, z)
        torch.testing.assert_close(y, want)
        assert not x.any() and bool((z == 1).all())


def test_in_a_cuda_graph(dependent):
    n = 1 << 20
    kernel = tilers.compile(slow_then_read(n, work=2000))
    x = torch.rand(n, device="cuda")
    a = torch.full((n,), -1.0, device="cuda")
    b = torch.zeros(n, device="cuda")
    kernel(x, a, b)  # loaded outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(4):
            a.fill_(-1.0)
            kernel(x, a, b)
    for _ in range(3):
        b.zero_()
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(b, torch.arange(n, device="cuda", dtype=torch.float32) + x)
