"""Symbolic sizes (T.dynamic) on the GPU: one compiled kernel — one program through the
Rust core, one cubin, loaded once — runs a GEMM, a softmax and an elementwise kernel for
every M, matching torch; bad calls are errors that leave the outputs as they were; a size
that makes a tensor pass 2^31 elements indexes it with 64 bits."""

import os
import sys

import pytest
import tilers
import tilers.language as T
from tilers import cache

sys.path.insert(0, os.path.dirname(__file__))
import kernels

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

SIZES = [0, 1, 7, 128, 1000, 4097]


def maxabs(t) -> float:
    return t.abs().max().item() if t.numel() else 0.0


@pytest.fixture
def builds(compile_count):
    """Counts of what building a kernel takes: Rust-core compiles, cubins made or found."""
    before = dict(cache.stats)

    def count():
        cubins = sum(cache.stats[k] - before[k] for k in before)
        return len(compile_count), cubins

    return count


def test_gemm_for_every_m(builds):
    kernel = tilers.compile(kernels.matmul(T.dynamic("M"), 1024, 512), out_idx=[2])
    for m in SIZES:
        a = torch.randn(m, 512, device="cuda", dtype=torch.float16)
        b = torch.randn(512, 1024, device="cuda", dtype=torch.float16)
        c = kernel(a, b)
        assert c.shape == (m, 1024)
        want = a.float() @ b.float()
        assert maxabs(c.float() - want) <= 2e-2 * max(1.0, maxabs(want))
    assert builds() == (1, 1)
    assert len(kernel._loaded) == 1


def test_softmax_for_every_m(builds):
    kernel = tilers.compile(kernels.softmax(T.dynamic("M"), 1000, tile_N=1024), out_idx=[1])
    for m in SIZES:
        x = torch.randn(m, 1000, device="cuda")
        y = kernel(x)
        assert y.shape == (m, 1000)
        torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)
    assert builds() == (1, 1)


def test_elementwise_for_every_m(builds):
    kernel = tilers.compile(kernels.add(T.dynamic("M"), 1000), out_idx=[2])
    for m in SIZES:
        a = torch.randn(m, 1000, device="cuda", dtype=torch.float16)
        b = torch.randn(m, 1000, device="cuda", dtype=torch.float16)
        assert torch.equal(kernel(a, b), a + b)
    assert builds() == (1, 1)


def test_every_dimension_symbolic():
    M, N, K = T.dynamic("M, N, K")
    kernel = tilers.compile(kernels.matmul(M, N, K, block_M=64, block_N=64), out_idx=[2])
    for m, n, k in [(1, 1, 1), (65, 7, 33), (0, 64, 64), (64, 0, 5), (3, 70, 0), (300, 260, 1000)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        c = kernel(a, b)
        want = a.float() @ b.float()
        assert c.shape == (m, n)
        assert maxabs(c.float() - want) <= 5e-2 + 1e-2 * maxabs(want)


def test_a_promise_is_kept_or_the_call_refused():
    kernel = tilers.compile(kernels.matmul(T.dynamic("M", multiple_of=128), 256, 256))
    for m in (0, 128, 1024):
        a = torch.randn(m, 256, device="cuda", dtype=torch.float16)
        b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
        c = torch.empty(m, 256, device="cuda", dtype=torch.float16)
        kernel(a, b, c)
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-1)
    a = torch.randn(100, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    c = torch.full((100, 256), 7.0, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"'M' = 100, which is not a multiple of 128"):
        kernel(a, b, c)
    torch.cuda.synchronize()
    assert (c == 7).all()


def test_disagreeing_sizes_touch_nothing():
    kernel = tilers.compile(kernels.add(T.dynamic("M"), 256))
    a = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(65, 256, device="cuda", dtype=torch.float16)
    c = torch.full((64, 256), 7.0, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="parameter 'B': dimension 0 is 65, but parameter 'A'"):
        kernel(a, b, c)
    torch.cuda.synchronize()
    assert (c == 7).all()


def test_profiler_takes_the_sizes():
    kernel = tilers.compile(kernels.add(T.dynamic("M"), 1024), out_idx=[2])
    with pytest.raises(ValueError, match=r"sizes=\{'M': 1024\}"):
        kernel.profiler()
    profiler = kernel.profiler(sizes={"M": 4096})
    profiler.assert_allclose(lambda a, b: a + b)
    assert profiler.do_bench() > 0


def test_a_size_that_passes_2_31_elements():
    if torch.cuda.mem_get_info()[0] < 14 * 2**30:
        pytest.skip("needs 14 GiB of free GPU memory")
    n = 4096
    m = 2**31 // n + 3  # M * N > 2^31
    kernel = tilers.compile(kernels.add(T.dynamic("M"), n))
    a = torch.ones(m, n, device="cuda", dtype=torch.float16)
    a[-1] = 3.0
    b = torch.ones_like(a)
    c = torch.zeros_like(a)
    kernel(a, b, c)
    torch.cuda.synchronize()
    assert (c[-1] == 4).all() and (c[-4:-1] == 2).all() and (c[0] == 2).all()
    del a, b, c
    torch.cuda.empty_cache()


def test_autotuned_dynamic_gemm_tunes_buckets(tmp_path, monkeypatch, builds):
    """The autotuner on a T.dynamic GEMM: real checks against torch at each bucket's M, a
    record per bucket, one compile per config for every M."""
    monkeypatch.setenv("TILERS_CACHE_DIR", str(tmp_path))
    configs = [{"block_M": bm, "block_N": 64} for bm in (32, 64)]

    @tilers.autotune(configs=configs, ref_prog=lambda a, b: a @ b, warmup=2, rep=5,
                     verbose=False)
    @tilers.jit(out_idx=[2])
    def matmul(N, K, block_M, block_N):
        return kernels.matmul(T.dynamic("M"), N, K, block_M=block_M, block_N=block_N,
                              block_K=32)

    kernel = matmul(128, 96)
    for m in (0, 7, 1000):
        a = torch.randn(m, 96, device="cuda", dtype=torch.float16)
        b = torch.randn(96, 128, device="cuda", dtype=torch.float16)
        c = kernel(a, b)
        assert c.shape == (m, 128)
        assert maxabs(c.float() - (a.float() @ b.float())) < 0.1
    assert [r.sizes for r in kernel.results.values()] == [{"M": 1}, {"M": 8}, {"M": 1024}]
    assert all(r.record["sizes"] == r.sizes for r in kernel.results.values())
    # one compile per config, for every M
    assert builds()[0] == len(configs)
    records = os.listdir(tmp_path / "tuning")
    assert len(records) == 3
