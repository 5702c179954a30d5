"""Programs of several T.Kernel blocks for the dependent-launch tests (CPU and GPU)."""

import tilers.language as T


def slow_then_read(n, work=64):
    """Kernel 0: every block does `work` rounds of arithmetic, then writes A[i] = i; kernel 1
    first reads X (which no kernel writes: it may run ahead), then B[i] = A[i] + X[i]."""

    @T.prim_func
    def slow_then_read(X: T.Tensor((n,), "float32"), A: T.Tensor((n,), "float32"),
                       B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            acc = T.alloc_fragment((128,), "float32")
            T.clear(acc)
            for _ in T.serial(work):
                for i in T.Parallel(128):
                    acc[i] = acc[i] * 0.5 + 1.0
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    A[bx * 128 + i] = T.Cast("float32", bx * 128 + i) + acc[i] - acc[i]
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            x = T.alloc_fragment((128,), "float32")
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    x[i] = X[bx * 128 + i]
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    B[bx * 128 + i] = A[bx * 128 + i] + x[i]

    return slow_then_read


def read_then_overwrite(n):
    """Kernel 0 reads X into Y = 2 X; kernel 1 overwrites X with zeros (it must not start
    writing before kernel 0 read X); kernel 2 writes nothing kernel 0 or 1 touch (Z = 1)."""

    @T.prim_func
    def read_then_overwrite(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"),
                            Z: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    Y[bx * 128 + i] = X[bx * 128 + i] * 2.0
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    X[bx * 128 + i] = 0.0
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    Z[bx * 128 + i] = 1.0

    return read_then_overwrite

