"""The test kernels: factories used by the CPU compile tests, the GPU tests and the benchmarks.

Each entry of KERNELS builds one prim_func for given sizes; ``reference`` computes the
expected outputs with torch (GPU tests) from the same inputs.
"""

import math

import tilers.language as T


def add(M, N, dtype="float16", block_M=32, block_N=128, threads=128):
    @T.prim_func
    def add(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = (
                    A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
                )

    return add


def add_tiles(M, N, dtype="float16", block_M=32, block_N=128, threads=128):
    """The same add written with T.copy through fragments (ragged edges padded and dropped)."""

    @T.prim_func
    def add_tiles(
        A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            a = T.alloc_fragment((block_M, block_N), dtype)
            b = T.alloc_fragment((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], a)
            T.copy(B[by * block_M, bx * block_N], b)
            for i, j in T.Parallel(block_M, block_N):
                a[i, j] = a[i, j] + b[i, j]
            T.copy(a, C[by * block_M, bx * block_N])

    return add_tiles


def bias_gelu(M, N, dtype="bfloat16", block_M=16, block_N=256, threads=128):
    """Y = gelu(X + bias), exact (erf) GELU computed in float32."""
    inv_sqrt2 = 1.0 / math.sqrt(2.0)

    @T.prim_func
    def bias_gelu(
        X: T.Tensor((M, N), dtype), bias: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                x = T.cast(X[by * block_M + i, bx * block_N + j], "float32") + T.cast(
                    bias[bx * block_N + j], "float32"
                )
                Y[by * block_M + i, bx * block_N + j] = T.cast(
                    0.5 * x * (1.0 + T.erf(x * inv_sqrt2)), dtype
                )

    return bias_gelu


def softmax(M, N, block_M=4, tile_N=None, threads=128, dtype="float32"):
    """Row softmax; each block takes block_M whole rows. A tile wider than the row is padded
    with -inf, which exp() turns into 0."""
    tile_N = tile_N or N

    @T.prim_func
    def softmax(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, tile_N), "float32")
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            T.copy(A[bx * block_M, 0], x, pad=-T.infinity("float32"))
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, tile_N):
                x[i, j] = T.exp(x[i, j] - row_max[i])
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_M, tile_N):
                x[i, j] *= 1.0 / row_sum[i]
            T.copy(x, B[bx * block_M, 0])

    return softmax


def transpose(M, N, dtype="float32", block=32, threads=128):
    """B = A^T, staged through shared memory so both global sides are coalesced."""

    @T.prim_func
    def transpose(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=threads) as (bx, by):
            tile = T.alloc_shared((block, block), dtype)
            T.copy(A[by * block, bx * block], tile)
            for i, j in T.Parallel(block, block):
                B[bx * block + i, by * block + j] = tile[j, i]

    return transpose


def row_sum(M, N, dtype="float32", block_M=8, block_N=256, threads=128):
    """S[i] = sum_j A[i, j], walking the row in tiles."""

    @T.prim_func
    def row_sum(A: T.Tensor((M, N), dtype), S: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, block_N), "float32")
            acc = T.alloc_fragment((block_M,), "float32")
            T.clear(acc)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(A[bx * block_M, k * block_N], x)
                T.reduce_sum(x, acc, dim=1, clear=False)
            T.copy(acc, S[bx * block_M])

    return row_sum


def col_absmax(M, N, dtype="float16", block_M=64, block_N=64, threads=128):
    """C[j] = max_i |A[i, j]| per block of columns (a reduction over dim 0, with atomics-free tiles)."""

    @T.prim_func
    def col_absmax(A: T.Tensor((M, N), dtype), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            x = T.alloc_fragment((block_M, block_N), "float32")
            acc = T.alloc_fragment((block_N,), "float32")
            T.clear(acc)
            for k in T.serial(T.ceildiv(M, block_M)):
                T.copy(A[k * block_M, bx * block_N], x)
                T.reduce_absmax(x, acc, dim=0, clear=False)
            T.copy(acc, C[bx * block_N])

    return col_absmax


def scale_shift(M, N, dtype="float32", block=256, threads=128):
    """Y = alpha * X + beta with scalar parameters, over a flattened view; rows beyond `rows` untouched."""

    @T.prim_func
    def scale_shift(
        X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype), alpha: T.float32, rows: T.int32
    ):
        with T.Kernel(T.ceildiv(N, block), rows, threads=threads) as (bx, by):
            for j in T.Parallel(block):
                Y[by, bx * block + j] = T.cast(
                    alpha * T.cast(X[by, bx * block + j], "float32") + 1.0, dtype
                )

    return scale_shift


def histogram(N, bins=64, block=256, threads=128):
    """H[x % bins] += 1 with atomics (integers)."""

    @T.prim_func
    def histogram(X: T.Tensor((N,), "int32"), H: T.Tensor((bins,), "int32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                with T.If(bx * block + i < N):
                    T.atomic_add(H[X[bx * block + i] % bins], 1)

    return histogram


def clamp_int8(M, N, block_M=16, block_N=128, threads=128):
    """Q = saturate_int8(round(X * 127)) and a uint8 mask of positives: float->int saturation."""

    @T.prim_func
    def clamp_int8(
        X: T.Tensor((M, N), "float32"), Q: T.Tensor((M, N), "int8"), P: T.Tensor((M, N), "uint8")
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                v = X[by * block_M + i, bx * block_N + j]
                Q[by * block_M + i, bx * block_N + j] = T.cast(T.floor(v * 127.0 + 0.5), "int8")
                P[by * block_M + i, bx * block_N + j] = T.cast(
                    T.if_then_else(v > 0.0, 1, 0), "uint8"
                )

    return clamp_int8


MATH_FUNCS = [
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "sin",
    "cos",
    "abs",
]


def math_zoo(N, dtype="float32", block=256, threads=128):
    """Y[k, i] = f_k(X[i]) for every unary math function, plus max/min against 0.5."""
    funcs = [getattr(T, name) for name in MATH_FUNCS]

    @T.prim_func
    def math_zoo(X: T.Tensor((N,), dtype), Y: T.Tensor((len(funcs) + 2, N), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                x = X[bx * block + i]
                for k, f in enumerate(funcs):  # unrolled at trace time
                    Y[k, bx * block + i] = f(x)
                Y[len(funcs), bx * block + i] = T.max(x, 0.5)
                Y[len(funcs) + 1, bx * block + i] = T.min(x, 0.5)

    return math_zoo


def head_slices(B, S, H, D, block_S=64, dtype="float16", threads=128):
    """O[b, s, h, :] = 2 * Q[b, s, h, :] - rowmin, moving [block_S, D] slices of a 4-D tensor
    (index and slice dimensions mixed, as attention kernels do)."""

    @T.prim_func
    def head_slices(Q: T.Tensor((B, S, H, D), dtype), O: T.Tensor((B, S, H, D), dtype)):
        with T.Kernel(T.ceildiv(S, block_S), H, B, threads=threads) as (bx, by, bz):
            q = T.alloc_fragment((block_S, D), "float32")
            low = T.alloc_fragment((block_S,), "float32")
            T.copy(Q[bz, bx * block_S : (bx + 1) * block_S, by, :], q)
            T.reduce_min(q, low, dim=1)
            for i, j in T.Parallel(block_S, D):
                q[i, j] = 2.0 * q[i, j] - low[i]
            T.copy(q, O[bz, bx * block_S : (bx + 1) * block_S, by, :])

    return head_slices


def matmul(
    M,
    N,
    K,
    block_M=128,
    block_N=128,
    block_K=32,
    num_stages=3,
    threads=128,
    dtype="float16",
    accum_dtype="float32",
    trans_A=False,
    trans_B=False,
    policy=T.GemmWarpPolicy.Square,
    panel=0,
):
    """C = A @ B (A stored K x M when trans_A, B stored N x K when trans_B), the articles'
    GEMM shape: operand tiles in shared memory, accumulator fragment, pipelined K loop
    (blocks rasterized in panels of `panel` rows for L2 reuse when it is not 0)."""
    a_shape = (K, M) if trans_A else (M, K)
    b_shape = (N, K) if trans_B else (K, N)
    a_tile = (block_K, block_M) if trans_A else (block_M, block_K)
    b_tile = (block_N, block_K) if trans_B else (block_K, block_N)
    out_dtype = "int32" if dtype == "int8" else dtype

    @T.prim_func
    def matmul(
        A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), out_dtype)
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            T.use_swizzle(max(panel, 1), enable=panel > 0)
            A_shared = T.alloc_shared(a_tile, dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            acc = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if trans_A:
                    T.copy(A[ko * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, ko * block_K], A_shared)
                if trans_B:
                    T.copy(B[bx * block_N, ko * block_K], B_shared)
                else:
                    T.copy(B[ko * block_K, bx * block_N], B_shared)
                T.gemm(
                    A_shared, B_shared, acc, transpose_A=trans_A, transpose_B=trans_B, policy=policy
                )
            T.copy(acc, C[by * block_M, bx * block_N])

    return matmul


def matmul_rasterized(
    M, N, K, panel=3, order="row", block_M=64, block_N=64, block_K=32, dtype="float16"
):
    """C = A @ B in float32 with the user controls of layout and block order:
    T.use_swizzle(panel, order) and a float32 staging tile swizzled by T.annotate_layout."""

    @T.prim_func
    def matmul_rasterized(
        A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            T.use_swizzle(panel, order=order)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_s = T.alloc_shared((block_M, block_N), "float32")
            T.annotate_layout({C_s: T.make_swizzled_layout(C_s)})
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, ko * block_K], A_s)
                T.copy(B[ko * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C_s)
            T.copy(C_s, C[by * block_M, bx * block_N])

    return matmul_rasterized


def article_matmul(M, N, K, block_M=128, block_N=128, block_K=32):
    """The first article's GEMM (§4.2) as written: operand tiles declared as fragments inside
    the pipelined loop, the accumulator never cleared."""

    @T.prim_func
    def matmul_kernel(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float16"),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
            acc = T.alloc_fragment((block_M, block_N), "float32")
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                a_tile = T.alloc_fragment((block_M, block_K), "float16")
                b_tile = T.alloc_fragment((block_K, block_N), "float16")
                T.copy(A[by * block_M, ko * block_K], a_tile)
                T.copy(B[ko * block_K, bx * block_N], b_tile)
                T.gemm(a_tile, b_tile, acc)
            T.copy(acc, C[by * block_M, bx * block_N])

    return matmul_kernel


def matmul_reg_a(
    M,
    N,
    K,
    block_M=64,
    block_N=64,
    block_K=32,
    num_stages=2,
    threads=128,
    dtype="float16",
    accum_dtype="float32",
):
    """C = (2 A) @ B with the scaled A tile computed element by element into registers and fed
    to T.gemm from there (the A operand in registers)."""
    out_dtype = "int32" if dtype == "int8" else dtype

    @T.prim_func
    def matmul_reg_a(
        A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out_dtype)
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            A_frag = T.alloc_fragment((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[ko * block_K, bx * block_N], B_shared)
                for i, k in T.Parallel(block_M, block_K):
                    A_frag[i, k] = A_shared[i, k] * 2
                T.gemm(A_frag, B_shared, acc)
            T.copy(acc, C[by * block_M, bx * block_N])

    return matmul_reg_a


def matmul_reg_b(
    M,
    N,
    K,
    block_M=64,
    block_N=64,
    block_K=32,
    num_stages=2,
    threads=128,
    dtype="float16",
    accum_dtype="float32",
    a_in_registers=False,
):
    """C = A @ (2 B) with the scaled B tile (and, optionally, A) computed element by element
    into registers and fed to T.gemm from there."""
    out_dtype = "int32" if dtype == "int8" else dtype

    @T.prim_func
    def matmul_reg_b(
        A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out_dtype)
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            A_frag = T.alloc_fragment((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            B_frag = T.alloc_fragment((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[ko * block_K, bx * block_N], B_shared)
                for k, j in T.Parallel(block_K, block_N):
                    B_frag[k, j] = B_shared[k, j] * 2
                if a_in_registers:
                    for i, k in T.Parallel(block_M, block_K):
                        A_frag[i, k] = A_shared[i, k]
                    T.gemm(A_frag, B_frag, acc)
                else:
                    T.gemm(A_shared, B_frag, acc)
            T.copy(acc, C[by * block_M, bx * block_N])

    return matmul_reg_b


def row_broadcast(M, N, W=64, block_M=8, threads=128):
    """Y[i, j] = 2 * sum(A[i, :]) for j < W: a 1-D fragment read in a 2-D T.Parallel loop that
    indexes no 2-D fragment (the loop runs on the fragment's threads)."""

    @T.prim_func
    def row_broadcast(A: T.Tensor((M, N), "float32"), Y: T.Tensor((M, W), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            s = T.alloc_fragment((block_M,), "float32")
            T.copy(A[bx * block_M, 0], x)
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(block_M, W):
                Y[bx * block_M + i, j] = s[i] * 2.0

    return row_broadcast


# name -> (factory, kwargs) for the compile tests: every kernel at ragged sizes
COMPILE_CASES = {
    "add_f16": (add, dict(M=1000, N=1000)),
    "matmul_rasterized_row": (matmul_rasterized, dict(M=200, N=330, K=72)),
    "matmul_rasterized_col": (
        matmul_rasterized,
        dict(M=330, N=200, K=64, panel=2, order="col", dtype="bfloat16"),
    ),
    "add_f32_small": (add, dict(M=7, N=33, dtype="float32")),
    "add_bf16_tiles": (add_tiles, dict(M=33, N=250, dtype="bfloat16")),
    "add_int8": (add, dict(M=65, N=100, dtype="int8")),
    "bias_gelu_bf16": (bias_gelu, dict(M=1000, N=1000)),
    "softmax_rows": (softmax, dict(M=1001, N=1024)),
    "softmax_padded": (softmax, dict(M=64, N=1000, tile_N=1024)),
    "softmax_wide": (softmax, dict(M=16, N=4096, block_M=1, threads=256)),
    "transpose_f32": (transpose, dict(M=1000, N=700)),
    "transpose_f16": (transpose, dict(M=33, N=65, dtype="float16")),
    "row_sum": (row_sum, dict(M=1001, N=1000)),
    "col_absmax": (col_absmax, dict(M=1000, N=999)),
    "scale_shift": (scale_shift, dict(M=100, N=1000)),
    "histogram": (histogram, dict(N=10000)),
    "clamp_int8": (clamp_int8, dict(M=100, N=1000)),
    "math_zoo": (math_zoo, dict(N=1000)),
    "head_slices": (head_slices, dict(B=2, S=100, H=3, D=64)),
    "matmul_nn_f16": (matmul, dict(M=1000, N=1000, K=1000)),
    "matmul_tn_bf16": (
        matmul,
        dict(M=33, N=200, K=100, dtype="bfloat16", trans_B=True, block_M=64, block_N=64),
    ),
    # many k-tiles per stage ring (16 over 2 stages) and a block walking several tiles when
    # persistent: the ping-pong hand-over keeps each slot's ring waits one phase ahead
    "matmul_deep_k": (
        matmul,
        dict(M=200, N=192, K=512, block_M=64, block_N=64, block_K=32, num_stages=2),
    ),
    "matmul_tt_f16": (
        matmul,
        dict(M=256, N=256, K=256, trans_A=True, trans_B=True, policy=T.GemmWarpPolicy.FullRow),
    ),
    "matmul_nt_int8": (
        matmul,
        dict(M=100, N=100, K=128, dtype="int8", accum_dtype="int32", block_K=64, trans_B=True),
    ),
    "matmul_nn_int8": (
        matmul,
        dict(
            M=64,
            N=64,
            K=64,
            dtype="int8",
            accum_dtype="int32",
            block_K=32,
            trans_A=True,
            block_M=64,
            block_N=64,
        ),
    ),
    "article_matmul": (article_matmul, dict(M=1024, N=1024, K=1024)),
    "matmul_reg_a_f16": (matmul_reg_a, dict(M=100, N=70, K=100)),
    "row_broadcast": (row_broadcast, dict(M=100, N=256)),
    "matmul_reg_b_f16": (matmul_reg_b, dict(M=100, N=70, K=100)),
    "matmul_reg_ab_bf16": (
        matmul_reg_b,
        dict(M=64, N=128, K=96, dtype="bfloat16", a_in_registers=True),
    ),
    "matmul_reg_b_int8": (
        matmul_reg_b,
        dict(M=64, N=64, K=128, dtype="int8", accum_dtype="int32", block_K=64),
    ),
    "matmul_reg_a_int8": (
        matmul_reg_a,
        dict(M=64, N=64, K=128, dtype="int8", accum_dtype="int32", block_K=64, threads=128),
    ),
    # T.dynamic sizes: one compiled kernel for every value (the tiles stay fixed)
    "add_dynamic_m": (add, dict(M=T.dynamic("M"), N=1000)),
    "softmax_dynamic_m": (softmax, dict(M=T.dynamic("M"), N=1000, tile_N=1024)),
    "matmul_dynamic_m": (matmul, dict(M=T.dynamic("M"), N=256, K=256, block_M=64, block_N=64)),
    "matmul_dynamic_m_aligned": (
        matmul,
        dict(M=T.dynamic("M", multiple_of=64), N=256, K=256, block_M=64, block_N=64),
    ),
    "matmul_dynamic_mnk": (
        matmul,
        dict(M=T.dynamic("M"), N=T.dynamic("N"), K=T.dynamic("K"), block_M=64, block_N=64),
    ),
}


def batched_matmul_bias_relu(
    Bt, M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=128,
    dtype="float16", trans_B=False,
):
    """C[b] = relu(A[b] @ W + bias) for each of Bt batches (the batch is the grid's third
    axis), the epilogue written by the user on the accumulator (T.Parallel) before the cast."""
    b_shape = (N, K) if trans_B else (K, N)
    b_tile = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def batched_matmul_bias_relu(
        A: T.Tensor((Bt, M, K), dtype),
        W: T.Tensor(b_shape, dtype),
        bias: T.Tensor((N,), "float32"),
        C: T.Tensor((Bt, M, N), dtype),
    ):
        with T.Kernel(
            T.ceildiv(N, block_N), T.ceildiv(M, block_M), Bt, threads=threads
        ) as (bx, by, bz):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            W_shared = T.alloc_shared(b_tile, dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[bz, by * block_M, ko * block_K], A_shared)
                if trans_B:
                    T.copy(W[bx * block_N, ko * block_K], W_shared)
                else:
                    T.copy(W[ko * block_K, bx * block_N], W_shared)
                T.gemm(A_shared, W_shared, acc, transpose_B=trans_B)
            for i, j in T.Parallel(block_M, block_N):
                acc[i, j] = T.max(acc[i, j] + bias[bx * block_N + j], 0.0)
            T.copy(acc, C[bz, by * block_M, bx * block_N])

    return batched_matmul_bias_relu


def gemm_inputs(M, N, K, dtype, trans_A=False, trans_B=False, seed=3):
    """Random CUDA operands of kernels.matmul (A stored K x M when trans_A, B stored N x K
    when trans_B) and their product in float64: the GPU tests' inputs (needs torch)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, dtype)
    a = torch.randn((K, M) if trans_A else (M, K), generator=g, device="cuda").to(dt)
    b = torch.randn((N, K) if trans_B else (K, N), generator=g, device="cuda").to(dt)
    want = (a.T if trans_A else a).double() @ (b.T if trans_B else b).double()
    return a, b, want
