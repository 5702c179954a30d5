"""A name bound to a value read from a buffer keeps that value, as TileLang's Let does:
`t = loc[0]; loc[0] = 7; out = t` reads the old element, and `a[0], a[1] = a[1], a[0]` swaps.
tilers copies such a value into a register variable only when the buffer is written before
the name's last use (nothing changes in the other kernels): the interpreter against numpy,
every pass on the CPU model, and the place of the copy in the IR."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import testing


def rebinding():
    @T.prim_func
    def f(A: T.Tensor((4,), "float32"), B: T.Tensor((6,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            loc = T.alloc_local((2,), "float32")
            s = T.alloc_shared((4,), "float32")
            T.copy(A, s)
            loc[0] = A[0]
            loc[1] = A[1]
            t = loc[0]
            u = loc[0] + loc[1]
            loc[0] = 7.0
            B[0] = t
            B[1] = u
            B[2] = loc[0]
            for k in T.serial(2):
                v = loc[1]
                loc[1] = v + 1.0
                B[3] = v
            w = s[2]  # a shared element, then the tile written by a tile op
            T.fill(s, 0.0)
            B[4] = w
            B[5] = s[2]

    return f


def swap():
    @T.prim_func
    def f(A: T.Tensor((3,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_local((3,), "float32")
            for i in T.serial(3):
                a[i] = A[i]
            a[0], a[1], a[2] = a[2], a[0], a[1]
            for i in T.serial(3):
                A[i] = a[i]

    return f


def test_a_bound_value_is_the_value_at_the_binding():
    A = np.array([1, 2, 3, 4], np.float32)
    B = np.zeros(6, np.float32)
    tilers.compile(rebinding(), target="interp")(A, B)
    np.testing.assert_array_equal(B, [1, 3, 7, 3, 3, 0])
    testing.check_passes(rebinding(), arch="sm_90a", check=True)


def test_a_tuple_assignment_reads_before_it_writes():
    A = np.array([1, 2, 3], np.float32)
    tilers.compile(swap(), target="interp")(A)
    np.testing.assert_array_equal(A, [3, 1, 2])
    testing.check_passes(swap(), arch="sm_80", check=True)


def test_the_copies_go_where_the_names_were_bound():
    ir = tilers.compile(rebinding(), target="cuda:sm_90a").ir("after:verify")
    # t and u are copied before loc[0] = 7; v inside the loop, before loc[1] is written; w
    # before the fill of the shared tile
    assert ir.index("t_value[0] =") < ir.index("loc[0] = 7.0")
    assert ir.index("u_value[0] =") < ir.index("loc[0] = 7.0")
    assert ir.index("for %k") < ir.index("v_value[0] =") < ir.index("loc[1] = add(loc[1]")
    assert ir.index("w_value[0] =") < ir.index("fill s")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_kernels_without_such_writes_are_unchanged(arch):
    @T.prim_func
    def f(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            loc = T.alloc_local((1,), "float32")
            loc[0] = A[0]
            t = loc[0] * 2.0
            B[0] = t

    src = tilers.compile(f, target=f"cuda:{arch}").get_kernel_source()
    assert "t_value" not in src
