"""Tensors over addresses a kernel reads (TileLang's `T.ptr` tables and `T.make_tensor`, a
grouped GEMM whose groups are separate tensors): the generated CUDA (a pointer set where the
kernel makes the tensor, accesses bounds-checked against its shape, no TMA), NVRTC for sm_80
and sm_90a, misuse at the user's line, and the interpreter's refusal (no device memory)."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError


def grouped_gemm(group_sizes=(16, 33, 64), K=128, N=96, block_M=32, block_N=32, block_K=32, stages=2):
    """C_g = A_g @ B_g for tensors A_g [max_M, K], B_g [K, N], C_g [max_M, N] given by address
    tables; the grid walks the groups' M tiles (the tile offsets of each group)."""
    groups = len(group_sizes)
    max_M = max(group_sizes)
    tiles = sum((m + block_M - 1) // block_M for m in group_sizes)

    @T.prim_func
    def kernel(A_ptrs: T.Tensor([groups], T.ptr), B_ptrs: T.Tensor([groups], T.ptr),
               C_ptrs: T.Tensor([groups], T.ptr), tile_offsets: T.Tensor([groups], T.int32)):
        with T.Kernel(tiles, T.ceildiv(N, block_N), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), "float16")
            B_shared = T.alloc_shared((block_K, block_N), "float16")
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            group = T.alloc_var(T.int32, init=0)
            first = T.alloc_var(T.int32, init=0)
            for g in range(groups):
                inside = bx >= tile_offsets[g]
                group = T.if_then_else(inside, g, group)
                first = T.if_then_else(inside, tile_offsets[g], first)
            m0 = (bx - first) * block_M
            A = T.make_tensor(A_ptrs[group], (max_M, K), T.float16)
            B = T.make_tensor(B_ptrs[group], (K, N), T.float16)
            C = T.make_tensor(C_ptrs[group], (max_M, N), T.float16)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[m0, k * block_K], A_shared)
                T.copy(B[k * block_K, by * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[m0, by * block_N])

    return kernel


def test_the_cuda_sets_a_pointer_and_takes_no_tensor_map():
    kernel = tilers.compile(grouped_gemm(), target="cuda:sm_90a")
    src = kernel.get_kernel_source()
    assert "tl_half* A = nullptr;" in src
    assert "A = (tl_half*)(" in src and "A_ptrs[" in src
    assert "tl_tensor_map" not in src.split("extern \"C\"")[1]  # its copies are cp.async
    assert [p["name"] for p in kernel.info["params"]] == ["A_ptrs", "B_ptrs", "C_ptrs", "tile_offsets"]
    report = kernel.report()
    assert "T.make_tensor over an address the kernel reads" in report


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvrtc_compiles_it(arch):
    assert len(tilers.compile(grouped_gemm(), target=f"cuda:{arch}").cubin) > 0


def test_the_interpreter_refuses_with_the_reason():
    kernel = tilers.compile(grouped_gemm(), target="interp")
    tables = [np.zeros(3, np.int64) for _ in range(3)]
    with pytest.raises(TileError, match="is a T.make_tensor over an address the kernel reads: it runs only on the GPU"):
        kernel(*tables, np.array([0, 1, 3], np.int32))


@pytest.mark.parametrize(
    "body,message",
    [
        (lambda P, x: T.make_tensor(x, (4, 4), T.float16), r"parameter 'ptr': expected a 64-bit address"),
        (lambda P, x: T.make_tensor(P[0], (4, 0), T.float16), r"parameter 'shape': each dimension is a positive"),
        (lambda P, x: T.make_tensor(P[0], (4, 4), T.float16, strides=(4, 1)), r"row-major tensors only"),
    ],
)
def test_misuse_is_an_error_at_the_users_line(body, message):
    @T.prim_func
    def f(P: T.Tensor([2], T.ptr), X: T.Tensor([2], T.int32)):
        with T.Kernel(1, threads=128) as bx:
            body(P, X[0])

    with pytest.raises(TileError, match=message) as err:
        tilers.compile(f, target="cuda:sm_90a")
    assert "test_make_tensor.py" in str(err.value)
