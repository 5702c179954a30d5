"""The kernels of tests/test_control_flow.py on the GPU, against the interpreter: Python
control flow on traced values, T.alloc_var, T.macro, warp-role conditions."""

import os
import sys

import numpy as np
import pytest
import tilers

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import test_control_flow as cf  # noqa: E402


def both(func, *arrays):
    """Run `func` on the GPU and on the interpreter; the GPU's outputs (numpy)."""
    gpu = [torch.from_numpy(a.copy()).cuda() for a in arrays]
    tilers.compile(func)(*gpu)
    host = [a.copy() for a in arrays]
    tilers.compile(func, target="interp")(*host)
    for g, h in zip(gpu, host):
        np.testing.assert_allclose(g.cpu().numpy(), h, rtol=1e-5, atol=1e-6)
    return [g.cpu().numpy() for g in gpu]


def test_branches_and_logic_on_the_gpu():
    import tilers.language as T

    @T.prim_func
    def k(A: T.Tensor((1000,), "float32"), B: T.Tensor((1000,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                g = bx * 128 + i
                if g < 1000 and (A[g] > 0 or g % 7 == 0):
                    B[g] = A[g] * 2.0 if g < 500 else A[g] + 1.0
                elif not g % 3 == 0:
                    B[g] = -1.0

    a = cf.rand(1000)
    b = np.zeros(1000, np.float32)
    both(k, a, b)


def test_alloc_var_loop_on_the_gpu():
    import tilers.language as T

    @T.prim_func
    def k(A: T.Tensor((64, 100), "float32"), S: T.Tensor((64,), "float32")):
        with T.Kernel(64, threads=32) as bx:
            total = T.alloc_var(T.float32, init=0.0)
            for j in T.serial(100):
                if A[bx, j] > 0:
                    total = total + A[bx, j]
            S[bx] = total

    a = cf.rand(64, 100)
    s = np.zeros(64, np.float32)
    out = both(k, a, s)[1]
    np.testing.assert_allclose(out, np.where(a > 0, a, 0).sum(1), rtol=1e-5)


def test_eager_branches_on_the_gpu():
    a = torch.randn(3000, device="cuda")
    out = cf.eager_relu_shift(a, 0.25)
    torch.testing.assert_close(out, torch.where(a > 0, a + 0.25, torch.zeros_like(a)))
