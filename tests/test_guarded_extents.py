"""A T.Parallel loop wider than a buffer it indexes is fine where an `if i < c` keeps the
index inside (TileLang's sparse_mla_bwd stores half of a fragment's rows so): the
interpreter against numpy, every pass on the warp model, and the error without the guard."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing


def halves(guard=True, bound=32):
    @T.prim_func
    def split(A: T.Tensor((64, 64), "float32"), B: T.Tensor((2, 32, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((64, 64), "float32")
            half = T.alloc_shared((32, 64), "float32")
            T.copy(A, a)
            for s in range(2):
                for i, j in T.Parallel(64, 64):
                    if guard:
                        if i < bound:
                            half[i, j] = a[i, j] * (s + 1)
                    else:
                        half[i, j] = a[i, j]
                T.copy(half, B[s, :, :])

    return split


def test_a_guarded_store_runs_and_matches_numpy():
    A = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    k = tilers.compile(halves(), out_idx=[1], target="interp")
    out = np.asarray(k(A))
    for s in range(2):
        assert np.allclose(out[s], A[:32] * (s + 1))
    testing.check_passes(halves(), arch="sm_90a", check=True)
    testing.check_passes(halves(), arch="sm_80", check=True)


@pytest.mark.parametrize("kwargs", [{"guard": False}, {"bound": 33}])
def test_without_a_tight_guard_it_stays_an_error(kwargs):
    with pytest.raises(TileError, match="T.Parallel extent (64|33) of 'i' exceeds dimension 0 of 'half'"):
        tilers.compile(halves(**kwargs), target="cuda:sm_90a")
