"""tilers.torch.custom_op: a kernel as a torch operator, with the fake implementation made
from KernelInfo — under torch.compile(fullgraph=True), torch.export and autograd. On the CPU
with interpreter kernels (they take CPU tensors); tests/test_torch_op_gpu.py runs the same
on the GPU with CUDA graphs. Needs torch (CI has none: skipped there)."""

import itertools

import pytest
import tilers
import tilers.language as T

torch = pytest.importorskip("torch")
import tilers.torch as tt  # noqa: E402

_names = itertools.count()


def opname(base):
    return f"tilers_test::{base}_{next(_names)}"


def scale_kernel(target="interp"):
    M = T.dynamic("M")

    @T.prim_func
    def scale(A: T.Tensor((M, 64), "float32"), s: T.float32, C: T.Tensor((M, 64), "float32")):
        with T.Kernel(T.ceildiv(M, 64), threads=64) as bx:
            for i, j in T.Parallel(64, 64):
                if bx * 64 + i < M:
                    C[bx * 64 + i, j] = A[bx * 64 + i, j] * s

    return tilers.compile(scale, out_idx=[2], target=target)


def add_in_place_kernel(target="interp"):
    @T.prim_func
    def acc(X: T.Tensor((128,), "float32"), Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                Y[i] = Y[i] + X[i]

    return tilers.compile(acc, target=target)


def two_outputs_kernel(target="interp"):
    @T.prim_func
    def split(A: T.Tensor((32, 16), "float16"), S: T.Tensor((32, 16), "float16"), D: T.Tensor((32, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(32, 16):
                S[i, j] = A[i, j] * 2
                D[i, j] = T.cast(A[i, j], "float32") - 1

    return tilers.compile(split, out_idx=[1, 2], target=target)


def test_the_op_runs_the_kernel_and_its_schema_follows_kernel_info():
    op = tt.custom_op(scale_kernel(), opname("scale"))
    a = torch.randn(100, 64)
    torch.testing.assert_close(op(a, 2.0), a * 2)
    assert str(op.default._schema).endswith("(Tensor A, float s) -> Tensor")
    # in place: the written parameter the caller passes is a mutated argument
    acc = tt.custom_op(add_in_place_kernel(), opname("acc"))
    assert "Tensor(a0!) Y" in str(acc.default._schema)
    x, y = torch.randn(128), torch.randn(128)
    want = y + x
    assert acc(x, y) is None
    torch.testing.assert_close(y, want)
    split = tt.custom_op(two_outputs_kernel(), opname("split"))
    s, d = split(torch.ones(32, 16, dtype=torch.float16))
    assert s.dtype == torch.float16 and d.dtype == torch.float32
    assert float(s[0, 0]) == 2 and float(d[0, 0]) == 0


def test_fullgraph_compile_matches_eager():
    op = tt.custom_op(scale_kernel(), opname("scale"))

    def f(x):
        y = op(x, 3.0)
        return torch.relu(y) + op(y, 0.5)

    a = torch.randn(130, 64)
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(a), f(a))
    # a new T.dynamic size: the fake implementation gives the output shape from the input
    b = torch.randn(7, 64)
    torch.testing.assert_close(compiled(b), f(b))


def test_export_keeps_the_op_in_the_graph():
    op = tt.custom_op(scale_kernel(), opname("scale"))

    class Model(torch.nn.Module):
        def forward(self, x):
            return op(x, 2.0) + 1

    a = torch.randn(64, 64)
    ep = torch.export.export(Model(), (a,))
    assert "tilers_test" in str(ep.graph)
    torch.testing.assert_close(ep.module()(a), a * 2 + 1)


def test_autograd_through_a_user_backward():
    op_name = opname("scale")

    def setup(ctx, inputs, output):
        ctx.s = inputs[1]

    def backward(ctx, grad):
        return grad * ctx.s, None

    op = tt.custom_op(scale_kernel(), op_name, backward=backward, setup_context=setup)
    a = torch.randn(64, 64, requires_grad=True)
    op(a, 3.0).sum().backward()
    torch.testing.assert_close(a.grad, torch.full_like(a, 3.0))


def test_bad_arguments_name_the_parameter():
    with pytest.raises(TypeError, match="parameter 'kernel'"):
        tt.custom_op(lambda x: x, opname("x"))
    with pytest.raises(ValueError, match="parameter 'name'"):
        tt.custom_op(scale_kernel(), "no_namespace")
    name = opname("twice")
    tt.custom_op(scale_kernel(), name)
    with pytest.raises(ValueError, match="already registered"):
        tt.custom_op(scale_kernel(), name)
