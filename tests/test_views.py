"""Views of a buffer's elements: ``T.Tensor(shape, dtype, buf.data)`` (TileLang's
convolution writes the kernel and the output through flat views), ``T.reshape`` and
``T.view`` (same dtype), and ``T.im2col``: a convolution against numpy on the interpreter
for several shapes (ragged tiles, strides, dilations, padding), every pass on the CPU model,
NVRTC, and misuse at the user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import TileError, testing


@tilers.jit
def convolution(data, kernel, S, D, P, block_M=64, block_N=32, block_K=32, num_stages=2, threads=128):
    N, C, H, W, F, K = T.const("N, C, H, W, F, K")
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1
    data: T.Tensor((N, H, W, C), T.float16)
    kernel: T.Tensor((K, K, C, F), T.float16)
    out = T.empty((N, OH, OW, F), T.float16)
    with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=threads) as (bx, by):
        data_shared = T.alloc_shared((block_M, block_K), T.float16)
        kernel_shared = T.alloc_shared((block_K, block_N), T.float16)
        out_local = T.alloc_fragment((block_M, block_N), T.float32)
        out_shared = T.alloc_shared((block_M, block_N), T.float16)
        kernel_flat = T.Tensor((K * K * C, F), T.float16, kernel.data)
        out_flat = T.Tensor((N * OH * OW, F), T.float16, out.data)
        T.clear(out_local)
        for k_iter in T.Pipelined(T.ceildiv(K * K * C, block_K), num_stages=num_stages):
            T.im2col(data, data_shared, by, k_iter, K, S, D, P)
            T.copy(kernel_flat[k_iter * block_K, bx * block_N], kernel_shared)
            T.gemm(data_shared, kernel_shared, out_local)
        T.copy(out_local, out_shared)
        T.copy(out_shared, out_flat[by * block_M, bx * block_N])
    return out


def conv_reference(a, b, S, P, D):
    a, b = a.astype(np.float64), b.astype(np.float64)
    N, H, W, C = a.shape
    K, F = b.shape[0], b.shape[3]
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1
    padded = np.zeros((N, H + 2 * P, W + 2 * P, C))
    padded[:, P:P + H, P:P + W, :] = a
    out = np.zeros((N, OH, OW, F))
    for kh in range(K):
        for kw in range(K):
            patch = padded[:, kh * D: kh * D + S * (OH - 1) + 1: S, kw * D: kw * D + S * (OW - 1) + 1: S, :]
            out += np.einsum("nhwc,cf->nhwf", patch, b[kh, kw])
    return out


CASES = [  # N, C, H, W, F, K, S, D, P
    (2, 16, 9, 7, 24, 3, 1, 1, 1),
    (1, 8, 10, 10, 16, 3, 2, 2, 2),
    (1, 32, 5, 6, 40, 1, 1, 1, 0),
    (3, 24, 4, 4, 8, 2, 1, 1, 0),
]


def conv_inputs(case, seed=0):
    N, C, H, W, F, K, S, D, P = case
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((N, H, W, C)).astype(np.float16)
    b = rng.standard_normal((K, K, C, F)).astype(np.float16)
    return a, b, S, D, P


@pytest.mark.parametrize("case", CASES)
def test_convolution_on_the_interpreter(case):
    a, b, S, D, P = conv_inputs(case)
    out = convolution(a, b, S, D, P)
    np.testing.assert_allclose(out.astype(np.float64), conv_reference(a, b, S, P, D), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_convolution_every_pass_agrees(arch):
    a, b, S, D, P = conv_inputs(CASES[0])
    testing.check_passes(convolution.compile(a, b, S, D, P), arch=arch, check=True)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_convolution_nvrtc(arch):
    @T.prim_func
    def f(data: T.Tensor((4, 16, 16, 32), "float16"), kernel: T.Tensor((3, 3, 32, 64), "float16"),
          out: T.Tensor((4, 16, 16, 64), "float16")):
        with T.Kernel(1, T.ceildiv(4 * 16 * 16, 64), threads=128) as (bx, by):
            data_shared = T.alloc_shared((64, 32), "float16")
            kernel_shared = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            kernel_flat = T.Tensor((3 * 3 * 32, 64), "float16", kernel.data)
            out_flat = T.Tensor((4 * 16 * 16, 64), "float16", out.data)
            T.clear(acc)
            for k in T.Pipelined(9, num_stages=2):
                T.im2col(data, data_shared, by, k, 3, 1, 1, 1)
                T.copy(kernel_flat[k * 32, 0], kernel_shared)
                T.gemm(data_shared, kernel_shared, acc)
            T.copy(acc, out_flat[by * 64, 0])

    assert len(tilers.compile(f, target=f"cuda:{arch}").cubin) > 0


def test_reshape_and_view_of_shared_and_local():
    @T.prim_func
    def f(A: T.Tensor((8, 16), "float32"), B: T.Tensor((128,), "float32"), C: T.Tensor((4, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((8, 16), "float32")
            T.copy(A, s)
            flat = T.reshape(s, (128,))
            rows = T.view(s, shape=[4, 32])
            T.copy(flat, B)
            for i, j in T.Parallel(4, 32):
                C[i, j] = rows[i, j] + flat[i * 32 + j]

    A = np.arange(128, dtype=np.float32).reshape(8, 16)
    B, C = np.zeros(128, np.float32), np.zeros((4, 32), np.float32)
    tilers.compile(f, target="interp")(A, B, C)
    np.testing.assert_array_equal(B, A.ravel())
    np.testing.assert_array_equal(C, 2 * A.reshape(4, 32))
    testing.check_passes(f, arch="sm_90a", check=True)


def test_writes_through_a_view_reach_the_root():
    @T.prim_func
    def f(A: T.Tensor((6, 10), "float32")):
        with T.Kernel(1, threads=32) as bx:
            flat = T.Tensor((60,), "float32", A.data)
            for i in T.Parallel(60):
                flat[i] = T.Cast("float32", i)
            T.fill(T.Tensor((3, 20), "float32", A.data)[1, 0:20], 7.0)

    A = np.zeros((6, 10), np.float32)
    tilers.compile(f, target="interp")(A)
    want = np.arange(60, dtype=np.float32)
    want[20:40] = 7
    np.testing.assert_array_equal(A.ravel(), want)


def retyped_view(M=64, N=64, K=64):
    """C = A @ B^T and D = 2 C, stored through a float32 view of B's dead float16 operand tile
    (TileLang's sparse MLA backward stages its dKV rows so): half the rows at a time."""

    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32"),
          D: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=True)
            half = T.view(B_s, shape=[N // 2, K], dtype="float32")
            for s in range(2):
                for i, j in T.Parallel(M // 2, N):
                    half[i, j] = acc[i + s * (M // 2), j]
                for i, j in T.Parallel(M // 2, N):
                    C[i + s * (M // 2), j] = half[i, j]
                    D[i + s * (M // 2), j] = half[i, j] * 2.0

    return f


def retyped_inputs(seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((64, 64)).astype(np.float16)
    B = rng.standard_normal((64, 64)).astype(np.float16)
    return A, B, A.astype(np.float32) @ B.astype(np.float32).T


def test_a_view_of_another_dtype_shares_its_tiles_bytes():
    A, B, ref = retyped_inputs()
    C, D = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32)
    tilers.compile(retyped_view(), target="interp")(A, B, C, D)
    np.testing.assert_allclose(C, ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(D, 2 * ref, rtol=1e-5, atol=1e-4)
    for arch in ("sm_90a", "sm_80"):
        testing.check_passes(retyped_view(), arch=arch, check=True)
    report = tilers.compile(retyped_view(), target="cuda:sm_90a").report()
    assert "B_s_as_float32: float32[32, 64], 8192 bytes at offset 8192, shares bytes with B_s" in report


def misuse(body):
    @T.prim_func
    def f(A: T.Tensor((8, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((8, 16), "float32")
            frag = T.alloc_fragment((8, 16), "float32")
            body(A, s, frag)

    return f


@pytest.mark.parametrize(
    "body,message",
    [
        (lambda A, s, frag: T.view(s, shape=[8, 16], dtype="float16"),
         r"\(512 bytes\) as \[8, 16\] float16 \(256 bytes\): a view of another dtype covers the tile's bytes exactly"),
        (lambda A, s, frag: T.reshape(s, (200,)), r"a view of shape \[200\] \(200 elements\) over 's' \[8, 16\] \(128 elements\)"),
        (lambda A, s, frag: T.reshape(frag, (128,)), r"a view of the fragment 'frag'"),
        (lambda A, s, frag: T.Tensor((128,), "float32", A), r"data must be a buffer's .data, got Buffer"),
        (lambda A, s, frag: T.Tensor((128,), "float16", A.data), r"a view of 'A' \(float32\) as float16"),
        (lambda A, s, frag: T.im2col(A, s, 0, 0, 3), r"parameter 'img': an NHWC tensor of 4 dimensions"),
    ],
)
def test_misuse_is_an_error_at_the_users_line(body, message):
    with pytest.raises(TileError, match=message) as err:
        tilers.compile(misuse(body), target="interp")
    assert "test_views.py" in str(err.value)
