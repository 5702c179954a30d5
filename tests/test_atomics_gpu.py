"""The atomics of tests/test_atomics.py on the GPU against torch: tile `T.atomic_add` (split-K,
ragged shapes, fp16/bf16/fp32 destinations, vector atomics on sm_90), `T.atomic_max` /
`T.atomic_min` with NaN and signed zeros, every memory order, `return_prev=True`."""

import os
import sys

import numpy as np
import pytest
import tilers

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import test_atomics as ta  # noqa: E402
import tilers.language as T  # noqa: E402

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("M,N,K", [(70, 50, 64), (1, 33, 128), (257, 130, 256)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("order", [None, "release", "seq_cst"])
def test_split_k_matches_torch(M, N, K, dtype, order):
    k = ta.splitk(M, N, K, 4, dtype, memory_order=order)
    a = torch.randn(M, K, device="cuda", dtype=TORCH[dtype])
    b = torch.randn(K, N, device="cuda", dtype=TORCH[dtype])
    c = torch.zeros(M, N, device="cuda", dtype=torch.float32)
    tilers.compile(k)(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("M,N", [(64, 256), (37, 100), (5, 8)])
@pytest.mark.parametrize("source", ["shared", "fragment"])
def test_tile_add_ragged_matches_torch(dtype, M, N, source):
    k = ta.tile_add(M, N, dtype, source=source)
    x = torch.randn(M, N, device="cuda", dtype=TORCH[dtype])
    y = torch.randn(M, N, device="cuda", dtype=TORCH[dtype])
    expect = (y.float() + x.float()).to(TORCH[dtype]).float() + x.float()
    tilers.compile(k)(x, y)
    tol = 1e-6 if dtype == "float32" else 2e-2
    torch.testing.assert_close(y.float(), expect, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_many_blocks_add_into_one_tile(dtype):
    # 64 blocks add the same 16 x 64 tile: contention on every element
    @T.prim_func
    def k(X: T.Tensor((64, 16, 64), dtype), Y: T.Tensor((16, 64), "float32")):
        with T.Kernel(64, threads=128) as bx:
            t = T.alloc_fragment((16, 64), "float32")
            T.copy(X[bx, :, :], t)
            T.atomic_add(Y[0:16, 0:64], t)

    x = torch.randn(64, 16, 64, device="cuda", dtype=TORCH[dtype])
    y = torch.zeros(16, 64, device="cuda")
    tilers.compile(k)(x, y)
    torch.testing.assert_close(y, x.float().sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_float_max_min_against_the_documented_rule(op, dtype):
    # every thread of 8 blocks updates the same 8 elements: contention, order-independent result
    f = T.atomic_max if op == "max" else T.atomic_min
    n = 8

    @T.prim_func
    def k(X: T.Tensor((n,), dtype), V: T.Tensor((64, n), dtype)):
        with T.Kernel(8, threads=64) as bx:
            for r, i in T.Parallel(8, n):
                f(X[i], V[bx * 8 + r, i])

    nan = float("nan")
    v = torch.randn(64, n, device="cuda").to(TORCH[dtype])
    v[:, 0] = -torch.rand(64, device="cuda").to(TORCH[dtype]) - 1  # negatives only
    v[:, 1] = torch.tensor([0.0, -0.0] * 32)  # signed zeros
    v[:, 2] = nan  # NaNs only: the element stays
    v[::3, 3] = nan  # some NaNs: ignored
    x = torch.tensor([-10.0, 0.0, 3.0, nan, 0.5, -0.0, nan, 100.0], device="cuda").to(TORCH[dtype])
    host_x, host_v = x.double().cpu().numpy(), v.double().cpu().numpy()
    expect = host_x.copy()
    for row in host_v:
        expect = ta.float_rule(op, expect, row)
    tilers.compile(k)(x, v)
    got = x.double().cpu().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expect))
    keep = ~np.isnan(expect)
    np.testing.assert_array_equal(got[keep], expect[keep])
    np.testing.assert_array_equal(np.signbit(got[keep]), np.signbit(expect[keep]))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_max_min_match_torch(dtype):
    n = 64

    @T.prim_func
    def kern(V: T.Tensor((n,), dtype), hi: T.Tensor((1,), dtype), lo: T.Tensor((1,), dtype)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(n):
                T.atomic_max(hi[0], V[i])
                T.atomic_min(lo[0], V[i])

    tdt = {"int32": torch.int32, "int64": torch.int64}[dtype]
    v = torch.randint(-(10**6), 10**6, (n,), device="cuda", dtype=tdt)
    hi = torch.full((1,), torch.iinfo(tdt).min, device="cuda", dtype=tdt)
    lo = torch.full((1,), torch.iinfo(tdt).max, device="cuda", dtype=tdt)
    tilers.compile(kern)(v, hi, lo)
    assert hi.item() == v.max().item() and lo.item() == v.min().item()


@pytest.mark.parametrize("order", ta.ORDERS)
def test_return_prev_tickets_are_a_permutation(order):
    n = 1000

    @T.prim_func
    def k(counter: T.Tensor((1,), "int32"), seen: T.Tensor((n,), "int32"), base: T.Tensor((8,), "int32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(125):
                old = T.atomic_add(counter[0], 1, memory_order=order, return_prev=True)
                T.atomic_add(seen[old], 1)
            base[bx] = T.atomic_add(counter[0], 0, memory_order=order, return_prev=True) * 0 + 1

    counter = torch.zeros(1, device="cuda", dtype=torch.int32)
    seen = torch.zeros(n, device="cuda", dtype=torch.int32)
    base = torch.zeros(8, device="cuda", dtype=torch.int32)
    tilers.compile(k)(counter, seen, base)
    assert counter.item() == n
    assert bool((seen == 1).all())
    assert bool((base == 1).all())


def test_release_acquire_publish_a_block_result():
    # block 1 writes data, then releases a flag; block 0 spins with acquire on it and reads
    # the data: the orders make the data visible (both blocks resident: 2 blocks only)
    @T.prim_func
    def k(flag: T.Tensor((1,), "int32"), data: T.Tensor((128,), "float32"), out: T.Tensor((128,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            if bx == 1:
                for i in T.Parallel(128):
                    data[i] = i * 1.0 + 0.5
                T.sync_threads()
                T.atomic_add(flag[0], 1, memory_order="release")
            else:
                seen = T.alloc_var("int32", init=0)
                for _ in T.serial(1 << 20):
                    if seen == 0:
                        seen = T.atomic_add(flag[0], 0, memory_order="acquire", return_prev=True)
                for i in T.Parallel(128):
                    out[i] = data[i]

    flag = torch.zeros(1, device="cuda", dtype=torch.int32)
    data = torch.zeros(128, device="cuda")
    out = torch.zeros(128, device="cuda")
    tilers.compile(k)(flag, data, out)
    torch.cuda.synchronize()
    assert flag.item() == 1
    torch.testing.assert_close(out, torch.arange(128, device="cuda").float() + 0.5)
