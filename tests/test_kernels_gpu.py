"""The test kernels on the GPU, checked against torch (ragged sizes, every dtype the kernels take)."""

import os
import sys

import pytest
import tilers

sys.path.insert(0, os.path.dirname(__file__))
import kernels

pytestmark = pytest.mark.gpu

TOL = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}
ERRORS = {}  # test id -> max relative error, written to $OUT/kernel-errors.json when set


@pytest.fixture(autouse=True, scope="module")
def record_errors():
    yield
    if os.environ.get("OUT") and ERRORS:
        import json

        with open(os.path.join(os.environ["OUT"], "kernel-errors.json"), "w") as f:
            json.dump(ERRORS, f, indent=1)


def record(err):
    ERRORS[os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]] = err
    return err


def torch_dtype(name):
    import torch

    return getattr(torch, name)


def rand(shape, dtype, seed=0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(
        torch_dtype(dtype)
    )


def interpreted(kernel, *args):
    """The same kernel on the reference interpreter, from host copies of the arguments."""
    host = [a.cpu() if hasattr(a, "cpu") else a for a in args]
    out = kernel(*host)
    return out.cuda() if out is not None and not isinstance(out, tuple) else out


def assert_close(got, want, dtype):
    import torch

    tol = TOL[dtype]
    got, want = got.double(), want.double()
    err = record(((got - want).abs() / (want.abs() + tol)).max().item())
    assert torch.allclose(got, want, rtol=tol, atol=tol), f"max relative error {err:.3g} > {tol}"
    return err


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("M,N", [(1000, 1000), (7, 33), (1, 8), (4096, 4096)])
@pytest.mark.parametrize("factory", [kernels.add, kernels.add_tiles])
def test_add(factory, M, N, dtype):
    kernel = tilers.compile(factory(M, N, dtype), out_idx=[2])
    a, b = rand((M, N), dtype, 1), rand((M, N), dtype, 2)
    c = kernel(a, b)
    record((c.double() - (a + b).double()).abs().max().item())
    assert (c == a + b).all(), "add is exact in every dtype"
    if M * N <= 1 << 20:
        assert (interpreted(kernel, a, b) == c).all(), "GPU and interpreter differ"


def test_add_int8_wraps():
    import torch

    kernel = tilers.compile(kernels.add(65, 100, "int8"), out_idx=[2])
    a = torch.randint(-128, 128, (65, 100), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (65, 100), device="cuda", dtype=torch.int8)
    assert (kernel(a, b) == a + b).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("M,N", [(1000, 1000), (33, 250)])
def test_bias_gelu(M, N, dtype):
    import torch

    kernel = tilers.compile(kernels.bias_gelu(M, N, dtype), out_idx=[2])
    x, bias = rand((M, N), dtype, 3), rand((N,), dtype, 4)
    want = torch.nn.functional.gelu(x.float() + bias.float()).to(torch_dtype(dtype))
    assert_close(kernel(x, bias), want, dtype)


@pytest.mark.parametrize(
    "M,N,kw",
    [
        (1001, 1024, dict(block_M=4)),  # row count not a multiple of the block
        (
            64,
            1000,
            dict(block_M=4, tile_N=1024),
        ),  # row length not a multiple of the tile (pad -inf)
        (16, 4096, dict(block_M=1, threads=256)),  # cross-warp reduction
        (3, 100, dict(block_M=2, tile_N=128)),
    ],
)
def test_softmax(M, N, kw):
    import torch

    kernel = tilers.compile(kernels.softmax(M, N, **kw), out_idx=[1])
    a = rand((M, N), "float32", 5) * 4
    got = kernel(a)
    assert_close(got, torch.softmax(a, dim=1), "float32")
    assert_close(got, interpreted(kernel, a), "float32")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("M,N", [(1000, 700), (33, 65), (4096, 4096)])
def test_transpose(M, N, dtype):
    kernel = tilers.compile(kernels.transpose(M, N, dtype), out_idx=[1])
    a = rand((M, N), dtype, 6)
    record((kernel(a).double() - a.T.double()).abs().max().item())
    assert (kernel(a) == a.T).all()
    assert (interpreted(kernel, a) == a.T).all()


@pytest.mark.parametrize("M,N", [(1001, 1000), (5, 3)])
def test_row_sum(M, N):
    kernel = tilers.compile(kernels.row_sum(M, N), out_idx=[1])
    a = rand((M, N), "float32", 7)
    got, want = kernel(a).double(), a.double().sum(1)
    # fp32 summation of N terms: error bound ~ N * eps * sum|a|
    bound = N * 2**-24 * a.double().abs().sum(1) + 1e-30
    record(((got - want).abs() / a.double().abs().sum(1)).max().item())  # relative to sum|a|
    assert ((got - want).abs() <= bound).all()


def test_col_absmax():
    kernel = tilers.compile(kernels.col_absmax(1000, 999), out_idx=[1])
    a = rand((1000, 999), "float16", 8)
    assert (kernel(a) == a.float().abs().amax(0)).all()


def test_scalar_parameters_and_untouched_rows():
    import torch

    kernel = tilers.compile(kernels.scale_shift(100, 1000))
    x = rand((100, 1000), "float32", 9)
    y = torch.full_like(x, 7.0)
    kernel(x, y, 0.5, 60)
    assert_close(y[:60], 0.5 * x[:60] + 1.0, "float32")
    assert (y[60:] == 7.0).all()


def test_histogram_atomics():
    import torch

    kernel = tilers.compile(kernels.histogram(10000))
    x = torch.randint(0, 1 << 20, (10000,), device="cuda", dtype=torch.int32)
    h = torch.zeros(64, device="cuda", dtype=torch.int32)
    kernel(x, h)
    assert (h == torch.bincount(x % 64, minlength=64).int()).all()


def test_float_to_int_saturates():
    import torch

    kernel = tilers.compile(kernels.clamp_int8(100, 1000), out_idx=[1, 2])
    x = rand((100, 1000), "float32", 10) * 2
    x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30])
    q, p = kernel(x)
    want = torch.nan_to_num(torch.floor(x * 127.0 + 0.5), nan=0.0).clamp(-128, 127).to(torch.int8)
    assert (q == want).all()
    assert (p == (x > 0).to(torch.uint8)).all()


def test_math_functions():
    import torch

    N = 1000
    kernel = tilers.compile(kernels.math_zoo(N), out_idx=[1])
    x = rand((N,), "float32", 11).abs() + 0.01  # positive: log and sqrt are defined
    y = kernel(x)
    for k, name in enumerate(kernels.MATH_FUNCS):
        ref = {"sigmoid": torch.sigmoid, "rsqrt": torch.rsqrt, "exp2": torch.exp2}.get(
            name
        ) or getattr(torch, name)
        want = ref(x.double())
        # IEEE float math: a few ulp of float32 (absolute near the zeros of sin and cos)
        diff = (y[k].double() - want).abs()
        record((diff / want.abs().clamp_min(1e-3)).max().item())
        assert (diff <= 4e-7 * want.abs() + 1e-6).all(), (
            f"{name}: max error {diff.max().item():.3g}"
        )
    assert (y[len(kernels.MATH_FUNCS)] == torch.clamp_min(x, 0.5)).all()
    assert (y[len(kernels.MATH_FUNCS) + 1] == torch.clamp_max(x, 0.5)).all()


def test_sigmoid_of_large_negative_values():
    """sigmoid(x) for x far below zero is exp(x) (a float32 subnormal near -100), not 0 from
    1 / (1 + inf): found by the random program generator (tests/progen.py seed 230)."""
    import torch

    x = torch.tensor(
        [-200.0, -103.0, -100.0, -88.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0], device="cuda"
    )
    kernel = tilers.compile(kernels.math_zoo(x.numel()), out_idx=[1])
    got = kernel(x)[kernels.MATH_FUNCS.index("sigmoid")].double()
    want = torch.sigmoid(x.double()).float().double()  # the float32 nearest the true value
    ulp = torch.finfo(torch.float32).smallest_normal * 2.0**-23
    assert ((got - want).abs() <= 2e-7 * want + 2 * ulp).all(), (got, want)


@pytest.mark.parametrize("B,S,H,D", [(2, 100, 3, 64), (1, 64, 1, 32)])
def test_head_slices(B, S, H, D):
    kernel = tilers.compile(kernels.head_slices(B, S, H, D), out_idx=[1])
    q = rand((B, S, H, D), "float16", 12)
    want = (2.0 * q.float() - q.float().amin(-1, keepdim=True)).half()
    assert_close(kernel(q), want, "float16")


class TestArgumentErrors:
    """Bad arguments name the parameter, the expected and the received value, and touch nothing."""

    def setup_method(self):
        import torch

        self.kernel = tilers.compile(kernels.add(64, 64, "float16"))
        self.a = rand((64, 64), "float16", 1)
        self.b = rand((64, 64), "float16", 2)
        self.c = torch.full((64, 64), 3.0, device="cuda", dtype=torch.float16)

    def check(self, exc, match, *args):
        with pytest.raises(exc, match=match):
            self.kernel(*args)
        assert (self.c == 3.0).all(), "the output was touched"

    def test_wrong_dtype(self):
        self.check(ValueError, "'A'.*float16.*float32", self.a.float(), self.b, self.c)

    def test_wrong_shape(self):
        self.check(ValueError, "'B'.*64, 64.*64, 32", self.a, self.b[:, :32].contiguous(), self.c)

    def test_cpu_tensor(self):
        self.check(
            ValueError,
            "host arrays \\(B\\) and GPU tensors \\(A, C\\)",
            self.a,
            self.b.cpu(),
            self.c,
        )

    def test_transposed_view(self):
        self.check(ValueError, "'A'.*contiguous", self.a.T, self.b, self.c)

    def test_argument_count(self):
        self.check(TypeError, "3", self.a, self.b)


def _matmul_inputs(M, N, K, dtype, trans_A, trans_B, seed=20):
    import torch

    if dtype == "int8":
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randint(
            -128, 128, (K, M) if trans_A else (M, K), generator=g, device="cuda", dtype=torch.int8
        )
        b = torch.randint(
            -128, 128, (N, K) if trans_B else (K, N), generator=g, device="cuda", dtype=torch.int8
        )
    else:
        a = rand((K, M) if trans_A else (M, K), dtype, seed)
        b = rand((N, K) if trans_B else (K, N), dtype, seed + 1)
    want = (a.T if trans_A else a).double() @ (b.T if trans_B else b).double()
    return a, b, want


def _check_matmul(got, want, dtype, K):
    if dtype == "int8":
        assert (got.double() == want).all(), "int8 GEMM accumulates exactly in int32"
        record(0.0)
        return
    # fp32 accumulation, one rounding to the output type: error ~ eps(out) * |C| + K eps32
    scale = want.abs().max().item() + 1.0
    err = record(((got.double() - want).abs().max() / scale).item())
    assert err < 1e-2, f"max error {err:.3g} of the largest |C|"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "trans_A,trans_B", [(False, False), (False, True), (True, False), (True, True)]
)
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (1, 64, 100), (7, 33, 17), (33, 200, 64)])
def test_matmul(M, N, K, trans_A, trans_B, dtype):
    kernel = tilers.compile(
        kernels.matmul(M, N, K, dtype=dtype, trans_A=trans_A, trans_B=trans_B), out_idx=[2]
    )
    a, b, want = _matmul_inputs(M, N, K, dtype, trans_A, trans_B)
    got = kernel(a, b)
    _check_matmul(got, want, dtype, K)
    if M * N * K <= 1 << 22:
        # the interpreter sums exact products in order; the GPU's fp32 order differs slightly
        _check_matmul(got, interpreted(kernel, a, b).double(), dtype, K)


@pytest.mark.parametrize(
    "trans_A,trans_B", [(False, False), (False, True), (True, False), (True, True)]
)
@pytest.mark.parametrize("M,N,K", [(100, 100, 128), (7, 33, 100)])
def test_matmul_int8(M, N, K, trans_A, trans_B):
    kernel = tilers.compile(
        kernels.matmul(
            M, N, K, dtype="int8", accum_dtype="int32", block_K=64, trans_A=trans_A, trans_B=trans_B
        ),
        out_idx=[2],
    )
    a, b, want = _matmul_inputs(M, N, K, "int8", trans_A, trans_B)
    got = kernel(a, b)
    _check_matmul(got, want, "int8", K)
    assert (interpreted(kernel, a, b) == got).all()


@pytest.mark.parametrize("policy", ["square", "full_row", "full_col"])
@pytest.mark.parametrize(
    "blocks", [(128, 128, 32, 128), (64, 128, 64, 256), (128, 64, 32, 128), (32, 32, 32, 128)]
)
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_matmul_configs(policy, blocks, stages):
    block_M, block_N, block_K, threads = blocks
    M, N, K = 257, 300, 333
    kernel = tilers.compile(
        kernels.matmul(M, N, K, block_M, block_N, block_K, stages, threads, policy=policy),
        out_idx=[2],
    )
    a, b, want = _matmul_inputs(M, N, K, "float16", False, False)
    _check_matmul(kernel(a, b), want, "float16", K)


def test_article_matmul_runs_as_written():
    M = N = K = 1024
    kernel = tilers.compile(kernels.article_matmul(M, N, K), out_idx=[2])
    a, b, want = _matmul_inputs(M, N, K, "float16", False, False)
    _check_matmul(kernel(a, b), want, "float16", K)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8"])
def test_matmul_with_a_in_registers(dtype):
    import torch

    M, N, K = (100, 70, 100) if dtype != "int8" else (64, 64, 128)
    extra = {} if dtype != "int8" else {"accum_dtype": "int32", "block_K": 64}
    kernel = tilers.compile(kernels.matmul_reg_a(M, N, K, dtype=dtype, **extra), out_idx=[2])
    a, b, _ = _matmul_inputs(M, N, K, dtype, False, False)
    if dtype == "int8":
        a = (a // 2).to(torch.int8)  # 2 * a stays in int8
    want = (2 * a.double()) @ b.double()
    got = kernel(a, b)
    _check_matmul(got, want, dtype, K)
    _check_matmul(got, interpreted(kernel, a, b).double(), dtype, K)


@pytest.mark.parametrize("case", ["matmul_rasterized_row", "matmul_rasterized_col"])
@pytest.mark.parametrize("panel", [1, 3, 4, 100])
def test_rasterized_matmul(case, panel):
    """T.use_swizzle runs every (bx, by) exactly once, panels that do not divide the grid
    included, and a T.annotate_layout-swizzled float32 tile round-trips."""
    factory, kw = kernels.COMPILE_CASES[case]
    kernel = tilers.compile(factory(**dict(kw, panel=panel)), out_idx=[2])
    M, N, K, dtype = kw["M"], kw["N"], kw["K"], kw.get("dtype", "float16")
    a, b, _ = _matmul_inputs(M, N, K, dtype, False, False)
    got = kernel(a, b)
    _check_matmul(got, a.double() @ b.double(), dtype, K)
    _check_matmul(got, interpreted(kernel, a, b).double(), dtype, K)


@pytest.mark.parametrize("case", ["matmul_reg_b_f16", "matmul_reg_ab_bf16", "matmul_reg_b_int8"])
def test_matmul_with_b_in_registers(case):
    import torch

    factory, kw = kernels.COMPILE_CASES[case]
    kernel = tilers.compile(factory(**kw), out_idx=[2])
    M, N, K, dtype = kw["M"], kw["N"], kw["K"], kw.get("dtype", "float16")
    a, b, _ = _matmul_inputs(M, N, K, dtype, False, False)
    if dtype == "int8":
        b = (b // 2).to(torch.int8)
    got = kernel(a, b)
    _check_matmul(got, a.double() @ (2 * b.double()), dtype, K)
    _check_matmul(got, interpreted(kernel, a, b).double(), dtype, K)
