"""T.reduce_* with a shared source or destination (TileLang allows them): reduced through
fragment copies; clear=False keeps the destination's values. The interpreter against numpy
and every pass on the warp model."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing


def reduce_kernel(kind, clear, src_scope, dst_scope, M=64, N=32):
    alloc = {"shared": T.alloc_shared, "fragment": T.alloc_fragment}

    @T.prim_func
    def reduced(A: T.Tensor((M, N), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = alloc[src_scope]((M, N), "float32")
            b = alloc[dst_scope]((M,), "float32")
            T.copy(A, a)
            T.fill(b, 0.5)
            getattr(T, f"reduce_{kind}")(a, b, dim=1, clear=clear)
            T.copy(b, B)

    return reduced


def want(kind, clear, A):
    r = A.sum(1) if kind == "sum" else A.max(1)
    if clear:
        return r
    return r + 0.5 if kind == "sum" else np.maximum(r, 0.5)


@pytest.mark.parametrize("scopes", [("shared", "shared"), ("fragment", "shared"), ("shared", "fragment")])
@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("kind", ["sum", "max"])
def test_shared_operands_reduce_like_fragments(kind, clear, scopes):
    A = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    f = reduce_kernel(kind, clear, *scopes)
    out = np.asarray(tilers.compile(f, out_idx=[1], target="interp")(A))
    assert np.abs(out - want(kind, clear, A)).max() < 1e-4
    testing.check_passes(reduce_kernel(kind, clear, *scopes), arch="sm_90a", check=True)
