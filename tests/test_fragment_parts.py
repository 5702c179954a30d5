"""T.copy of a fixed part of a fragment, as TileLang's kernels write it
(``T.copy(acc_o[:valid_block_H, :], O_shared)``): the copy runs over the whole fragment in
its layout (the gemm's accumulator layout, or any other), the elements outside the part
skipped; into a part too. Interpreter against numpy, pass by pass on the warp model for
sm_80 and sm_90a, NVRTC; a part whose position moves is an error at the line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers.errors import TileError

M, N, K, V = 64, 64, 32, 40


def out_of_gemm(mode):
    """acc = A @ B; rows 0..V (or 8..8 + V) of it stored through shared memory or directly."""

    @T.prim_func
    def part(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((V, N), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            O_s = T.alloc_shared((V, N), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            if mode == "shared":
                T.copy(acc[:V, :], O_s)
                T.copy(O_s, C)
            elif mode == "global":
                T.copy(acc[:V, :], C)
            else:
                T.copy(acc[8:8 + V, :], C)

    return part


@T.prim_func
def into_a_part(A: T.Tensor((V, N), "float32"), C: T.Tensor((M, N), "float32")):
    with T.Kernel(1, threads=128) as bx:
        acc = T.alloc_fragment((M, N), "float32")
        T.fill(acc, 1.0)
        T.copy(A, acc[8:8 + V, :])
        T.copy(acc, C)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("mode", ["shared", "global", "offset"])
def test_a_part_of_an_accumulator(mode, arch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype("float16")
    b = rng.standard_normal((K, N)).astype("float16")
    full = a.astype(np.float64) @ b.astype(np.float64)
    want = full[8:8 + V] if mode == "offset" else full[:V]
    k = tilers.compile(out_of_gemm(mode), out_idx=[2], target=f"cuda:{arch}")
    assert k.cubin[:4] == b"\x7fELF"
    np.testing.assert_allclose(k(a, b).astype(np.float64), want, rtol=1e-2, atol=5e-2)
    result = tilers.testing.check_passes(out_of_gemm(mode), arch=arch)
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_into_a_part(arch):
    a = np.random.default_rng(1).standard_normal((V, N)).astype("float32")
    want = np.ones((M, N))
    want[8:8 + V] = a
    k = tilers.compile(into_a_part, out_idx=[1], target=f"cuda:{arch}")
    np.testing.assert_array_equal(k(a), want)
    assert tilers.testing.check_passes(into_a_part, arch=arch).ok


def test_a_part_that_moves_is_an_error_at_the_line():
    @T.prim_func
    def moving(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            T.clear(x)
            for k in T.serial(2):
                T.copy(x[k * 32:k * 32 + 32, :], A[k * 32:k * 32 + 32, :])  # the line

    with pytest.raises(TileError, match="at a position that is not fixed") as e:
        tilers.compile(moving, target="cuda:sm_90a")
    assert "the line" in str(e.value)
