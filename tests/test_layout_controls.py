"""T.use_swizzle and T.annotate_layout / T.make_swizzled_layout: misuse is an error at the
user's line (results are checked in test_interp.py and on the GPU)."""

import os

import pytest
import tilers
import tilers.language as T
from tilers.errors import TileError

THIS_FILE = os.path.basename(__file__)


def compile_error(func) -> str:
    with pytest.raises(TileError) as info:
        tilers.compile(func, target="cuda:sm_90a")
    message = str(info.value)
    assert THIS_FILE in message, message
    return message


def test_use_swizzle_needs_a_2d_grid():
    @T.prim_func
    def main(A: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            T.use_swizzle(4)
            for i in T.Parallel(128):
                A[bx * 128 + i] = 1.0

    assert "2-D grid" in compile_error(main)


@pytest.mark.parametrize("args", [dict(panel_size=0), dict(panel_size=2.5), dict(order="diag")])
def test_use_swizzle_checks_its_arguments(args):
    @T.prim_func
    def main(A: T.Tensor((256, 256), "float32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            T.use_swizzle(**args)
            for i in T.Parallel(128):
                A[by * 128 + i, bx] = 1.0

    message = compile_error(main)
    assert "T.use_swizzle" in message


def test_use_swizzle_once():
    @T.prim_func
    def main(A: T.Tensor((256, 256), "float32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            T.use_swizzle(2)
            T.use_swizzle(4)
            for i in T.Parallel(128):
                A[by * 128 + i, bx] = 1.0

    assert "already set" in compile_error(main)


def annotated(shape, dtype, scope="shared", other=False, layout=True):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            s = (
                T.alloc_shared(shape, dtype)
                if scope == "shared"
                else T.alloc_fragment(shape, dtype)
            )
            t = T.alloc_shared(shape, dtype)
            if layout:
                T.annotate_layout({s: T.make_swizzled_layout(t if other else s)})
            else:
                T.annotate_layout({s: "swizzled"})
            T.copy(A[0:8, 0:6], s[0:8, 0:6])
            T.copy(s[0:8, 0:6], A[8:16, 0:6])

    return main


def test_annotate_layout_rejects_fragments():
    assert "only shared" in compile_error(annotated((64, 64), "float32", scope="fragment"))


def test_annotate_layout_rejects_tiles_of_partial_lines():
    # 6 x 4 bytes per row: not a multiple of 16
    message = compile_error(annotated((8, 6), "float32"))
    assert "cannot be swizzled" in message and "24-byte rows" in message


def test_annotate_layout_needs_the_buffers_own_layout():
    assert "made for" in compile_error(annotated((8, 32), "float32", other=True))


def test_annotate_layout_needs_a_layout_object():
    assert "T.make_swizzled_layout" in compile_error(annotated((8, 32), "float32", layout=False))


def test_an_annotated_tile_is_swizzled_and_round_trips_on_the_interpreter():
    import numpy as np

    k = tilers.compile(annotated((8, 32), "float32"))
    assert "swizzle<3,4,3>" in k.ir("input")
    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    want = a.copy()
    want[8:16, 0:6] = a[0:8, 0:6]
    k(a)
    assert (a == want).all()
