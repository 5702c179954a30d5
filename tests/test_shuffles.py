"""Warp shuffles by TileLang's names (T.shfl_sync / shfl_xor / shfl_down / shfl_up,
TVM's T.tvm_warp_shuffle) in code of each thread's own, and
tilers.cuda.intrinsics.make_mma_swizzle_layout: the CUDA they become, NVRTC for sm_80 and
sm_90a, misuse at the user's line, and the layout as a bijection (the GPU results are in
test_shuffles_gpu.py: the interpreter cannot run CUDA's shuffles)."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError
from tilers.cuda.intrinsics import make_mma_swizzle_layout


def shuffles(dtype="float32", threads=64):
    """Out[t, :] = (lane 0's value, the xor-16 partner's, the one below's, the one above's,
    a butterfly sum of the warp) for value v = In[t]."""

    @T.prim_func
    def f(In: T.Tensor((threads,), dtype), Out: T.Tensor((threads, 5), dtype)):
        with T.Kernel(1, threads=threads) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), dtype)
            s = T.alloc_local((1,), dtype)
            v[0] = In[tx]
            Out[tx, 0] = T.shfl_sync(v[0], 0)
            Out[tx, 1] = T.shfl_xor(v[0], 16)
            Out[tx, 2] = T.shfl_down(v[0], 1)
            Out[tx, 3] = T.tvm_warp_shuffle(0xFFFFFFFF, v[0], tx - 1, 32, 32)
            s[0] = v[0]
            for k in T.serial(5):
                s[0] = s[0] + T.shfl_xor(s[0], 1 << k)
            Out[tx, 4] = s[0]

    return f


def shuffles_expected(x):
    n = x.shape[0]
    t = np.arange(n)
    warp = t // 32 * 32
    lane = t % 32
    out = np.zeros((n, 5), x.dtype)
    out[:, 0] = x[warp]
    out[:, 1] = x[warp + (lane ^ 16)]
    out[:, 2] = x[np.where(lane < 31, t + 1, t)]
    out[:, 3] = x[warp + (lane - 1) % 32]
    out[:, 4] = np.add.reduceat(x.astype(np.float64), np.arange(0, n, 32)).repeat(32).astype(x.dtype)
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "int64"])
def test_nvrtc_compiles_shuffles(arch, dtype):
    k = tilers.compile(shuffles(dtype), target=f"cuda:{arch}")
    src = k.get_kernel_source()
    for name in ("__shfl_sync(", "__shfl_xor_sync(", "__shfl_down_sync("):
        assert name in src
    assert len(k.cubin) > 0


def test_shuffles_inside_parallel_are_an_error():
    @T.prim_func
    def f(A: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(32):
                A[i] = T.shfl_xor(A[i], 1)

    with pytest.raises(TileError, match="T.shfl_xor inside T.Parallel") as err:
        tilers.compile(f, target="cuda:sm_90a")
    assert "test_shuffles.py" in str(err.value)


def test_a_width_that_is_no_power_of_two_is_an_error():
    @T.prim_func
    def f(A: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            A[tx] = T.shfl_down(A[tx], 1, width=12)

    with pytest.raises(TileError, match="parameter 'width': a power of 2 up to 32, got 12") as err:
        tilers.compile(f, target="cuda:sm_90a")
    assert "test_shuffles.py" in str(err.value)


@pytest.mark.parametrize("shape,dtype", [((256, 32), "float32"), ((64, 64), "float16"), ((8, 16), "float32"),
                                         ((2, 16, 128), "float16"), ((16, 24), "float32")])
def test_mma_swizzle_layout_is_a_bijection(shape, dtype):
    @T.prim_func
    def f(A: T.Tensor(shape, dtype), B: T.Tensor(shape, dtype)):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared(shape, dtype)
            layout = make_mma_swizzle_layout(s)
            T.annotate_layout({s: layout})
            T.copy(A, s)
            T.copy(s, B)

    A = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    B = np.zeros_like(A)
    tilers.compile(f, target="interp")(A, B)
    np.testing.assert_array_equal(A, B)


def test_mma_swizzle_layout_permutes_chunks_by_row():
    seen = {}

    @T.prim_func
    def f(A: T.Tensor((8, 32), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((8, 32), "float32")
            layout = make_mma_swizzle_layout(s)
            seen["fn"] = layout
            T.annotate_layout({s: layout})
            T.copy(A, s)
            T.copy(s, A)

    tilers.compile(f, target="interp")(np.zeros((8, 32), np.float32))
    layout = seen["fn"]
    # row 3, element 0 (chunk 0) lands in chunk 0 ^ 3 = 3 of its 128-byte row
    assert [int(x) for x in layout.map_forward_index([3, 0])] == [0, 3, 12]
    assert [int(x) for x in layout.map_forward_index([0, 5])] == [0, 0, 5]
