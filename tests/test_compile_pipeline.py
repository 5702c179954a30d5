"""Tests of tilers.compile and @tilers.jit through the Rust extension (no GPU needed)."""

import json
import os

import pytest
import tilers
import tilers.language as T
from tilers._trace import trace

THIS_FILE = os.path.abspath(__file__)
PACKAGE_DIR = os.path.dirname(os.path.abspath(tilers.__file__))

M = N = None
block_M = block_N = None


@T.prim_func
def add(
    A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float16")
):
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            C[by * block_M + i, bx * block_N + j] = (
                A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
            )


PARAMS = {"M": 1024, "N": 1000, "block_M": 32, "block_N": 128}


def test_compile_add():
    kernel = tilers.compile(add, out_idx=[-1], target="cuda:sm_80", **PARAMS)
    assert kernel.name == "add"
    assert kernel.arch == "sm_80"
    assert kernel.out_idx == [2]
    assert [p["name"] for p in kernel.info["params"]] == ["A", "B", "C"]
    assert kernel.info["params"][0]["shape"] == [1024, 1000]
    assert kernel.entry in kernel.source
    assert json.loads(kernel.program_json) == trace(add, PARAMS)


def test_compile_is_memoized():
    first = tilers.compile(add, out_idx=[2], target="cuda:sm_80", **PARAMS)
    again = tilers.compile(add, out_idx=[2], target="cuda:sm_80", **PARAMS)
    other = tilers.compile(add, out_idx=[2], target="cuda:sm_80", **dict(PARAMS, N=2048))
    assert first is again
    assert other is not first
    assert other.info["params"][0]["shape"] == [1024, 2048]


def test_jit_factory_is_memoized_per_arguments():
    @tilers.jit(out_idx=[1], target="cuda:sm_90a")
    def scale(n, block):
        @T.prim_func
        def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, block)) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] * 2.0

        return main

    kernel = scale(4096, 256)
    assert kernel is scale(4096, 256)
    assert kernel is not scale(8192, 256)
    assert kernel.arch == "sm_90a" and kernel.out_idx == [1]
    assert scale.compile(4096, 256, target="cuda:sm_80").arch == "sm_80"


def test_compile_error_names_the_user_line():
    @T.prim_func
    def racy(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8, 8), "float32")):
        with T.Kernel(1):
            for i, j in T.Parallel(8, 8):
                B[0, 0] = A[i, j]  # race

    with pytest.raises(tilers.TileError) as info:
        tilers.compile(racy, target="cuda:sm_80")
    message = str(info.value)
    assert os.path.basename(THIS_FILE) in message
    assert PACKAGE_DIR not in message
    assert info.value.__cause__ is None
