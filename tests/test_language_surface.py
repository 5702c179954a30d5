"""The public surface of ``tilers.language``: the DSL's names only, each with a docstring."""

import tilers.language as T

# The DSL, as users write it after `T.`. A new DSL name is added here on purpose; a helper
# that shows up here by accident (an import, a module-level function) should be `_private`.
DSL = {
    # dtypes
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "bfloat16", "float32", "float64", "dtype",
    # TileLang's dtype aliases
    "float", "int", "uint", "half", "double", "short", "long",
    # reserved for the quantized GEMM work (using one is an error)
    "float8_e4m3", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "tfloat32", "int4",
    "uint4",
    # the eager @tilers.jit
    "const", "empty",
    # explicit warp specialization (TileLang's expert controls)
    "ws", "WarpSpecialize", "alloc_barrier", "barrier_wait", "mbarrier_wait_parity",
    "barrier_arrive", "mbarrier_arrive", "mbarrier_expect_tx", "tma_copy", "set_max_nreg",
    "inc_max_nreg", "dec_max_nreg", "annotate_producer_reg_dealloc",
    "annotate_consumer_reg_alloc", "no_set_max_nreg", "disable_warp_group_reg_alloc",
    # TileLang's API, part 2
    "Var", "alloc_var", "get_thread_binding", "thread_binding", "Layout", "Fragment", "alloc_reducer", "reducer_init", "reducer_update", "finalize_reducer", "macro", "Cast", "Serial", "clamp", "floordiv",
    "floormod", "sync_threads", "loop_break", "AccessPtr", "access_ptr", "address_of", "ptx_cp_async", "call_extern", "import_source", "inline_ptx", "make_tensor", "ptr", "reshape", "view", "im2col", "shfl_sync", "shfl_xor", "shfl_down", "shfl_up", "tvm_warp_shuffle", "get_thread_extent", "get_block_binding", "get_lane_idx", "get_warp_idx", "get_warp_idx_sync", "get_warp_group_idx",
    "ptx_commit_group", "ptx_wait_group", "cp_async_barrier_noinc", "wgmma_gemm", "wait_wgmma", "fence_proxy_async", "reinterpret", "cumsum", "vectorized",
    "SharedBuffer", "FragmentBuffer", "LocalBuffer",
    # functions, parameters and the kernel
    "prim_func", "Tensor", "Buffer", "Kernel", "ClusterKernel", "cluster_sync", "cluster_arrive", "cluster_arrive_relaxed", "cluster_wait",
    "block_rank_in_cluster", "copy_cluster",
    # symbolic sizes
    "dynamic", "symbolic",
    # buffers and layouts
    "alloc_shared", "alloc_fragment", "alloc_local", "alloc_global",
    "annotate_layout", "make_swizzled_layout", "use_swizzle",
    # tile operations
    "copy", "fill", "clear", "gemm", "GemmWarpPolicy", "atomic_add", "atomic_addx2", "atomic_addx4",
    "atomic_max", "atomic_min",
    "reduce_max", "reduce_min", "reduce_sum", "reduce_absmax",
    # control flow
    "Parallel", "serial", "unroll", "Pipelined", "If", "Else",
    # scalar math
    "cast", "max", "min", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh",
    "sigmoid", "erf", "sin", "cos", "floor", "ceil", "if_then_else", "infinity", "ceildiv",
    # debugging
    "print", "device_assert",
}  # fmt: skip


def test_dir_shows_the_dsl_only():
    assert {name for name in dir(T) if not name.startswith("_")} == DSL


def test_all_is_the_dsl():
    assert len(T.__all__) == len(set(T.__all__))
    assert set(T.__all__) == DSL
    namespace = {}
    exec("from tilers.language import *", namespace)
    assert set(namespace) - {"__builtins__"} == DSL


def test_every_dsl_name_has_a_docstring_with_an_example():
    undocumented = [name for name in sorted(DSL) if not (getattr(T, name).__doc__ or "").strip()]
    assert undocumented == []
    # STYLE.md: a tiny example each, user code such as ``T.exp(x)``
    without_example = [name for name in sorted(DSL) if "T." not in getattr(T, name).__doc__]
    assert without_example == []
