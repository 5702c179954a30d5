"""TileLang's current API on the CPU: the eager @tilers.jit (T.const, T.empty, body
annotations), dtype objects, pass_configs, the tooling names and the errors a porting user
meets. Kernels run on the interpreter against numpy; GPU code is compiled with NVRTC."""

import json
import warnings

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import eager
from tilers.errors import TileError

ELF_MAGIC = b"\x7fELF"


# ---------------------------------------------------------------------------------------
# kernels in the eager style (module level: the eager rewrite reads their source)


@tilers.jit
def eager_add(A, B, block_M=32, dtype=T.float32):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), dtype)
    B: T.Tensor((M, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        for i, j in T.Parallel(block_M, N):
            C[bx * block_M + i, j] = A[bx * block_M + i, j] + B[bx * block_M + i, j]
    return C


@tilers.jit
def eager_matmul(A, B, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32,
                 num_stages=2):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), dtype)
        B_s = T.alloc_shared((block_K, block_N), dtype)
        acc = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(acc)
        for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, ko * block_K], A_s)
            T.copy(B[ko * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * block_M, bx * block_N])
    return C


@tilers.jit
def eager_range_loop(A, block=64):
    (N,) = T.const(["N"])
    A: T.Tensor((N,), T.float32)
    S = T.empty((1,), T.float32)
    with T.Kernel(1, threads=32) as bx:
        acc = T.alloc_local((1,), T.float32)
        acc[0] = 0.0
        for k in range(N):  # a device loop (T.serial), not N traced copies
            acc[0] = acc[0] + A[k]
        S[0] = acc[0]
    return S


@tilers.jit
def eager_two_outputs(A, scale):
    M = T.const("M")
    A: T.Tensor((M,), T.float32)
    scale: T.float32  # a runtime scalar: one kernel for every value
    Y = T.empty((M,), T.float32)
    Z = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
        for i in T.Parallel(128):
            Y[bx * 128 + i] = A[bx * 128 + i] * scale
            Z[bx * 128 + i] = A[bx * 128 + i] + scale
    return Z, Y


@tilers.jit
def eager_in_place(X, block=128):
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        for i in T.Parallel(block):
            X[bx * block + i] = X[bx * block + i] * 2.0


@tilers.jit
def eager_dynamic(A):
    M = T.dynamic("M")
    A: T.Tensor((M, 64), T.float32)
    B = T.empty((M, 64), T.float32)
    with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
        for i, j in T.Parallel(32, 64):
            B[bx * 32 + i, j] = A[bx * 32 + i, j] * 3.0
    return B


@tilers.jit
def eager_header(A: T.Tensor((256,), T.float32), n: T.int32, block: int = 128):
    B = T.empty((256,), T.float32)
    with T.Kernel(T.ceildiv(256, block), threads=128) as bx:
        for i in T.Parallel(block):
            B[bx * block + i] = A[bx * block + i] + T.cast(n, "float32")
    return B


@tilers.jit
def factory_add(M, N, block_M):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, N):
                B[bx * block_M + i, j] = A[bx * block_M + i, j] + 1.0

    return main


def rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------
# the eager style


def test_the_rule_tells_eager_functions_from_factories():
    assert isinstance(eager_add, eager.EagerFunction)
    assert isinstance(factory_add, tilers.jit.__globals__["JitFunction"])
    assert not eager.is_eager(factory_add.factory)


@pytest.mark.parametrize("shape", [(100, 64), (32, 48), (1, 8), (257, 3)])
def test_eager_add_on_the_interpreter_binds_sizes_from_the_tensors(shape):
    a, b = rand(*shape), rand(*shape, seed=1)
    c = eager_add(a, b)
    assert isinstance(c, np.ndarray) and c.shape == shape
    np.testing.assert_array_equal(c, a + b)


def test_each_distinct_shape_and_config_compiles_once(compile_count):
    a, b = rand(64, 16), rand(64, 16, seed=1)
    for _ in range(3):
        eager_add(a, b)
    eager_add(a, b, 16)
    eager_add(a, b, block_M=16)
    eager_add(rand(65, 16), rand(65, 16))
    assert len(compile_count) == 3  # (64x16, 32), (64x16, 16), (65x16, 32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mnk", [(128, 64, 96), (100, 72, 40), (1, 8, 200)])
def test_eager_matmul_against_numpy(dtype, mnk):
    M, N, K = mnk
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    a, b = rand(M, K, dtype=dtype), rand(K, N, dtype=dtype, seed=1)
    c = eager_matmul(a, b, 64, 64, 32, dtype=T.dtype(np.dtype(dtype).name))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert c.dtype == np.dtype(dtype)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-2, atol=2e-2)


def test_compile_without_tensors_gives_a_kernel_that_nvrtc_compiles():
    kernel = eager_matmul.compile(M=512, N=256, K=128, block_M=128, block_N=128, block_K=32)
    assert isinstance(kernel, tilers.JITKernel)
    assert [p["name"] for p in kernel.info["params"]] == ["A", "B", "C"]
    assert kernel.out_idx == [2]
    assert kernel.cubin[:4] == ELF_MAGIC
    source = eager_matmul.get_kernel_source(M=512, N=256, K=128, block_M=128, block_N=128,
                                            block_K=32)
    assert source == kernel.source and "test_eager.py:" in source
    a, b = rand(512, 128, dtype="float16"), rand(128, 256, dtype="float16", seed=1)
    c = kernel(a, b)  # the kernel takes the runtime arguments and returns the output
    np.testing.assert_allclose(c.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64),
                               rtol=2e-2, atol=2e-2)


def test_range_inside_the_kernel_is_a_device_loop():
    kernel = eager_range_loop.compile(N=1000)
    body = json.dumps(json.loads(kernel.program_json)["kernel"]["body"])
    assert body.count('"op": "for"') == 1 and '"value": 1000' in body
    a = rand(1000)
    np.testing.assert_allclose(eager_range_loop(a)[0], a.sum(dtype=np.float64), rtol=1e-4)


def test_outputs_come_back_in_the_order_returned_and_scalars_are_runtime(compile_count):
    a = rand(300)
    z, y = eager_two_outputs(a, 2.0)
    np.testing.assert_allclose(y, a * 2.0, rtol=1e-6)
    np.testing.assert_allclose(z, a + 2.0, rtol=1e-6)
    z, y = eager_two_outputs(a, -0.5)
    np.testing.assert_allclose(y, a * -0.5, rtol=1e-6)
    assert len(compile_count) == 1  # the scalar's value is an argument, not a configuration


def test_an_eager_function_may_write_in_place_and_return_nothing():
    x = rand(300)
    expected = x * 2.0
    assert eager_in_place(x) is None
    np.testing.assert_array_equal(x, expected)


def test_dynamic_sizes_stay_symbolic(compile_count):
    for m in (1, 7, 100, 33):
        a = rand(m, 64)
        np.testing.assert_allclose(eager_dynamic(a), a * 3.0, rtol=1e-6)
    assert len(compile_count) == 1
    kernel = eager_dynamic.compile()
    assert kernel.sizes == ["M"]


def test_header_annotations_declare_parameters():
    a = rand(256)
    np.testing.assert_allclose(eager_header(a, 3), a + 3.0, rtol=1e-6)
    np.testing.assert_allclose(eager_header(a, 5, block=64), a + 5.0, rtol=1e-6)


def test_the_factory_style_and_the_articles_style_keep_working():
    kernel = factory_add(64, 32, 16)
    assert kernel is factory_add(64, 32, 16)
    a = rand(64, 32)
    b = np.zeros_like(a)
    kernel(a, b)
    np.testing.assert_array_equal(b, a + 1.0)
    compiled = tilers.compile(factory_add.prim_func(64, 32, 16))
    b2 = np.zeros_like(a)
    compiled(a, b2)
    np.testing.assert_array_equal(b2, a + 1.0)


# ---------------------------------------------------------------------------------------
# bad eager calls: the parameter, what it needs and what it got; nothing written


def test_a_wrong_dtype_names_the_parameter_and_both_dtypes():
    a = rand(64, 16)
    with pytest.raises(ValueError, match=r"eager_add: parameter 'B' expects dtype float32, got float16"):
        eager_add(a, rand(64, 16, dtype="float16"))


def test_tensors_that_disagree_on_a_size_name_it_and_write_nothing():
    x = rand(64, 16)
    before = x.copy()
    with pytest.raises(ValueError, match=r"parameter 'B': dimension 0 must be M = 64 \(from A.shape\[0\]\), got 63"):
        eager_add(x, rand(63, 16))
    with pytest.raises(ValueError, match=r"parameter 'B': dimension 1 must be N = 16"):
        eager_add(x, rand(64, 17))
    with pytest.raises(ValueError, match=r"expects a 2-D tensor \[M=64, N=16\], got shape \[64\]"):
        eager_add(x, rand(64))
    np.testing.assert_array_equal(x, before)


def test_an_empty_tensor_for_a_const_size_says_to_use_a_dynamic_one():
    with pytest.raises(TileError, match="parameter 'A': dimension 1 is 0; a T.const or fixed size must be positive"):
        eager_matmul(rand(64, 0, dtype="float16"), rand(0, 64, dtype="float16"), 64, 64, 32)


def test_a_non_tensor_for_a_tensor_parameter_is_named():
    with pytest.raises(TypeError, match=r"parameter 'B' expects a tensor \(float32\[M=4, N=4\]\), got list"):
        eager_add(rand(4, 4), [[1.0] * 4] * 4)


def test_out_idx_on_an_eager_function_says_why():
    def body(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)
        with T.Kernel(1) as bx:
            B[0] = A[0]
        return B

    with pytest.raises(TileError, match="allocates its outputs with T.empty and returns them"):
        tilers.jit(out_idx=[-1])(body)


def test_an_unreturned_output_is_named_at_its_line():
    @tilers.jit
    def forgets(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)
        with T.Kernel(1, threads=32) as bx:
            B[0] = A[0]

    with pytest.raises(TileError, match=r"output 'B' \(T.empty\) is not returned") as info:
        forgets(rand(8))
    assert "test_eager.py:" in str(info.value) and "B = T.empty" in str(info.value)


def test_returning_an_input_is_an_error():
    @tilers.jit
    def returns_input(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0
        return A

    with pytest.raises(TileError, match="returns parameter 'A'; it can return only the tensors it allocates"):
        returns_input(rand(8))


def test_a_const_that_no_tensor_has_is_an_error_at_its_line():
    @tilers.jit
    def unbound(A):
        N, K = T.const("N, K")
        A: T.Tensor((N * 2,), T.float32)
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    with pytest.raises(TileError, match="T.const size 'N' is not a dimension of any tensor parameter") as info:
        unbound(rand(8))
    assert "N, K = T.const" in str(info.value)


def test_an_unknown_keyword_names_the_sizes():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'Q' .*sizes: M, N"):
        eager_add(rand(4, 4), rand(4, 4), Q=3)


def test_const_and_empty_outside_an_eager_function_say_what_they_are():
    @T.prim_func
    def uses_const(A: T.Tensor((8,), "float32")):
        M = T.const("M")
        with T.Kernel(1) as bx:
            A[0] = M

    with pytest.raises(TileError, match="T.const declares the sizes of an eager"):
        tilers.compile(uses_const)

    @T.prim_func
    def uses_empty(A: T.Tensor((8,), "float32")):
        B = T.empty((8,), "float32")
        with T.Kernel(1) as bx:
            A[0] = 1.0

    with pytest.raises(TileError, match="T.empty declares an output of an eager"):
        tilers.compile(uses_empty)


def test_an_annotation_of_a_name_that_is_no_parameter_is_an_error():
    def body(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        X: T.Tensor((N,), T.float32)  # noqa: F842 - the mistake under test
        with T.Kernel(1) as bx:
            A[0] = 1.0

    with pytest.raises(TileError, match="declares a kernel tensor, but 'X' is not a parameter"):
        tilers.jit(body)


def test_a_free_name_nothing_binds_is_a_tile_error_naming_the_keyword():
    @T.prim_func
    def reads_block(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(block_M):  # noqa: F821 - unbound on purpose
                A[i] = 0.0

    with pytest.raises(TileError) as info:
        tilers.compile(reads_block)
    text = str(info.value)
    assert "name 'block_M' is not defined: the kernel reads it, but nothing binds it" in text
    assert "tilers.compile(reads_block, block_M=...)" in text
    assert "test_eager.py:" in text


# ---------------------------------------------------------------------------------------
# dtypes as objects


def test_dtype_objects():
    assert T.float16 == "float16" and T.float16.bits == 16 and T.float16.bytes == 2
    assert T.uint64.bits == 64 and T.uint16.bytes == 2 and T.bool.bytes == 1
    assert T.float is T.float32 and T.int is T.int32 and T.uint is T.uint32
    assert T.half == "float16" and T.double == "float64" and T.long == "int64"
    assert T.dtype("half") == "float16" and T.dtype(T.bfloat16) is T.bfloat16
    assert isinstance(T.dtype("float32"), T.dtype)
    assert T.dtype(np.dtype("int16")) == "int16"
    assert repr(T.float16) == "T.float16"


def test_float8_names_exist_and_using_one_says_so():
    assert T.float8_e4m3fn == "float8_e4m3fn"
    with pytest.raises(TileError, match="float8_e4m3fn is not supported by tilers yet"):
        T.dtype(T.float8_e4m3fn)

    @T.prim_func
    def fp8(A: T.Tensor((16,), T.float8_e5m2)):
        with T.Kernel(1) as bx:
            A[0] = 0

    with pytest.raises(TileError, match="float8_e5m2 is not supported by tilers yet"):
        tilers.compile(fp8)


# ---------------------------------------------------------------------------------------
# pass_configs


def test_pass_configs_that_act_change_the_compilation():
    key = tilers.PassConfigKey
    kernel = eager_matmul.compile(M=256, N=256, K=256, block_M=128, block_N=128, block_K=32)
    assert kernel.tma
    off = tilers.jit(pass_configs={key.TL_DISABLE_TMA_LOWER: True})(factory_add.factory)
    assert not off(64, 32, 16).tma
    no_ws = tilers.jit(pass_configs={"tl.disable_warp_specialized": True})(factory_add.factory)
    assert not no_ws(64, 32, 16).tma
    mma = tilers.compile(factory_add.prim_func(64, 32, 16), pass_configs={key.TL_DISABLE_WGMMA: True})
    assert not mma.wgmma
    fast = tilers.compile(factory_add.prim_func(64, 32, 16), pass_configs={key.TL_ENABLE_FAST_MATH: True})
    assert fast.fast_math and "fast_math" in fast.compile_options()
    lines = tilers.compile(factory_add.prim_func(64, 32, 16), pass_configs={key.TL_EMIT_LINE_DIRECTIVES: True})
    assert lines.lineinfo and "#line" in lines.source


def test_a_pass_config_without_effect_warns_once():
    from tilers import pass_config

    pass_config._warned.discard(pass_config.PassConfigKey.TL_DISABLE_SHUFFLE_ELECT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            tilers.compile(factory_add.prim_func(64, 32, 16), pass_configs={"tl.disable_shuffle_elect": True})
    assert len([w for w in caught if "tl.disable_shuffle_elect" in str(w.message)]) == 1


def test_every_tilelang_key_is_accepted_and_an_unknown_one_is_named():
    from tilers import pass_config

    assert set(pass_config.ACTING) | set(pass_config.IGNORED) == set(tilers.PassConfigKey)
    with pytest.raises(TileError, match=r"unknown key 'tl.disable_tma'.*did you mean tl.disable_tma_lower"):
        tilers.compile(factory_add.prim_func(64, 32, 16), pass_configs={"tl.disable_tma": True})
    with pytest.raises(TileError, match="must be a bool"):
        tilers.compile(factory_add.prim_func(64, 32, 16), pass_configs={"tl.disable_wgmma": "yes"})


# ---------------------------------------------------------------------------------------
# tooling names


def test_tooling_namespaces():
    assert tilers.cdiv(1000, 128) == 8 and tilers.next_power_of_2(1000) == 1024
    assert tilers.TensorSupplyType.Normal.supply_name == "normal"
    from tilers.autotuner import AutoTuner, set_autotune_inputs  # noqa: F401
    from tilers.layout import make_swizzled_layout  # noqa: F401
    from tilers.profiler import do_bench  # noqa: F401
    from tilers.testing import requires_cuda, set_random_seed, torch_assert_close  # noqa: F401
    from tilers.utils.tensor import TensorSupplyType, get_tensor_supply  # noqa: F401

    assert tilers.env.TILELANG_CACHE_DIR == tilers.cache.cache_dir()
    assert tilers.is_cache_enabled()
    tilers.disable_cache()
    assert not tilers.is_cache_enabled()
    tilers.enable_cache()
    assert tilers.is_cache_enabled()
    assert tilers.layout.Layout is T.Layout and tilers.layout.Fragment is T.Fragment
    with pytest.raises(TileError, match="tilers.layout.make_linear_layout is not supported yet"):
        tilers.layout.make_linear_layout((16, 16))


def test_autotuning_an_eager_function_with_its_parameters_given_compiles_that_config():
    tuned = tilers.autotune(configs=[{"block_M": 16}, {"block_M": 32}])(eager_add)
    kernel = tuned.compile(M=64, N=16, block_M=16)  # nothing to tune: no GPU needed
    assert isinstance(kernel, tilers.JITKernel)
    a, b = rand(64, 16), rand(64, 16, seed=1)
    np.testing.assert_array_equal(tuned(a, b, 32), a + b)


def test_a_scalar_for_a_tensor_parameter_is_named():
    with pytest.raises(TypeError, match=r"eager_add: parameter 'A' expects a tensor.*, got int 3"):
        eager_add(3, rand(4, 4))
