"""A T.Parallel variable of extent 1 takes one value, so a write that does not use it is no
race (TileLang's layernorm bwd: `for i, j in T.Parallel(1, D): dgamma[j] += dy * x_hat[i,
j]`); the same write over an extent above 1 stays the race error at the line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing


def rows_summed(R=8, D=256, unit=1):
    @T.prim_func
    def kern(X: T.Tensor((R, unit, D), "float32"), G: T.Tensor((D,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            xs = T.alloc_shared((unit, D), "float32")
            acc = T.alloc_fragment((D,), "float32")
            T.clear(acc)
            for r in T.serial(R):
                T.copy(X[r, 0, 0], xs)
                for i, j in T.Parallel(unit, D):
                    acc[j] += xs[i, j] * 2.0
            T.copy(acc, G)

    return kern


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees(arch):
    testing.check_passes(rows_summed(), arch=arch, check=True)


def test_the_interpreter_agrees_with_numpy():
    x = np.random.default_rng(0).random((8, 1, 256), dtype=np.float32)
    got = np.asarray(tilers.compile(rows_summed(), out_idx=[1], target="interp")(x))
    assert np.abs(got - 2 * x[:, 0].sum(0)).max() < 1e-4


def test_an_extent_above_one_is_still_a_race():
    with pytest.raises(TileError, match="race: .* differ only in i .* 'acc'"):
        tilers.compile(rows_summed(unit=2), target="cuda:sm_90a")
