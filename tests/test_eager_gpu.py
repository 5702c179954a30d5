"""TileLang's current API on the GPU: eager @tilers.jit calls on torch tensors, pass_configs,
and the tooling names (profiler back ends, TensorSupplyType, torch_assert_close, AutoTuner,
set_autotune_inputs)."""

import os
import sys

import pytest
import tilers
import tilers.language as T

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import test_eager  # noqa: E402

# the CPU tests' eager GEMM (tests/test_eager.py), here on torch tensors
matmul = test_eager.eager_matmul


@tilers.jit
def scale_shift(A, s):
    M = T.dynamic("M")
    A: T.Tensor((M, 256), T.float32)
    s: T.float32
    Y = T.empty((M, 256), T.float32)
    Z = T.empty((M, 256), T.float32)
    with T.Kernel(T.ceildiv(M, 16), threads=128) as bx:
        for i, j in T.Parallel(16, 256):
            Y[bx * 16 + i, j] = A[bx * 16 + i, j] * s
            Z[bx * 16 + i, j] = A[bx * 16 + i, j] + s
    return Y, Z


@tilers.jit(out_idx=[-1])
def add_factory(M, N, block_M=32, block_N=128):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = (
                    A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
                )

    return main


def randn(*shape, dtype=torch.float16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mnk", [(1024, 1024, 1024), (1000, 1000, 1000), (77, 300, 130), (256, 128, 64)])
@pytest.mark.parametrize("tiles", [(128, 128, 64), (64, 64, 32)])
def test_eager_matmul_against_torch(dtype, mnk, tiles):
    M, N, K = mnk
    a, b = randn(M, K, dtype=dtype), randn(K, N, dtype=dtype)
    c = matmul(a, b, *tiles, dtype=T.dtype(dtype))
    assert c.dtype == dtype and c.shape == (M, N) and c.device == a.device
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)


def test_a_shape_compiles_once_and_its_cubin_loads_once():
    a, b = randn(512, 256), randn(256, 384)
    first = matmul(a, b, 128, 128, 64)
    kernel = matmul.compile(a, b, 128, 128, 64)
    for _ in range(5):
        torch.testing.assert_close(matmul(a, b, 128, 128, 64), first)
    assert matmul.compile(a, b, 128, 128, 64) is kernel
    assert len(kernel._loaded) == 1


def test_dynamic_sizes_and_two_outputs_and_a_runtime_scalar():
    for m in (1, 16, 1000, 4097):
        a = randn(m, 256, dtype=torch.float32)
        y, z = scale_shift(a, 0.5)
        torch.testing.assert_close(y, a * 0.5)
        torch.testing.assert_close(z, a + 0.5)
    assert len(scale_shift._kernels) == 1


def test_a_bad_call_names_the_parameter_and_writes_nothing():
    a = randn(256, 128)
    before = a.clone()
    with pytest.raises(ValueError, match="parameter 'B' expects dtype float16, got bfloat16"):
        matmul(a, randn(128, 64, dtype=torch.bfloat16), 128, 128, 64)
    with pytest.raises(ValueError, match=r"parameter 'B': dimension 0 must be K = 128 \(from A.shape\[1\]\), got 127"):
        matmul(a, randn(127, 64), 128, 128, 64)
    torch.cuda.synchronize()
    assert torch.equal(a, before)


def test_pass_configs_on_the_gpu():
    key = tilers.PassConfigKey
    a, b = randn(512, 512), randn(512, 512)
    want = a.float() @ b.float()
    for configs in ({key.TL_DISABLE_TMA_LOWER: True}, {key.TL_DISABLE_WARP_SPECIALIZED: True},
                    {key.TL_DISABLE_WGMMA: True}, {"tl.enable_fast_math": True}, {}):
        fn = tilers.jit(pass_configs=configs)(matmul.func)
        torch.testing.assert_close(fn(a, b, 128, 128, 64).float(), want, rtol=2e-2, atol=2e-1)


def test_profiler_back_ends_and_supply_types():
    kernel = add_factory(1024, 1024)
    for supply in tilers.TensorSupplyType:
        profiler = kernel.get_profiler(tensor_supply_type=supply)
        profiler.assert_allclose(lambda A, B: A + B, rtol=1e-2, atol=1e-2)
    profiler = kernel.get_profiler(tilers.TensorSupplyType.Normal)
    profiler.assert_allclose(reference_program=lambda A, B: A + B, max_mismatched_ratio=0.0)
    for backend in ("event", "cupti", "cudagraph"):
        ms = profiler.do_bench(backend=backend, warmup=5, rep=20)
        assert 0 < ms < 10, backend
    out = profiler.run_once()
    assert out.shape == (1024, 1024)
    from tilers.profiler import do_bench

    a, b = randn(1024, 1024), randn(1024, 1024)
    low, mid = do_bench(lambda: kernel(a, b), quantiles=[0.2, 0.5], _n_warmup=3, _n_repeat=20)
    assert 0 < low <= mid
    assert do_bench(lambda: kernel(a, b), backend="cudagraph", return_mode="min") > 0


def test_testing_helpers():
    from tilers.testing import set_random_seed, torch_assert_close
    from tilers.utils.tensor import TensorSupplyType, get_tensor_supply

    set_random_seed(7)
    x = randn(64, 64)
    set_random_seed(7)
    assert torch.equal(x, randn(64, 64))
    y = x.clone()
    y[0, 0] += 1.0
    assert torch_assert_close(x, y, max_mismatched_ratio=0.001)  # 1 of 4096 allowed
    with pytest.raises(AssertionError, match="1 of 4096 elements differ"):
        torch_assert_close(x, y, max_mismatched_ratio=0.0)
    t = get_tensor_supply(TensorSupplyType.Integer)((8, 8), T.float16)
    assert t.dtype == torch.float16 and bool((t == t.round()).all())


def test_autotuner_builder_and_set_autotune_inputs():
    from tilers.autotuner import AutoTuner, set_autotune_inputs

    def factory(block_M=32, block_N=128):
        return add_factory.prim_func(1024, 1024, block_M, block_N)

    configs = [{"block_M": m, "block_N": n} for m in (16, 32) for n in (64, 128)]
    result = (
        AutoTuner.from_kernel(kernel=factory, configs=configs)
        .set_compile_args(out_idx=[-1])
        .set_profile_args(ref_prog=lambda A, B: A + B, rtol=1e-2, atol=1e-2)
        .run(warmup=5, rep=20)
    )
    assert result.config in configs and result.latency > 0
    a, b = randn(1024, 1024), randn(1024, 1024)
    torch.testing.assert_close(result.kernel(a, b), a + b)
    tuned = tilers.autotune(configs=configs, ref_prog=lambda A, B: A + B, records=False)(add_factory)
    with set_autotune_inputs(a, b):
        kernel = tuned.compile(1024, 1024)
    torch.testing.assert_close(kernel(a, b), a + b)


@tilers.jit
def tunable_add(A, B, block_M=None, block_N=None):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float16)
    B: T.Tensor((M, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            C[by * block_M + i, bx * block_N + j] = (
                A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
            )
    return C


def test_autotune_over_an_eager_function():
    configs = [{"block_M": m, "block_N": n} for m in (8, 32) for n in (64, 128)]
    tuned = tilers.autotune(configs=configs, ref_prog=lambda A, B: A + B, warmup=5, rep=10)(tunable_add)
    a, b = randn(1000, 1000), randn(1000, 1000)
    c = tuned(a, b)
    torch.testing.assert_close(c, a + b)
    assert len(tuned.last_results) == 4 and all(r.status == "ok" for r in tuned.last_results)
    assert tuned.tune(a, b) in configs  # remembered: no second search
    kernel = tuned.compile(a, b)
    torch.testing.assert_close(kernel(a, b), a + b)


@tilers.autotune(configs=[{"block": 64}, {"block": 256}], warmup=2, rep=5)
@tilers.jit
def tunable_dynamic_scale(X, block: int = 64):
    n = T.dynamic("n")
    X: T.Tensor((n,), T.float32)
    Y = T.empty((n,), T.float32)
    with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
        for i in T.Parallel(block):
            if bx * block + i < n:
                Y[bx * block + i] = X[bx * block + i] * 2.0
    return Y


def test_autotune_of_a_dynamic_size_tunes_on_the_inputs_given():
    # TileLang's deepseek_mhc bwd: `with set_autotune_inputs(R, dR): f.compile(n_stream=16)`
    # on a kernel with a T.dynamic size, which takes its value from those inputs
    from tilers.autotuner import set_autotune_inputs

    x = torch.randn(1000, device="cuda")
    with set_autotune_inputs(x):
        kernel = tunable_dynamic_scale.compile()
    torch.testing.assert_close(kernel(x), 2 * x)
    y = torch.randn(77, device="cuda")
    torch.testing.assert_close(kernel(y), 2 * y)
