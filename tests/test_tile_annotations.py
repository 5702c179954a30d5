"""T.SharedBuffer / T.FragmentBuffer / T.LocalBuffer: TileLang's annotations of a T.macro
helper's tile parameters (its sparse-attention examples write them); on a kernel parameter,
an error at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T


def test_a_macro_with_annotated_tiles():
    @T.macro
    def scale_rows(src: T.SharedBuffer([64, 32], "float32"), acc: T.FragmentBuffer([64, 32], "float32"),
                   factor: T.LocalBuffer[(1,), T.float32]):
        for i, j in T.Parallel(64, 32):
            acc[i, j] = src[i, j] * factor[0]

    @T.prim_func
    def f(A: T.Tensor((64, 32), "float32"), B: T.Tensor((64, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 32), "float32")
            acc = T.alloc_fragment((64, 32), "float32")
            two = T.alloc_local((1,), "float32")
            two[0] = 2.0
            T.copy(A, s)
            scale_rows(s, acc, two)
            T.copy(acc, B)

    a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    assert np.array_equal(np.asarray(tilers.compile(f, out_idx=[1], target="interp")(a)), a * 2)
    assert repr(T.SharedBuffer([4, 8], "float16")) == "T.SharedBuffer([4, 8], 'float16')"


def test_not_a_kernel_parameter():
    @T.prim_func
    def f(A: T.SharedBuffer([64], "float32")):
        with T.Kernel(1, threads=32) as bx:
            pass

    with pytest.raises(tilers.TileError, match="T.SharedBuffer annotates a T.macro") as e:
        tilers.compile(f, target="interp")
    assert "test_tile_annotations.py" in str(e.value)
