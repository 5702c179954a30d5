"""Arrays of other frameworks as call arguments (issue 19): CuPy and JAX arrays in CUDA
memory run through DLPack (no copy), the outputs the kernel allocates come back in the
caller's framework, and a JAX array the kernel would write in place is refused."""

import numpy as np
import pytest
import tilers
import tilers.language as T

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def add(n=1000):
    @T.prim_func
    def f(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 256), threads=128) as bx:
            for i in T.Parallel(256):
                C[bx * 256 + i] = A[bx * 256 + i] + B[bx * 256 + i] * 2.0

    return f


def test_cupy_arrays_in_and_out():
    cupy = pytest.importorskip("cupy")
    a = cupy.arange(1000, dtype=cupy.float32)
    b = cupy.ones(1000, dtype=cupy.float32)
    c = tilers.compile(add(), out_idx=[2])(a, b)
    assert isinstance(c, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(c), np.arange(1000) + 2)
    # written in place: the CuPy array itself
    out = cupy.zeros(1000, dtype=cupy.float32)
    tilers.compile(add())(a, b, out)
    np.testing.assert_array_equal(cupy.asnumpy(out), np.arange(1000) + 2)


def test_jax_arrays_in_and_out():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax sees no GPU")
    a = jnp.arange(1000, dtype=jnp.float32)
    b = jnp.ones(1000, dtype=jnp.float32)
    c = tilers.compile(add(), out_idx=[2])(a, b)
    assert isinstance(c, jax.Array)
    np.testing.assert_array_equal(np.asarray(c), np.arange(1000) + 2)
    with pytest.raises(ValueError, match="parameter 'C': the kernel writes it, but a JAX array is immutable"):
        tilers.compile(add())(a, b, jnp.zeros(1000, dtype=jnp.float32))
