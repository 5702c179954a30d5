"""T.fence_proxy_async(): the kernel's own proxy fence (TileLang's), before a barrier it places
itself — emitted as `fence.proxy.async.shared::cta`, a no-op on the interpreter, kept through
every pass."""

import numpy as np
import pytest
import tilers
import tilers.language as T


def staged_copy():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((128,), "float32")
            T.copy(A, s)
            T.fence_proxy_async()
            T.sync_threads()
            T.copy(s, B)

    return f


def test_runs_and_is_emitted():
    a = np.arange(128, dtype=np.float32)
    assert np.array_equal(tilers.compile(staged_copy(), out_idx=[1], target="interp")(a), a)
    k = tilers.compile(staged_copy(), out_idx=[1], target="sm_90a")
    assert "fence.proxy.async.shared::cta" in k.get_kernel_source()
    assert k.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_pass_agrees(arch):
    r = tilers.testing.check_passes(staged_copy(), arch=arch)
    assert r.ok, r.failure_message()


def test_outside_a_kernel_is_an_error():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        T.fence_proxy_async()

    with pytest.raises(tilers.TileError, match="fence_proxy_async") as e:
        tilers.compile(f, target="interp")
    assert "test_fence_proxy.py" in str(e.value)
