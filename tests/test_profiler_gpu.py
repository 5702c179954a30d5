"""The native launch path, the profiler and the autotuner on a GPU (CPU-only checks first).

GPU tests are marked `gpu` and run on the H200 by scripts/gpu-check.
"""

import math
import os
import sys

import pytest
import tilers
import tilers.language as T
from tilers import _tilers, runtime

sys.path.insert(0, os.path.dirname(__file__))
import kernels

# --- without a GPU: argument packing is checked before the driver is needed ---------------------


def test_driver_status_says_why_when_no_gpu():
    count, reason = _tilers.driver_status()
    assert count >= 0
    assert (count == 0) == bool(reason)


@pytest.mark.parametrize(
    "args, kinds, error, message",
    [
        ((1, 2), b"i", ValueError, "2 arguments but 1 kinds"),
        ((1,), b"z", ValueError, "unknown kind 'z'"),
        ((300,), b"b", OverflowError, "argument 0"),
        ((-1,), b"I", OverflowError, "argument 0"),
        ((1e39,), b"f", OverflowError, "does not fit in float32"),
        (("x",), b"i", TypeError, "argument 0"),
        ((object(),), b"T", TypeError, "argument 0"),
    ],
)
def test_launch_rejects_bad_arguments_before_launching(args, kinds, error, message):
    with pytest.raises(error, match=message):
        _tilers.launch(0, 0, (1, 1, 1), (1, 1, 1), 0, 0, args, kinds)


def test_launch_needs_a_tuple_or_list():
    with pytest.raises(TypeError, match="tuple or a list"):
        _tilers.launch(0, 0, (1, 1, 1), (1, 1, 1), 0, 0, {1: 2}, b"i")


def test_launch_without_a_driver_says_why():
    if _tilers.driver_status()[0] > 0:
        pytest.skip("a driver is present")
    with pytest.raises(RuntimeError, match="no usable CUDA driver"):
        _tilers.launch(0, 0, (1, 1, 1), (1, 1, 1), 0, 0, (1,), b"i")


# --- on the GPU ----------------------------------------------------------------------------------

gpu = pytest.mark.gpu

SCALARS_SOURCE = r"""
extern "C" __global__ void scalars_kernel(
    double* out, bool flag, signed char a, unsigned char b, short c, int d, unsigned int e,
    long long f, float g, double h, const double* same) {
  out[0] = flag ? 1.0 : -1.0; out[1] = a; out[2] = b; out[3] = c; out[4] = d; out[5] = e;
  out[6] = (double)f; out[7] = g; out[8] = h; out[9] = same[0];
}
"""


@gpu
def test_native_launch_packs_every_kind():
    import torch

    device = torch.cuda.current_device()
    arch = runtime.device_arch(device)
    cubin = runtime.nvrtc_compile(SCALARS_SOURCE, arch, "scalars")
    loaded = runtime.load_kernel(device, cubin, "scalars_kernel", 0)
    out = torch.zeros(10, device="cuda", dtype=torch.float64)
    same = torch.full((1,), 42.5, device="cuda", dtype=torch.float64)
    values = (out.data_ptr(), True, -7, 250, -30000, -2**31, 2**32 - 1, -2**62, 1.5, -2.25, same)
    stream = torch.cuda.current_stream().cuda_stream
    _tilers.launch(loaded.function_handle, loaded.context_handle, (1, 1, 1), (1, 1, 1), 0,
                   stream, values, b"P?bBhiIqfdT")
    torch.cuda.synchronize()
    expected = [1.0, -7, 250, -30000, -2**31, 2**32 - 1, float(-2**62), 1.5, -2.25, 42.5]
    assert out.tolist() == expected


def sum16(M, N):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    from launch import sum16 as factory

    return factory(M, N)


@gpu
def test_sixteen_tensor_arguments():
    import torch

    kernel = tilers.compile(sum16(64, 256))
    args = [torch.randn(64, 256, device="cuda", dtype=torch.float16) for _ in range(16)]
    kernel(*args)
    torch.testing.assert_close(args[15], sum(args[1:15], args[0]), rtol=1e-2, atol=5e-2)


@gpu
def test_launches_follow_the_current_stream_and_are_captured_in_graphs():
    import torch

    kernel = tilers.compile(kernels.add(256, 256, "float32"))
    a, b = (torch.randn(256, 256, device="cuda") for _ in range(2))
    c = torch.zeros_like(a)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kernel(a, b, c)  # first call outside capture: loads the module
        torch.cuda.synchronize()
        c.zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            kernel(a, b, c)
    torch.cuda.synchronize()
    assert bool((c == 0).all())  # captured, not run
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


@gpu
def test_profiler_assert_allclose():
    import torch

    kernel = tilers.compile(kernels.add(512, 512, "float16"), out_idx=[2])
    profiler = kernel.profiler()
    profiler.assert_allclose(torch.add, rtol=1e-3, atol=1e-3)
    with pytest.raises(AssertionError, match="output 'C' of add differs"):
        profiler.assert_allclose(lambda a, b: a - b, rtol=1e-3, atol=1e-3)
    # TileLang's profiler.func is the kernel
    a, b = profiler.inputs()
    torch.testing.assert_close(profiler.func(a, b), a + b)
    # 1% of the elements may differ by default (TileLang's max_mismatched_ratio), none with 0
    off_by_some = lambda a, b: (a + b).view(-1).index_fill(0, torch.arange(2000, device=a.device), 9).view(a.shape)  # noqa: E731
    profiler.assert_allclose(off_by_some, rtol=1e-3, atol=1e-3)
    with pytest.raises(AssertionError, match="differs from the reference at 2000 of"):
        profiler.assert_allclose(off_by_some, rtol=1e-3, atol=1e-3, max_mismatched_ratio=0)


@gpu
def test_profiler_checks_in_place_outputs():
    import torch

    kernel = tilers.compile(kernels.add(512, 512, "float32"))  # C written in place
    kernel.profiler().assert_allclose(torch.add, rtol=1e-6, atol=1e-6)


@gpu
def test_do_bench_and_bench_report():
    kernel = tilers.compile(kernels.add(4096, 4096, "float16"), out_idx=[2])
    profiler = kernel.profiler()
    ms = profiler.do_bench(warmup=5, rep=20)
    assert 0 < ms < 10
    samples = profiler.do_bench(warmup=5, rep=20, return_mode="all")
    assert len(samples) >= 1
    result = kernel.bench(flops=4096 * 4096, warmup=5, rep=20)
    assert result.bytes == 3 * 4096 * 4096 * 2
    assert result.gbps == pytest.approx(result.bytes / result.ms / 1e6)
    assert result.tflops == pytest.approx(4096 * 4096 / result.ms / 1e9)
    if result.peak_gbps:
        assert 0 < result.memory_fraction < 1.2
    text = str(result)
    assert "GB/s" in text and "TFLOP/s" in text


@gpu
def test_autotune_finds_a_correct_config_and_reuses_the_record(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("TILERS_CACHE_DIR", str(tmp_path))
    configs = [{"block_M": bm, "block_N": bn, "threads": th}
               for bm in (8, 32) for bn in (128, 256) for th in (128, 256)]

    def make():
        @tilers.autotune(configs=configs, ref_prog=torch.add, rtol=1e-3, atol=1e-3,
                         bytes=lambda M, N: 3 * M * N * 2, warmup=5, rep=20)
        @tilers.jit(out_idx=[2])
        def add(M, N, block_M, block_N, threads):
            return kernels.add(M, N, "float16", block_M, block_N, threads)

        return add

    first = make()
    kernel = first(2048, 2048)
    result = first.last_result
    assert not result.from_record
    assert all(r.status in ("ok", "stopped early", "skipped") for r in result.results)
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    b = torch.randn_like(a)
    assert torch.equal(kernel(a, b), a + b)
    again = make()
    again(2048, 2048)
    assert again.last_result.from_record
    assert again.last_result.config == result.config
    other = make()
    other(1024, 2048)
    assert not other.last_result.from_record


@gpu
def test_autotune_rejects_a_wrong_config_on_the_gpu(tmp_path, monkeypatch):

    monkeypatch.setenv("TILERS_CACHE_DIR", str(tmp_path))

    @tilers.autotune(configs=[{"block": 32, "wrong": True}, {"block": 32, "wrong": False}],
                     ref_prog=lambda x: x * 2, warmup=2, rep=5, search="exhaustive")
    @tilers.jit(out_idx=[1])
    def double(N, block, wrong):
        factor = 3.0 if wrong else 2.0

        @T.prim_func
        def double(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] * factor

        return double

    double(1000)
    result = double.last_result
    assert result.results[0].status == "wrong result"
    assert result.config == {"block": 32, "wrong": False}
    assert not math.isnan(result.ms)


@gpu
def test_host_arrays_after_gpu_calls_still_go_to_the_interpreter():
    import numpy as np
    import torch

    kernel = tilers.compile(kernels.add(64, 128, "float32"), out_idx=[2])
    a = torch.randn(64, 128, device="cuda")
    assert torch.equal(kernel(a, a), a + a)  # the GPU path is prepared now
    host = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    np.testing.assert_array_equal(kernel(host, host), host + host)
    with pytest.raises(ValueError, match="host arrays .* and GPU tensors"):
        kernel(host, a)


@pytest.mark.gpu
def test_supply_types_draw_tilelangs_distributions():
    import torch
    from tilers.utils.tensor import TensorSupplyType, get_tensor_supply

    def draw(kind, dtype):
        return get_tensor_supply(kind)((256, 256), dtype).float()

    normal = draw(TensorSupplyType.Normal, torch.float16)
    assert abs(normal.mean().item() + 1) < 0.05 and abs(normal.std().item() - 1) < 0.05
    randn = draw(TensorSupplyType.Randn, torch.float32)
    assert abs(randn.mean().item()) < 0.05
    for kind in (TensorSupplyType.Uniform, TensorSupplyType.Auto):
        u = draw(kind, torch.bfloat16)
        assert u.min().item() >= -1 and u.max().item() <= 1 and u.min().item() < -0.9 and abs(u.mean().item()) < 0.05
    ints = draw(TensorSupplyType.Integer, torch.float16)
    assert set(ints.unique().tolist()) == {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert set(draw(TensorSupplyType.Auto, torch.int32).unique().tolist()) == {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert (draw(TensorSupplyType.Normal, torch.int8) == 1).all()
