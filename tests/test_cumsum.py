"""T.cumsum(src, dst=None, dim=0, reverse=False): inclusive prefix sums of shared and fragment
tiles (TileLang's, as its gated-delta-net example uses it). On the interpreter against numpy,
through every pass of the CPU model, NVRTC for sm_90a, and misuse at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T


def scan_kernel(shape, scope, dim, reverse, separate, dtype="float32"):
    @T.prim_func
    def f(A: T.Tensor(shape, dtype), B: T.Tensor(shape, dtype)):
        with T.Kernel(1, threads=128) as bx:
            alloc = T.alloc_shared if scope == "shared" else T.alloc_fragment
            s = alloc(shape, dtype)
            T.copy(A, s)
            if separate:
                d = alloc(shape, dtype)
                T.cumsum(s, d, dim=dim, reverse=reverse)
                T.copy(d, B)
            else:
                T.cumsum(s, dim=dim, reverse=reverse)
                T.copy(s, B)

    return f


def numpy_scan(a, dim, reverse):
    a = a.astype(np.float64)
    return np.flip(np.cumsum(np.flip(a, dim), dim), dim) if reverse else np.cumsum(a, dim)


@pytest.mark.parametrize("shape,dim", [((64, 32), 1), ((64, 32), 0), ((128,), 0), ((16, 8), -1), ((4, 8, 16), 1)],
                         ids=str)
@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("separate", [False, True])
def test_against_numpy(shape, dim, scope, reverse, separate):
    a = np.random.default_rng(len(shape) + dim).standard_normal(shape).astype(np.float32)
    got = tilers.compile(scan_kernel(shape, scope, dim, reverse, separate), out_idx=[1], target="interp")(a)
    assert np.abs(np.asarray(got) - numpy_scan(a, dim, reverse)).max() < 1e-4


def test_integers():
    a = np.arange(64 * 32, dtype=np.int32).reshape(64, 32) % 7
    got = tilers.compile(scan_kernel((64, 32), "fragment", 1, False, True, "int32"), out_idx=[1], target="interp")(a)
    assert np.array_equal(np.asarray(got), np.cumsum(a, 1))


@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees_and_nvrtc_compiles(scope, arch):
    f = scan_kernel((64, 32), scope, 1, True, scope == "fragment")
    r = tilers.testing.check_passes(f, arch=arch)
    assert r.ok, r.failure_message()
    assert tilers.compile(f, out_idx=[1], target=f"cuda:{arch}").cubin[:4] == b"\x7fELF"


def misuse(kind):
    @T.prim_func
    def f(A: T.Tensor((64, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 32), "float32")
            t = T.alloc_shared((32, 64), "float32")
            T.copy(A, s)
            if kind == "region":
                T.cumsum(s[0:32, :], dim=1)
            elif kind == "global":
                T.cumsum(A, dim=1)
            elif kind == "dim":
                T.cumsum(s, dim=2)
            else:
                T.cumsum(s, t, dim=1)

    return f


@pytest.mark.parametrize("kind,match", [("region", "whole shared or fragment"), ("global", "whole shared or fragment"),
                                        ("dim", "not a dimension"), ("shape", "differs")])
def test_misuse(kind, match):
    with pytest.raises(tilers.TileError, match=match) as e:
        tilers.compile(misuse(kind), target="interp")
    assert "test_cumsum.py" in str(e.value)
