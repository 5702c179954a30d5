"""Reliability on the GPU: 64-bit indices into tensors past 2³¹ elements, written the plain
way, and an autotuner that cannot pick a kernel which leaves outputs unwritten."""

import pytest
import tilers
import tilers.language as T

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

WIDE = 2**31 + 1000


def _free_gib() -> float:
    free, _ = torch.cuda.mem_get_info()
    return free / 2**30


@pytest.fixture
def wide_halves():
    """A, B and C of WIDE fp16 elements (4 GiB each), with known values at both ends."""
    if _free_gib() < 14:
        pytest.skip("needs 14 GiB of free GPU memory")
    a = torch.empty(WIDE, dtype=torch.float16, device="cuda")
    b = torch.empty_like(a)
    # a pattern that differs block to block, so an index that wraps reads the wrong value
    index = torch.arange(WIDE, device="cuda", dtype=torch.int64)
    a.copy_((index % 2039).to(torch.float16))
    b.copy_((index % 997).to(torch.float16))
    del index
    c = torch.full_like(a, float("nan"))
    yield a, b, c
    del a, b, c
    torch.cuda.empty_cache()


def _check_wide(a, b, c):
    torch.cuda.synchronize()
    # the last elements (past 2^31), the first, and a stretch across 2^31
    for start in (WIDE - 4096, 0, 2**31 - 2048):
        want = a[start:start + 4096] + b[start:start + 4096]
        assert torch.equal(c[start:start + 4096], want), start
    assert not torch.isnan(c).any()


def test_plain_1d_kernel_past_2_31_elements(wide_halves):
    a, b, c = wide_halves

    @T.prim_func
    def wide_add(A: T.Tensor((WIDE,), "float16"), B: T.Tensor((WIDE,), "float16"),
                 C: T.Tensor((WIDE,), "float16")):
        with T.Kernel(T.ceildiv(WIDE, 1024), threads=128) as bx:
            for i in T.Parallel(1024):
                C[bx * 1024 + i] = A[bx * 1024 + i] + B[bx * 1024 + i]

    tilers.compile(wide_add)(a, b, c)
    _check_wide(a, b, c)


def test_tile_copies_past_2_31_elements(wide_halves):
    a, b, c = wide_halves

    @T.prim_func
    def wide_add_tiles(A: T.Tensor((WIDE,), "float16"), B: T.Tensor((WIDE,), "float16"),
                       C: T.Tensor((WIDE,), "float16")):
        with T.Kernel(T.ceildiv(WIDE, 2048), threads=256) as bx:
            a_s = T.alloc_shared((2048,), "float16")
            b_f = T.alloc_fragment((2048,), "float16")
            T.copy(A[bx * 2048], a_s)
            T.copy(B[bx * 2048], b_f)
            for i in T.Parallel(2048):
                b_f[i] = b_f[i] + a_s[i]
            T.copy(b_f, C[bx * 2048])

    tilers.compile(wide_add_tiles)(a, b, c)
    _check_wide(a, b, c)


# --- the autotuner's checks ----------------------------------------------------------------


def _partial_writer(dtype):
    """A factory whose `blocks="one"` config writes only the first block of its output."""

    @tilers.jit(out_idx=[1])
    def scale(N, block, blocks):
        grid = T.ceildiv(N, block) if blocks == "all" else 1

        @T.prim_func
        def scale(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
            with T.Kernel(grid, threads=128) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] * 2

        return scale

    return scale


@pytest.mark.parametrize("dtype", ["float16", "float32", "int32"])
def test_autotune_rejects_a_config_that_leaves_outputs_unwritten(tmp_path, monkeypatch, dtype):
    monkeypatch.setenv("TILERS_CACHE_DIR", str(tmp_path))
    # the correct config runs first, so torch's allocator holds its (right) output when the
    # partial one runs: without poisoning, the partial config passes and is the fastest
    configs = [{"block": 256, "blocks": "all"}, {"block": 256, "blocks": "one"}]
    tuned = tilers.autotune(configs=configs, ref_prog=lambda x: x * 2, warmup=2, rep=5,
                            search="exhaustive")(_partial_writer(dtype))
    tuned(1 << 16)
    result = tuned.last_result
    assert result.results[1].status == "wrong result", result.results[1]
    assert result.config == {"block": 256, "blocks": "all"}


def test_assert_allclose_poisons_allocated_and_in_place_outputs():
    full = _partial_writer("float32").compile(1 << 16, 256, "all")
    partial = _partial_writer("float32").compile(1 << 16, 256, "one")
    for kernel in (full, partial):
        profiler = kernel.profiler()
        if kernel is full:
            profiler.assert_allclose(lambda x: x * 2)
        else:
            with pytest.raises(AssertionError, match="output 'Y' of scale differs"):
                profiler.assert_allclose(lambda x: x * 2)
    # written in place: the output a correct run left behind is poisoned too
    in_place = tilers.compile(_in_place_partial())
    x = torch.randn(1 << 16, device="cuda")
    y = x * 2
    profiler = in_place.profiler()
    profiler._inputs = [x, y]
    with pytest.raises(AssertionError, match="differs"):
        profiler.assert_allclose(lambda x: x * 2)


def _in_place_partial():
    @T.prim_func
    def scale_in_place(X: T.Tensor((1 << 16,), "float32"), Y: T.Tensor((1 << 16,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(256):
                Y[bx * 256 + i] = X[bx * 256 + i] * 2

    return scale_in_place
