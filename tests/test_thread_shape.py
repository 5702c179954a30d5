"""Block shapes as TileLang writes them: ``threads=(x, y[, z])`` with
``T.get_thread_binding(d)`` / ``T.thread_binding(0, n, thread="threadIdx.y")`` (CUDA's
numbering, x fastest), ``threads=n`` of part of a warp (whole warps launch; the user's
per-thread code runs on threads 0..n only), the warp and lane helpers, and misuse."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing


def coordinates(shape, blocks=2):
    """Out[block, z, y, x] = 10000 z + 100 y + x, written by the thread at (x, y, z)."""
    x, y, z = (tuple(shape) + (1, 1))[:3]
    n = x * y * z

    @T.prim_func
    def f(Out: T.Tensor((blocks, z, y, x), "int32")):
        with T.Kernel(blocks, threads=shape) as bx:
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1) if len(shape) > 1 else 0
            tz = T.get_thread_binding(2) if len(shape) > 2 else 0
            assert T.get_thread_extent(0) == x and T.get_thread_extent(2) == (z if len(shape) > 2 else 1)
            Out[bx, tz, ty, tx] = tz * 10000 + ty * 100 + tx

    want = np.zeros((blocks, z, y, x), np.int32)
    want[:] = (np.arange(z)[:, None, None] * 10000 + np.arange(y)[None, :, None] * 100
               + np.arange(x)[None, None, :])
    return f, want, n


@pytest.mark.parametrize("shape", [(32, 4), (8, 4, 2), (16, 32), (5,), (3, 7)])
def test_thread_coordinates_on_the_interpreter(shape):
    f, want, _ = coordinates(shape)
    out = np.full(want.shape, -1, np.int32)
    tilers.compile(f, target="interp")(out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("shape", [(32, 4), (5,), (3, 7)])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees(shape, arch):
    f, _, _ = coordinates(shape)
    testing.check_passes(f, arch=arch, check=True)


def test_the_launch_is_whole_warps_and_the_code_is_guarded():
    f, _, _ = coordinates((5,))
    k = tilers.compile(f, target="cuda:sm_90a")
    assert k.info["block"][0] == 32
    assert "if ((tid < 5))" in k.get_kernel_source()
    f, _, _ = coordinates((16, 32))
    k = tilers.compile(f, target="cuda:sm_90a")
    assert k.info["block"][0] == 512
    assert "(tid / 16)" in k.get_kernel_source()


def partial_warp_tiles(n=5):
    """Tile ops spread over the launched warp; the user's per-thread code (each thread its
    row of a shared tile) runs on its n threads only."""

    @T.prim_func
    def f(A: T.Tensor((n, 16), "float32"), B: T.Tensor((n, 16), "float32"), Cnt: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=n) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((n, 16), "float32")
            T.copy(A, s)
            for j in T.serial(16):
                s[tx, j] = s[tx, j] * 2.0 + T.Cast("float32", tx)
            T.atomic_add(Cnt[0], tx + 1)
            T.copy(s, B)

    return f


def test_partial_warp_per_thread_code():
    A = np.arange(80, dtype=np.float32).reshape(5, 16)
    B, cnt = np.zeros_like(A), np.zeros(1, np.int32)
    tilers.compile(partial_warp_tiles(), target="interp")(A, B, cnt)
    np.testing.assert_array_equal(B, A * 2 + np.arange(5)[:, None])
    assert cnt[0] == 15  # threads 0..4 each add tx + 1
    testing.check_passes(partial_warp_tiles(), arch="sm_90a", check=True)


def test_thread_binding_names_each_axis():
    @T.prim_func
    def f(Out: T.Tensor((4, 32), "int32")):
        with T.Kernel(1, threads=(32, 4)) as bx:
            kr = T.thread_binding(0, 32, thread="threadIdx.x")
            ni = T.thread_binding(0, 4, thread="threadIdx.y")
            Out[ni, kr] = ni * 1000 + kr + T.get_lane_idx() * 0 + T.get_warp_idx() * 0

    out = np.zeros((4, 32), np.int32)
    tilers.compile(f, target="interp")(out)
    np.testing.assert_array_equal(out, np.arange(4)[:, None] * 1000 + np.arange(32))


def test_warp_and_lane_helpers():
    @T.prim_func
    def f(Out: T.Tensor((256, 3), "int32")):
        with T.Kernel(1, threads=256) as bx:
            tx = T.get_thread_binding()
            Out[tx, 0] = T.get_lane_idx()
            Out[tx, 1] = T.get_warp_idx()
            Out[tx, 2] = T.get_warp_group_idx()

    out = np.zeros((256, 3), np.int32)
    tilers.compile(f, target="interp")(out)
    t = np.arange(256)
    np.testing.assert_array_equal(out, np.stack([t % 32, t // 32, t // 128], 1))


@pytest.mark.parametrize(
    "threads,body,message",
    [
        (128, lambda: T.get_thread_binding(1), r"the block has 1 thread dimension \(threads=128\)"),
        ((32, 4), lambda: T.get_thread_binding(2), r"the block has 2 thread dimensions \(threads=\(32, 4\)\)"),
        ((32, 4), lambda: T.thread_binding(0, 8, thread="threadIdx.y"), r"must span the block's threads along that dimension \(0 to 4\)"),
        (128, lambda: T.thread_binding(0, 4, thread="threadIdx.y"), r"the block is threads=128"),
        (128, lambda: T.thread_binding(0, 4, thread="blockIdx.x"), r"expected \"threadIdx.x\""),
    ],
)
def test_misuse_is_an_error_at_the_users_line(threads, body, message):
    @T.prim_func
    def f(Out: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=threads) as bx:
            body()

    with pytest.raises(TileError, match=message) as err:
        tilers.compile(f, target="interp")
    assert "test_thread_shape.py" in str(err.value)


@pytest.mark.parametrize("threads", [(32, 0), (32, 4, 2, 1), 0, (32.0, 4), True])
def test_bad_shapes_are_errors(threads):
    @T.prim_func
    def f(Out: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=threads) as bx:
            Out[0] = 1

    with pytest.raises(TileError, match=r"threads must be a positive int or a tuple of 1 to 3 positive ints") as err:
        tilers.compile(f, target="interp")
    assert "test_thread_shape.py" in str(err.value)
