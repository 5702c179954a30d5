"""The catalogue of user mistakes: each is a diagnostic at the user's line, with a caret and help."""

import difflib
import inspect
import json
import os
import re
import sys
import textwrap

import numpy as np
import pytest
import tilers
import tilers.language as T
import tilers.report
from tilers.errors import TileError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

THIS_FILE = os.path.abspath(__file__)
TESTS_DIR = os.path.dirname(THIS_FILE)
ROOT = os.path.dirname(TESTS_DIR)
SNAPSHOTS = os.path.join(TESTS_DIR, "snapshots", "diagnostics")
DOCS = os.path.join(ROOT, "docs", "diagnostics.md")
BLESS = bool(os.environ.get("TILERS_BLESS"))

# Carets need the column positions of Python 3.11 (earlier versions show no caret, and no
# notes under a TypeError's message).
needs_columns = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="columns and exception notes need Python 3.11+"
)

# The line a diagnostic must point at ends with this comment.
MARK = "# <- mistake"

# name -> (function that makes the mistake, title, texts the message must also hold)
CATALOGUE: dict = {}


def mistake(title: str, *expected: str):
    """Register a function that makes one mistake (and raises its diagnostic)."""

    def register(func):
        CATALOGUE[func.__name__] = (func, title, expected)
        return func

    return register


# ----------------------------------------------------------------------------------------
# Python: tracing the kernel


@mistake("A traced value used as a Python bool (in a helper called from the kernel, `bool()`)", "T.If")
def traced_value_as_python_bool():
    def magnitude(x):
        return x if x > 0 else -x  # <- mistake

    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            A[0] = magnitude(A[0])

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A traced value converted with `int()`", "T.cast")
def traced_value_as_python_int():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(4, threads=128) as bx:
            A[int(bx) * 32] = 0.0  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`/` on integers", "//")
def true_division_of_integers():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "int32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(64):
                A[bx * 64 + i] = (bx * 64 + i) / 2  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A bit operation on floats", "T.cast")
def bit_operation_on_floats():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = A[i] << 1  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A store with the wrong number of indices", "'A' has 2 dimensions")
def store_with_wrong_number_of_indices():
    @T.prim_func
    def kernel(A: T.Tensor((128, 64), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = 0.0  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("An unknown dtype string in a parameter annotation", "float16")
def unknown_dtype_string():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "f16")):  # <- mistake
        with T.Kernel(1, threads=128):
            T.clear(A)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A buffer shape that is not made of Python ints", "tilers.compile")
def allocation_shape_not_constant():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), n: T.int32):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((n,), "float32")  # <- mistake
            T.copy(A[0:128], s)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("No `with T.Kernel(...)` block", "T.Kernel")
def kernel_missing():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):  # <- mistake
        pass

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A `T.Kernel` inside another", "T.Kernel inside another")
def kernel_nested():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            with T.Kernel(1, threads=128):  # <- mistake
                T.clear(A)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A tile statement outside `T.Kernel`", "T.Kernel")
def allocation_outside_kernel():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        s = T.alloc_shared((128,), "float32")  # <- mistake
        with T.Kernel(1, threads=128):
            T.copy(A, s)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.Else` that does not follow `T.If`", "T.If")
def else_without_if():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.clear(A)
            with T.Else():  # <- mistake
                T.clear(A)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.If` on a value that is not a comparison", "i < n")
def if_condition_not_bool():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), n: T.int32):
        with T.Kernel(1, threads=128):
            with T.If(n):  # <- mistake
                T.clear(A)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.if_then_else` on a value that is not a comparison", "x > 0")
def select_condition_not_bool():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = T.if_then_else(A[i], 1.0, 0.0)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A `T.Parallel` extent that is not a compile-time constant", "T.serial")
def parallel_extent_not_constant():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), n: T.int32):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(n):  # <- mistake
                A[i] = 0.0

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`num_stages` that is not a non-negative int", "num_stages")
def pipeline_stages_invalid():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for k in T.Pipelined(4, num_stages=-1):  # <- mistake
                A[k] = 0.0

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("Assigning to a slice", "T.fill")
def assignment_to_slice():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            A[0:64] = 0.0  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A whole buffer used as a value", "B[i, j]")
def buffer_used_as_value():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = B + 1.0  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.atomic_add` of a scalar on a region", "C[i, j]")
def atomic_add_on_region():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.atomic_add(A[0:4], 1.0)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A reduction over a dimension the tile does not have", "dim=2", "0 to 1")
def reduce_dim_out_of_range():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            row = T.alloc_fragment((64,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, row, dim=2)  # <- mistake
            T.copy(row, B)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A `T.gemm` operand that is a region, not a tile", "T.alloc_shared")
def gemm_operand_region():
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128):
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(B, B_s)
            T.gemm(A[0:64, 0:32], B_s, acc)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A `T.gemm` warp policy that does not exist", "FullRow")
def gemm_policy_unknown():
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.gemm(A_s, B_s, acc, policy="rows")  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("Calling a kernel with the wrong number of arguments", "takes 2", "A, B")
def call_with_wrong_argument_count():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.copy(A, B)

    compiled = tilers.compile(kernel, target="interp")
    compiled(np.zeros(128, "float32"))  # <- mistake


@mistake("A compile parameter the kernel does not use", "blok_M", "block_M")
def unknown_compile_parameter():
    block_M = 64

    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(128 // block_M, threads=128) as bx:
            for i in T.Parallel(block_M):
                A[bx * block_M + i] = 0.0

    tilers.compile(kernel, target="cuda:sm_90a", blok_M=32)  # <- mistake


@mistake("Calling the prim_func instead of the compiled kernel", "tilers.compile")
def prim_func_called():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.clear(A)

    kernel(np.zeros(128, "float32"))  # <- mistake


# ----------------------------------------------------------------------------------------
# the verifier: the launch, indices and scopes


@mistake("A grid with no blocks", "grid dimension is 0", "T.ceildiv")
def grid_of_zero_blocks():
    @T.prim_func
    def kernel(A: T.Tensor((100,), "float32")):
        with T.Kernel(100 // 128, threads=128) as bx:  # <- mistake
            for i in T.Parallel(128):
                with T.If(bx * 128 + i < 100):
                    A[bx * 128 + i] = 0.0

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A block shape with a zero", "threads must be a positive int or a tuple", "threads=(32, 4)")
def threads_not_a_block_shape():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=(32, 0)):  # <- mistake
            T.clear(A)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`threads` above the device limit", "threads=2048", "1024")
def threads_above_device_limit():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=2048):  # <- mistake
            T.clear(A)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A constant index out of range", "index 64", "extent 64")
def constant_index_out_of_range():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            for j in T.Parallel(64):
                A[64, j] = 0.0  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A loop variable used after its loop", "'k'")
def loop_variable_outside_loop():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for k in T.serial(4):
                A[k] = 0.0
            A[k + 4] = 1.0  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A gemm accumulator read by scalar code outside `T.Parallel`", "'acc'", "T.gemm spreads it")
def accumulator_read_outside_parallel():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
               C: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            a_s = T.alloc_shared((64, 64), "float16")
            b_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.gemm(a_s, b_s, acc, clear_accum=True)
            for k in T.serial(64):
                C[k] = acc[k, k]  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("Two iterations of a `T.Parallel` loop writing one element (a race)", "race", "only in j")
def parallel_race():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(64, 64):
                B[i] = A[i, j]  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A per-thread variable carried from one `T.Parallel` iteration to the next", "each thread's own",
         "'count'")
def local_carried_across_parallel_iterations():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), B: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=128):
            count = T.alloc_var("int32", init=0)
            for i in T.Parallel(128):
                count = count + T.if_then_else(A[i] > 0, 1, 0)  # <- mistake
            B[0] = count

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A local buffer's element read on another thread than the one that set it", "each thread's own",
         "loc[127]", "T.alloc_fragment")
def local_read_on_another_thread():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            loc = T.alloc_local((128,), "float32")
            for i in T.Parallel(128):
                loc[i] = A[i]
            for i in T.Parallel(128):
                B[i] = loc[127 - i]  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A grid larger than CUDA launches", "grid dimension 1 is 70000 blocks", "65535")
def grid_over_cuda_limit():
    @T.prim_func
    def kernel(A: T.Tensor((70000, 4), "float32")):
        with T.Kernel(4, 70000, threads=32) as (bx, by):  # <- mistake
            A[by, bx] = 1.0

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.Parallel` extents larger than the fragment they index", "128", "'x'")
def parallel_extent_exceeds_fragment():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32"), B: T.Tensor((128, 64), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            T.copy(A, x)
            for i, j in T.Parallel(128, 64):  # <- mistake
                B[i, j] = x[i, j]

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.Parallel` inside `T.Parallel`", "T.Parallel(M, N)")
def parallel_nested():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(64):
                for j in T.Parallel(64):  # <- mistake
                    A[i, j] = 0.0

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.copy` inside `T.Parallel`", "T.copy")
def copy_inside_parallel():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(64):
                T.copy(A[i, 0:64], B[i, 0:64])  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.reduce_*` inside `T.Parallel`", "T.reduce")
def reduce_inside_parallel():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            row = T.alloc_fragment((64,), "float32")
            T.copy(A, x)
            for i in T.Parallel(64):
                T.reduce_max(x, row, dim=1)  # <- mistake
            T.copy(row, B)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.gemm` inside `T.Parallel`", "T.gemm")
def gemm_inside_parallel():
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            for i in T.Parallel(2):
                T.gemm(A_s, B_s, acc)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


# ----------------------------------------------------------------------------------------
# the verifier: copies, reductions, gemm, atomics


@mistake("Copy between tiles of different shapes", "[64, 32]", "[32, 64]")
def copy_shapes_differ():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 32), "float32")
            f = T.alloc_fragment((32, 64), "float32")
            T.copy(A[0:64, 0:32], s)
            T.copy(s, f)  # <- mistake
            T.copy(f, A[0:32, 0:64])

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("Copy between tiles of different ranks", "different ranks", "[16, 8]")
def copy_ranks_differ():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), B: T.Tensor((16, 8), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((16, 8), "float32")
            T.copy(A[0], s)  # <- mistake
            T.copy(s, B)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A slice whose extent is not a compile-time constant", "A[i * 64:(i + 1) * 64]")
def slice_extent_not_constant():
    @T.prim_func
    def kernel(A: T.Tensor((128,), "float32"), n: T.int32):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64,), "float32")
            T.copy(A[0:n], s)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A region outside an on-chip tile", "[60, 76)", "'s'")
def region_outside_tile():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 64), "float32")
            T.copy(A[0:16, 0:16], s[60:76, 0:16])  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.copy` of a single element", "B[i, j] = A[i, j]")
def copy_of_one_element():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            T.copy(A[0, 0], B[0, 0])  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.copy` of a part of a fragment that moves", "'x'", "not fixed")
def copy_of_part_of_fragment():
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            T.clear(x)
            for k in T.serial(2):
                T.copy(x[k * 32:k * 32 + 32, :], A[k * 32:k * 32 + 32, :])  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A reduction of a global tensor", "shared tile")
def reduce_of_global_tensor():
    # (a shared tile is reduced through a fragment copy; a tensor in global memory is not)
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            row = T.alloc_fragment((64,), "float32")
            T.reduce_sum(A, row, dim=1)  # <- mistake
            T.copy(row, B)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A reduction into a tile of the wrong shape", "[64]", "[32]")
def reduce_output_shape_wrong():
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 32), "float32")
            row = T.alloc_fragment((32,), "float32")
            T.copy(A, x)
            T.reduce_max(x, row, dim=1)  # <- mistake
            T.copy(row, B)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.gemm` operand shapes that do not agree", "M=64", "K=32", "K=16", "N=64")
def gemm_shapes_disagree():
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), "float16"), B: T.Tensor((16, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((16, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A gemm dtype combination with no arithmetic", "float16 x float16 into int32")
def gemm_dtypes_without_arithmetic():
    # (float32 x float32 is no mistake: it runs on CUDA cores, tests/test_simt_gemm.py)
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "int32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A `T.gemm` operand in global memory", "'A'", "global")
def gemm_operand_in_global_memory():
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128):
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(B, B_s)
            T.gemm(A, B_s, acc)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A `T.gemm` accumulator in shared memory", "'acc'", "T.alloc_fragment")
def gemm_accumulator_shared():
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_shared((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.atomic_add` into a fragment", "'acc'", "fragment")
def atomic_add_into_fragment():
    @T.prim_func
    def kernel(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            acc = T.alloc_fragment((64,), "float32")
            T.clear(acc)
            for i in T.Parallel(64):
                T.atomic_add(acc[i], A[i])  # <- mistake
            T.copy(acc, A)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.atomic_add` of a dtype the hardware cannot add atomically", "int8")
def atomic_add_unsupported_dtype():
    @T.prim_func
    def kernel(A: T.Tensor((64,), "int8"), B: T.Tensor((1,), "int8")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(64):
                T.atomic_add(B[0], A[i])  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


# ----------------------------------------------------------------------------------------
# lowering: layouts, instructions, shared memory


@mistake(
    "A layout conflict",
    "layout conflict",
    "y[j, i]",
    "T.Parallel(64, 64)",
    "T.alloc_fragment((64, 64)",
    "threads (stride",
)
def layout_conflict():
    # (a read in another layout goes through shared memory; a write cannot)
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            y = T.alloc_fragment((64, 64), "float32")
            T.copy(A, x)
            T.copy(A, y)
            for i, j in T.Parallel(64, 64):
                y[j, i] = x[i, j]  # <- mistake
            T.copy(y, B)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.gemm` with K not a multiple of 16", "K=8", "16")
def gemm_k_not_multiple_of_16():
    @T.prim_func
    def kernel(A: T.Tensor((64, 8), "float16"), B: T.Tensor((8, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 8), "float16")
            B_s = T.alloc_shared((8, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A `T.gemm` tile the warps cannot divide", "4 warps", "16x16")
def gemm_tile_too_small_for_warps():
    @T.prim_func
    def kernel(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((16, 16), "float16")
            B_s = T.alloc_shared((16, 16), "float16")
            acc = T.alloc_fragment((16, 16), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake(
    "Shared memory over the device limit",
    "'s1' [256, 256] float32: 262144 bytes",
    "'s2' [64, 256] float32: 65536 bytes",
)
def shared_memory_over_limit():
    @T.prim_func
    def kernel(A: T.Tensor((256, 256), "float32")):
        with T.Kernel(1, threads=128):
            s1 = T.alloc_shared((256, 256), "float32")  # <- mistake
            s2 = T.alloc_shared((64, 256), "float32")
            T.copy(A, s1)
            T.copy(A[0:64, 0:256], s2)
            T.copy(s1, A)
            T.copy(s2, A[64:128, 0:256])

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("A fragment too large for the threads' registers", "'acc' holds 8192 of them", "over 2048")
def fragment_over_the_registers():
    @T.prim_func
    def kernel(A: T.Tensor((1024, 1024), "float32")):
        with T.Kernel(1, threads=128):
            acc = T.alloc_fragment((1024, 1024), "float32")  # <- mistake
            T.copy(A, acc)
            for i, j in T.Parallel(1024, 1024):
                acc[i, j] = acc[i, j] * 2.0
            T.copy(acc, A)

    tilers.compile(kernel, target="cuda:sm_90a")


@mistake("`T.copy` into a local buffer", "T.Parallel")
def copy_into_local_buffer():
    @T.prim_func
    def kernel(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=128):
            r = T.alloc_local((4,), "float32")
            T.copy(A, r)  # <- mistake

    tilers.compile(kernel, target="cuda:sm_90a")


# ----------------------------------------------------------------------------------------
# the checks


def marked_line(func) -> tuple[int, str]:
    """The line number and text of the line of ``func`` that ends with MARK."""
    lines, first = inspect.getsourcelines(func)
    for offset, text in enumerate(lines):
        if text.rstrip().endswith(MARK):
            return first + offset, text.strip()
    raise AssertionError(f"{func.__name__} has no line marked {MARK!r}")


def message_of(func) -> str:
    """What the user sees for the mistake: the error's message and its notes."""
    with pytest.raises((TileError, TypeError)) as info:
        func()
    return "\n".join([str(info.value), *getattr(info.value, "__notes__", [])])


def check_diagnostic(message: str, file: str, line: int, text: str) -> None:
    """The message names ``file:line``, shows ``text`` with a caret, helps, hides internals."""
    assert f"{os.path.basename(file)}:{line}:" in message, message
    assert text in message, message
    assert any(re.match(r"^[\s|]*\^", row) for row in message.splitlines()), message
    assert re.search(r"^\s*(= )?help: \S", message, re.MULTILINE), message
    public = message.replace(os.path.dirname(file), "")
    for internal in ("/tilers/", "site-packages", ".rs", "Traceback", "internal"):
        assert internal not in public, message


@needs_columns
@pytest.mark.parametrize("name", list(CATALOGUE))
def test_mistake(name):
    func, _, expected = CATALOGUE[name]
    message = message_of(func)
    line, text = marked_line(func)
    check_diagnostic(message, THIS_FILE, line, text)
    for fragment in expected:
        assert fragment in message, message


def test_catalogue_is_large():
    assert len(CATALOGUE) >= 25


# ----------------------------------------------------------------------------------------
# the same mistakes as stand-alone examples: the snapshots and docs/diagnostics.md


def example_source(func) -> tuple[str, int]:
    """The body of ``func`` as a module of its own without the MARK comment, and the line
    number of the marked line there."""
    lines = inspect.getsourcelines(func)[0]
    start = next(k for k, text in enumerate(lines) if text.startswith("def ")) + 1
    body = textwrap.dedent("".join(lines[start:]))
    header = "import tilers\nimport tilers.language as T\n\n\n"
    if "np." in body:
        header = "import numpy as np\n" + header
    marked = header.count("\n") + 1 + body[: body.index(MARK)].count("\n")
    return header + body.replace("  " + MARK, ""), marked


def run_example(func, directory: str) -> tuple[str, str]:
    """(source, message) of ``func``'s mistake run as ``example.py`` in ``directory``."""
    source, marked = example_source(func)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "example.py")
    with open(path, "w") as file:
        file.write(source)
    code = compile(source, path, "exec")
    message = message_of(lambda: exec(code, {"__name__": "example", "__file__": path}))
    check_diagnostic(message, path, marked, source.splitlines()[marked - 1].strip())
    return source, message.replace(directory + os.sep, "").rstrip() + "\n"


SNAPSHOT_CASES = [
    "traced_value_as_python_bool",
    "copy_shapes_differ",
    "gemm_shapes_disagree",
    "layout_conflict",
    "shared_memory_over_limit",
    "call_with_wrong_argument_count",
]


def compare_or_bless(path: str, text: str) -> None:
    if BLESS:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as file:
            file.write(text)
        return
    assert os.path.exists(path), f"{path} is missing; run with TILERS_BLESS=1 to write it"
    with open(path) as file:
        expected = file.read()
    if text != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), text.splitlines(), "expected", "now", lineterm=""
        )
        excerpt = "\n".join(list(diff)[:40])
        pytest.fail(f"{path} differs (TILERS_BLESS=1 rewrites it):\n{excerpt}")


@needs_columns
@pytest.mark.parametrize("name", SNAPSHOT_CASES)
def test_snapshot(name, tmp_path):
    _, message = run_example(CATALOGUE[name][0], str(tmp_path))
    compare_or_bless(os.path.join(SNAPSHOTS, f"{name}.txt"), message)


DOCS_INTRO = """\
# Diagnostics

Every mistake tilers catches is reported at the line of your kernel that makes it: the
file, line and column, the source line with a caret under the mistake, and one sentence of
what to do. This page lists them all. Each example is real: it is generated from
`tests/test_diagnostics.py`, which checks every message (`TILERS_BLESS=1 python -m pytest
tests/test_diagnostics.py` rewrites this page after a message changes).

Mistakes in Python (a traced value used as a Python value, a bad subscript) are found while
the kernel is traced and rendered as `file:line:col: error: ...`; the others are found by
the compiler (`verify` and the lowering passes) and rendered with the surrounding lines.
"""


DOCS_OUTRO = """\
## Looking at what the compiler did

A kernel that compiles can still be slower than it should be. These show what each step
made of it (`tests/test_diagnostics.py` tests them on the GEMM of `tests/kernels.py`):

- `print(kernel.report())`: per line of your kernel, what each tile op became
  (`mma.sync` and `ldmatrix` for `T.gemm`; `cp.async`, vector widths, or why not, for
  `T.copy`; pipeline stages; swizzled tiles), shared memory buffer by buffer, fragment
  layouts, and registers per thread once `kernel.cubin` has been built.
- `kernel.ir()` lists the passes; `kernel.ir("after:lower_tile_ops")` is the text IR after
  one. `TILERS_DUMP_IR=DIR` writes the IR after every pass to `DIR` (`00-input.tir`, ...).
- `print(kernel.layouts())`: which thread and register hold each element of a fragment
  (`index 0 = tid/4 % 8 + 8*(reg/2 % 2) + ...`), where each shared buffer lies.
- `kernel.plot_layout("acc", "acc.png")` draws it (`pip install 'tilers[plot]'`): a fragment
  as a grid of `thread:register`, a shared buffer as the bank of each element with its
  swizzle.
"""


@needs_columns
def test_docs_list_every_diagnostic(tmp_path):
    parts = [DOCS_INTRO]
    for number, (name, (func, title, _)) in enumerate(CATALOGUE.items(), start=1):
        source, message = run_example(func, str(tmp_path / name))
        parts.append(f"## {number}. {title}\n\n```python\n{source}```\n\n```text\n{message}```\n")
    parts.append(DOCS_OUTRO)
    compare_or_bless(DOCS, "\n".join(parts))


# ----------------------------------------------------------------------------------------
# what the compiler made of a kernel: kernel.report(), kernel.ir(), kernel.layouts(),
# kernel.plot_layout()


@pytest.fixture(scope="module")
def gemm():
    import kernels

    # the portable path (mma.sync, ldmatrix); tests/test_wgmma.py reports the sm_90a one
    return tilers.compile(kernels.matmul(256, 256, 256), target="cuda:sm_80")


def test_report_names_the_instructions_of_a_gemm(gemm):
    report = gemm.report()
    assert "mma.sync" in report
    assert "ldmatrix" in report
    assert "cp.async 16 bytes" in report
    assert "T.Pipelined(num_stages=3)" in report
    assert "A_shared: float16[3, 128, 32], 24576 bytes at offset 0, swizzle<3,4,3>" in report
    # the operand stages (49152 bytes); the epilogue's staging tile (32768 bytes) reuses
    # their memory once the main loop is done
    assert "shared memory (49152 bytes)" in report
    assert "acc_stage: float16[128, 128], 32768 bytes at offset 0" in report
    assert "staged through shared memory" in report
    assert "acc: fragment[128, 128] over 128 threads" in report
    # every report line of the compiler is there, under the user's line
    import inspect

    import kernels

    lines, first = inspect.getsourcelines(kernels.matmul)
    gemm_line = first + next(i for i, text in enumerate(lines) if "T.gemm(" in text)
    assert f"kernels.py:{gemm_line}" in report


def test_report_gives_registers_once_the_cubin_is_built(gemm):
    cubin = gemm.cubin  # NVRTC, no GPU needed
    resources = tilers.report.cubin_resources(cubin)
    assert 128 < resources["registers"] <= 255  # 128 accumulator registers per thread
    assert f"registers: {resources['registers']} per thread" in gemm.report()


def test_report_of_an_interpreter_kernel():
    import kernels

    kernel = tilers.compile(kernels.add(64, 64), target="interp")
    assert "interpreter" in kernel.report()


def test_ir_after_each_pass(gemm):
    from tilers import _tilers

    names = gemm.ir()
    assert names[0] == "input"
    passes = _tilers.pass_names()
    assert names[1:-2] == passes[:-2] and names[-2:] == ["simplify#2", "rasterize"]
    # tile ops before lowering, with the instructions select_instructions chose; instructions after
    chosen = gemm.ir("after:select_instructions")
    assert "by mma.m16n8k16.f32.f16.f16.f32 warps=2x2 a=ldmatrix b=ldmatrix" in chosen
    assert "by cp.async" in chosen and "by staged" in chosen
    assert "by " not in gemm.ir("after:infer_layouts")
    assert "ldmatrix.x4" not in gemm.ir("after:insert_syncs")
    assert "ldmatrix.x4" in gemm.ir("after:lower_tile_ops")
    assert "mma.m16n8k16.f32.f16.f16.f32 acc" in gemm.ir("after:lower_tile_ops")
    assert "fragment acc: float32[128, 128] layout(128 threads: " in gemm.ir("after:infer_layouts")
    assert "smem+24576" in gemm.ir("after:plan_shared_memory")
    with pytest.raises(ValueError, match="no pass named 'lower'.*lower_tile_ops"):
        gemm.ir("after:lower")


def test_ir_and_layouts_are_the_compiled_kernel(monkeypatch):
    """kernel.ir() / kernel.layouts() compile again with the kernel's own target and options
    (lineinfo here), check that the CUDA is the kernel's, and keep the per-pass IR only once
    ir() is asked for."""
    import kernels
    from tilers import _tilers

    calls = []
    compile_again = _tilers.inspect
    monkeypatch.setattr(
        _tilers, "inspect", lambda *args: calls.append(args) or compile_again(*args)
    )
    kernel = tilers.compile(kernels.add_tiles(64, 256), target="cuda:sm_80", lineinfo=True)
    assert kernel._ir_dumps is None and calls == []  # nothing kept for a kernel by default
    assert "fragment a: float16[32, 128]" in kernel.layouts()
    assert kernel._ir_dumps is None  # the layouts alone keep no IR
    assert json.loads(calls[-1][1]) == {"arch": "sm_80", "lineinfo": True, "fast_math": False}
    assert "line  // kernels.py:" in kernel.ir("after:lower_tile_ops")  # lineinfo's markers
    assert json.loads(calls[-1][1])["keep_ir"] is True and len(calls) == 2
    kernel.ir("input")
    kernel.layouts()
    assert len(calls) == 2  # memoized on the kernel
    plain = tilers.compile(kernels.add_tiles(64, 256), target="cuda:sm_80")
    assert "line kernels.py:" not in plain.ir("after:lower_tile_ops")


def test_ir_of_a_kernel_that_changed_is_refused(gemm):
    import copy

    kernel = copy.copy(gemm)
    kernel.source, kernel._ir_dumps, kernel._layouts = gemm.source + "// edited\n", None, None
    with pytest.raises(RuntimeError, match="compiling it again gave different CUDA"):
        kernel.ir()


def test_dump_ir_environment_variable_writes_every_pass(gemm, tmp_path, monkeypatch):
    from tilers import _tilers

    monkeypatch.setenv("TILERS_DUMP_IR", str(tmp_path))
    _tilers.compile(gemm.program_json, '{"arch": "sm_80"}')
    files = sorted(os.listdir(tmp_path))
    last = len(_tilers.pass_names())
    assert files[0] == "00-input.tir" and files[-1] == f"{last:02d}-rasterize.tir"
    assert len(files) == len(gemm.ir())
    index = _tilers.pass_names().index("lower_tile_ops") + 1
    lowered = (tmp_path / f"{index:02d}-lower_tile_ops.tir").read_text()
    assert lowered == gemm.ir("after:lower_tile_ops")


def test_layouts_as_text(gemm):
    text = gemm.layouts()
    assert "fragment acc: float32[128, 128] (kernels.py:" in text
    # the mma.sync accumulator: lanes in groups of four along columns, eight along rows
    assert "index 0 = tid/4 % 8 + 8*(reg/2 % 2)" in text
    assert "index 1 = reg % 2 + 2*(tid % 4)" in text
    assert "shared A_shared: float16[3, 128, 32]" in text and "c ^ (r % 8)" in text


def test_fragment_owners_follow_the_mma_fragment(gemm):
    from tilers import plot

    acc = next(
        b
        for b in gemm._layout_data()["buffers"]
        if b["name"] == "acc"
    )
    thread, slot = plot.fragment_owners(acc["layout"])
    # PTX ISA, m16n8 accumulator: c0, c1 at (lane / 4, 2 (lane % 4) + {0, 1}), c2, c3 eight
    # rows below; warp 0 holds the top-left 64x64 tile
    for lane in range(32):
        row, col = lane // 4, 2 * (lane % 4)
        assert thread[row, col] == lane and slot[row, col] == 0
        assert thread[row, col + 1] == lane and slot[row, col + 1] == 1
        assert thread[row + 8, col] == lane and slot[row + 8, col] == 2
    assert thread[64, 64] == 96  # warp 3
    assert len(set(zip(thread.ravel(), slot.ravel()))) == 128 * 128


def test_shared_banks_of_a_swizzled_tile():
    from tilers import plot

    tile = {"dtype": "float16", "shape": [64, 64], "offset": 0, "swizzle": None}
    lines = {"bits": 3, "base": 4, "shift": 3}  # tilers' swizzle: 128-byte lines
    # 128-byte rows: without the swizzle, one column lies in one bank (an 8-way conflict
    # for ldmatrix, which reads 16 bytes of 8 rows)
    assert set(plot.shared_banks(tile)[0:8, 0]) == {0}
    swizzled = plot.shared_banks(dict(tile, swizzle=lines))
    assert sorted(swizzled[0:8, 0] // 4) == list(range(8))
    # 64-byte rows count 128-byte lines: rows 0-7 still reach 8 distinct 16-byte bank groups
    short = plot.shared_banks({"dtype": "float16", "shape": [16, 32], "offset": 0, "swizzle": lines})
    assert sorted(short[0:8, 0] // 4) == list(range(8))


def test_plot_layout_writes_pictures(gemm, tmp_path):
    pytest.importorskip("matplotlib")
    for name in ("acc", "A_shared", "B_shared"):
        path = tmp_path / f"{name}.png"
        gemm.plot_layout(name, str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no shared or fragment buffer named 'C'.*acc"):
        gemm.plot_layout("C", str(tmp_path / "C.png"))


def test_plot_layout_labels_a_small_fragment(tmp_path):
    pytest.importorskip("matplotlib")

    @T.prim_func
    def small(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((16, 16), "float32")
            row = T.alloc_fragment((16,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, row, dim=1)
            T.copy(row, B)

    kernel = tilers.compile(small, target="cuda:sm_90a")
    for name in ("x", "row"):
        kernel.plot_layout(name, str(tmp_path / f"{name}.png"))
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert "replicated" in kernel.layouts()
