"""GPU tests of the runtime: hand-written CUDA kernels launched by JITKernel, checked with torch."""

import json

import pytest
from tilers import runtime
from tilers.kernel import JITKernel

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

N = 1000  # the tensors are N x N

# Self-contained CUDA: no #include, our own fp16 storage type, fp16 math in inline PTX.
ADD_SOURCE = r"""
typedef unsigned short half_bits;

extern "C" __global__ void __launch_bounds__(256)
add_kernel(const half_bits* __restrict__ A, const half_bits* __restrict__ B,
           half_bits* __restrict__ C, int n) {
  long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i < n) {
    half_bits c;
    asm("add.f16 %0, %1, %2;" : "=h"(c) : "h"(A[i]), "h"(B[i]));
    C[i] = c;
  }
}
"""

# Every scalar dtype, packed after one another, so misplaced arguments show.
SCALARS_SOURCE = r"""
extern "C" __global__ void scalars_kernel(
    double* out, signed char a, unsigned char b, short c, int d, unsigned int e,
    long long f, float g, double h, bool flag) {
  out[0] = a; out[1] = b; out[2] = c; out[3] = d; out[4] = e;
  out[5] = (double)f; out[6] = g; out[7] = h; out[8] = flag ? 1.0 : -1.0;
}
"""

# Uses 100 KiB of dynamic shared memory: the launcher must raise the 48 KiB limit.
SHARED_BYTES = 100 * 1024
SHARED_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256)
reverse_kernel(const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ float tile[];
  const int count = 100 * 1024 / 4;
  for (int i = threadIdx.x; i < count; i += 256) tile[i] = x[blockIdx.x * count + i];
  __syncthreads();
  for (int i = threadIdx.x; i < count; i += 256) y[blockIdx.x * count + i] = tile[count - 1 - i];
}
"""

PROGRAM_JSON = json.dumps({"version": 1, "name": "test"})


def tensor_param(name, dtype, shape, align=16, written=False):
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return {"kind": "tensor", "name": name, "dtype": dtype, "shape": list(shape),
            "strides": strides[::-1], "align": align, "written": written}


def scalar_param(name, dtype):
    return {"kind": "scalar", "name": name, "dtype": dtype}


def device_arch():
    return runtime.device_arch(torch.cuda.current_device())


def make_add(out_idx=None, arch=None, armed=False) -> JITKernel:
    """The add kernel; `armed`: after one good call, so that calls go straight to the
    native launcher (the first call of a kernel prepares it: torch, the launcher)."""
    arch = arch or device_arch()
    info = {
        "name": "add", "entry": "add_kernel", "arch": arch,
        "params": [
            tensor_param("A", "float16", (N, N)), tensor_param("B", "float16", (N, N)),
            tensor_param("C", "float16", (N, N), written=True), scalar_param("n", "int32"),
        ],
        "grid": [{"op": "ceildiv", "a": {"param": 3}, "b": {"const": 256}},
                 {"const": 1}, {"const": 1}],
        "threads": 256, "block": [256, 1, 1], "shared_bytes": 0, "shared_opt_in": False,
    }
    kernel = JITKernel("add", PROGRAM_JSON, ADD_SOURCE, info, f"cuda:{arch}", out_idx)
    if armed:
        a, b = inputs()
        if out_idx:
            kernel(a, b, N * N)
        else:
            kernel(a, b, torch.empty_like(a), N * N)
        assert_armed(kernel)
    return kernel


def assert_armed(kernel):
    assert kernel._launcher is not None and kernel._entry is kernel._launcher


@pytest.fixture(params=["python checks", "launcher"])
def armed(request):
    """Run an error test on a fresh kernel and on one whose calls take the launcher."""
    return request.param == "launcher"


def inputs():
    a = torch.randn(N, N, device="cuda", dtype=torch.float16)
    b = torch.randn(N, N, device="cuda", dtype=torch.float16)
    return a, b


def sentinel():
    """An output tensor filled with a value the kernel never writes."""
    return torch.full((N, N), 7.0, device="cuda", dtype=torch.float16)


def assert_untouched(c):
    torch.cuda.synchronize()
    assert bool((c == 7.0).all()), "a rejected call wrote to the output"


# --- launches ----------------------------------------------------------------------------


def test_add_matches_torch():
    kernel = make_add()
    a, b = inputs()
    c = sentinel()
    assert kernel(a, b, c, N * N) is None
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


def test_add_scalar_limits_the_work():
    kernel = make_add()
    a, b = inputs()
    c = sentinel()
    n = 1234
    kernel(a, b, c, n)
    torch.cuda.synchronize()
    flat = c.view(-1)
    assert torch.equal(flat[:n], (a + b).view(-1)[:n])
    assert bool((flat[n:] == 7.0).all())


def test_add_out_idx_allocates_output():
    kernel = make_add(out_idx=[2])
    a, b = inputs()
    c = kernel(a, b, N * N)
    assert isinstance(c, torch.Tensor)
    assert c.dtype == torch.float16 and c.shape == (N, N) and c.device == a.device
    assert c.is_contiguous()
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


def test_add_runs_on_current_stream():
    kernel = make_add(out_idx=[2])
    a, b = inputs()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        c = kernel(a, b, N * N)
    stream.synchronize()
    assert torch.equal(c, a + b)


def test_add_in_cuda_graph():
    kernel = make_add()
    a, b = inputs()
    c = sentinel()
    kernel(a, b, c, N * N)  # load the module outside capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kernel(a, b, c, N * N)
    c.fill_(7.0)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


def test_every_scalar_dtype():
    dtypes = ["int8", "uint8", "int16", "int32", "uint32", "int64", "float32", "float64", "bool"]
    names = ["a", "b", "c", "d", "e", "f", "g", "h", "flag"]
    info = {
        "name": "scalars", "entry": "scalars_kernel", "arch": device_arch(),
        "params": [tensor_param("out", "float64", (9,), align=8, written=True)]
        + [scalar_param(name, dtype) for name, dtype in zip(names, dtypes)],
        "grid": [{"const": 1}] * 3, "threads": 1, "block": [1, 1, 1], "shared_bytes": 0,
        "shared_opt_in": False,
    }
    kernel = JITKernel("scalars", PROGRAM_JSON, SCALARS_SOURCE, info, "auto", [0])
    values = (-100, 200, -30000, -(2**31), 2**32 - 1, -(2**40) - 3, 1.5, 2.0**-30, True)
    out = kernel(*values)
    torch.cuda.synchronize()
    assert out.tolist() == [float(v) for v in values[:8]] + [1.0]
    # no tensor input to read the device from: the launcher takes torch's current device
    assert_armed(kernel)
    assert kernel(*values).tolist() == [float(v) for v in values[:8]] + [1.0]
    assert kernel(*values[:8], False)[8].item() == -1.0
    with pytest.raises(OverflowError, match="parameter 'a': 1000 does not fit in int8"):
        kernel(1000, *values[1:])
    if torch.cuda.device_count() > 1:
        with torch.cuda.device(1):
            assert kernel(*values).device == torch.device("cuda:1")


def test_shared_memory_over_48k():
    count = SHARED_BYTES // 4
    blocks = 4
    info = {
        "name": "reverse", "entry": "reverse_kernel", "arch": device_arch(),
        "params": [tensor_param("x", "float32", (blocks, count)),
                   tensor_param("y", "float32", (blocks, count), written=True)],
        "grid": [{"const": blocks}, {"const": 1}, {"const": 1}], "threads": 256,
        "block": [256, 1, 1], "shared_bytes": SHARED_BYTES, "shared_opt_in": True,
    }
    kernel = JITKernel("reverse", PROGRAM_JSON, SHARED_SOURCE, info, "auto", [1])
    x = torch.randn(blocks, count, device="cuda")
    y = kernel(x)
    torch.cuda.synchronize()
    assert torch.equal(y, x.flip(1))


# --- the native launcher: every call after the first one --------------------------------

INPUTS16 = 15
SUM16_SOURCE = (
    "extern \"C\" __global__ void __launch_bounds__(256) sum16_kernel("
    + ", ".join(f"const float* __restrict__ a{i}" for i in range(INPUTS16))
    + ", float* __restrict__ out, int n) {\n"
    + "  int i = blockIdx.x * 256 + threadIdx.x;\n"
    + "  if (i < n) out[i] = " + " + ".join(f"a{i}[i]" for i in range(INPUTS16)) + ";\n}\n"
)


def make_sum16(out_idx=None):
    info = {
        "name": "sum16", "entry": "sum16_kernel", "arch": device_arch(),
        "params": [tensor_param(f"A{i}", "float32", (N, N)) for i in range(INPUTS16)]
        + [tensor_param("Out", "float32", (N, N), written=True), scalar_param("n", "int32")],
        "grid": [{"op": "ceildiv", "a": {"param": INPUTS16 + 1}, "b": {"const": 256}},
                 {"const": 1}, {"const": 1}],
        "threads": 256, "block": [256, 1, 1], "shared_bytes": 0, "shared_opt_in": False,
    }
    return JITKernel("sum16", PROGRAM_JSON, SUM16_SOURCE, info, "auto", out_idx)


def test_launcher_runs_later_calls():
    kernel = make_add(armed=True)
    for n in (N * N, 1234, 1):
        a, b = inputs()
        c = sentinel()
        assert kernel(a, b, c, n) is None
        torch.cuda.synchronize()
        flat = c.view(-1)
        assert torch.equal(flat[:n], (a + b).view(-1)[:n])
        assert bool((flat[n:] == 7.0).all())
    kernel = make_add(out_idx=[2], armed=True)
    a, b = inputs()
    c = kernel(torch.nn.Parameter(a, requires_grad=False), b, N * N)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


def test_launcher_follows_the_current_stream_and_graphs():
    kernel = make_add(armed=True)
    a, b = inputs()
    c = sentinel()
    # the check allocates nothing: an allocation that reaches cudaMalloc can wait for the
    # whole device, sleep included (seen on the H200: torch.add itself "failed" that way)
    equal = torch.empty_like(c, dtype=torch.bool)
    untouched = torch.empty((), dtype=torch.bool, device="cuda")
    torch.all(torch.eq(c, 7.0, out=equal), out=untouched)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(100_000_000)  # tens of ms: the launch queues behind it on `stream`
        kernel(a, b, c, N * N)
    # read at once on the default stream: the kernel has not run yet
    torch.all(torch.eq(c, 7.0, out=equal), out=untouched)
    assert untouched.item(), "the launch did not go to torch's current stream"
    stream.synchronize()
    assert torch.equal(c, a + b)

    c = sentinel()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kernel(a, b, c, N * N)
    c.fill_(7.0)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


def test_sixteen_tensors():
    kernel = make_sum16()
    args = [torch.randn(N, N, device="cuda") for _ in range(INPUTS16)]
    out = torch.full((N, N), 7.0, device="cuda")
    for _ in range(2):  # the first call arms the launcher, the second runs through it
        out.fill_(7.0)
        assert kernel(*args, out, N * N) is None
        torch.cuda.synchronize()
        torch.testing.assert_close(out, sum(args[1:], args[0]))
    assert_armed(kernel)
    out.fill_(7.0)
    wrong = list(args)
    wrong[12] = wrong[12].half()
    with pytest.raises(ValueError, match="parameter 'A12': expected dtype float32, got torch.float16"):
        kernel(*wrong, out, N * N)
    wrong[12] = args[12].t()
    with pytest.raises(ValueError, match="parameter 'A12': expected a contiguous tensor"):
        kernel(*wrong, out, N * N)
    with pytest.raises(TypeError, match="parameter 'A14'"):
        kernel(*args[:14], 3.0, out, N * N)
    torch.cuda.synchronize()
    assert bool((out == 7.0).all()), "a rejected call wrote to the output"
    outputs = make_sum16(out_idx=[INPUTS16])
    for _ in range(2):
        result = outputs(*args, N * N)
    assert_armed(outputs)
    torch.cuda.synchronize()
    torch.testing.assert_close(result, sum(args[1:], args[0]))


def test_grid_of_a_float_parameter():
    """T.ceildiv(T.int32(x), 256) blocks: the launcher truncates the float as the kernel does."""
    import tilers
    import tilers.language as T

    @T.prim_func
    def fill(X: T.Tensor((1024,), "float32"), x: T.float32):
        with T.Kernel(T.ceildiv(T.int32(x), 256), threads=128) as bx:
            for i in T.Parallel(256):
                X[bx * 256 + i] = x

    kernel = tilers.compile(fill)
    for _ in range(2):  # the first call prepares the kernel, the second is the launcher alone
        x = torch.full((1024,), 7.0, device="cuda")
        kernel(x, 300.5)  # two blocks
        torch.cuda.synchronize()
        assert bool((x[:512] == 300.5).all()) and bool((x[512:] == 7.0).all())
    kernel(x, 0.5)  # no blocks: nothing launched, nothing written
    torch.cuda.synchronize()
    assert bool((x[512:] == 7.0).all())
    with pytest.raises(ValueError, match=r"grid dimension x is -1 \(from scalar parameter x=-300.0\)"):
        kernel(x, -300.0)


# --- argument errors: the right error, naming the parameter, and no output touched ------


def test_wrong_dtype(armed):
    kernel = make_add(armed=armed)
    a, b = inputs()
    c = sentinel()
    with pytest.raises(ValueError) as error:
        kernel(a.float(), b, c, N * N)
    message = str(error.value)
    assert "parameter 'A'" in message and "float16" in message and "torch.float32" in message
    assert_untouched(c)


def test_wrong_shape(armed):
    kernel = make_add(armed=armed)
    a, b = inputs()
    c = sentinel()
    with pytest.raises(ValueError) as error:
        kernel(a, b[:, :999].contiguous(), c, N * N)
    message = str(error.value)
    assert "parameter 'B'" in message and "(1000, 1000)" in message and "(1000, 999)" in message
    assert_untouched(c)


def test_cpu_tensor(armed):
    kernel = make_add(armed=armed)
    a, b = inputs()
    c = sentinel()
    with pytest.raises(ValueError) as error:
        kernel(a.cpu(), b, c, N * N)
    message = str(error.value)
    # one host tensor among GPU tensors: the call names both sides
    assert "host arrays (A) and GPU tensors (B, C)" in message
    assert "interpreter" in message
    assert_untouched(c)


def test_not_a_tensor(armed):
    kernel = make_add(armed=armed)
    a, _ = inputs()
    c = sentinel()
    with pytest.raises(TypeError) as error:
        kernel(a, [1, 2], c, N * N)
    message = str(error.value)
    assert "parameter 'B'" in message and "torch.Tensor of float16" in message
    assert "list" in message
    assert_untouched(c)


def test_transposed_view(armed):
    kernel = make_add(armed=armed)
    a, b = inputs()
    c = sentinel()
    with pytest.raises(ValueError) as error:
        kernel(a, b.t(), c, N * N)
    message = str(error.value)
    assert "parameter 'B'" in message
    assert "strides (1000, 1)" in message and "(1, 1000)" in message
    assert "B.contiguous()" in message
    assert_untouched(c)


def test_misaligned_view(armed):
    kernel = make_add(armed=armed)
    a, _ = inputs()
    storage = torch.randn(N * N + 8, device="cuda", dtype=torch.float16)
    b = storage[1 : 1 + N * N].view(N, N)  # contiguous, but 2 bytes past 16-byte alignment
    c = sentinel()
    with pytest.raises(ValueError) as error:
        kernel(a, b, c, N * N)
    message = str(error.value)
    assert "parameter 'B'" in message and "16-byte" in message and "2 bytes" in message
    assert_untouched(c)


def test_misaligned_output(armed):
    kernel = make_add(armed=armed)
    a, b = inputs()
    storage = torch.full((N * N + 8,), 7.0, device="cuda", dtype=torch.float16)
    c = storage[4 : 4 + N * N].view(N, N)  # 8 bytes past 16-byte alignment
    with pytest.raises(ValueError, match="parameter 'C'.*8 bytes"):
        kernel(a, b, c, N * N)
    assert_untouched(c)


def test_wrong_argument_count(armed):
    kernel = make_add(armed=armed)
    a, b = inputs()
    c = sentinel()
    with pytest.raises(TypeError, match=r"add\(\) takes 4 tensor/scalar arguments .* but 3 were"):
        kernel(a, b, c)
    assert_untouched(c)
    with pytest.raises(TypeError, match=r"C is an output allocated by the kernel\) but 4 were"):
        make_add(out_idx=[2], armed=armed)(a, b, c, N * N)
    assert_untouched(c)


def test_scalar_errors(armed):
    kernel = make_add(armed=armed)
    a, b = inputs()
    c = sentinel()
    with pytest.raises(TypeError, match="parameter 'n'.*int.*float"):
        kernel(a, b, c, 1000.0)
    with pytest.raises(OverflowError, match="parameter 'n'.*int32"):
        kernel(a, b, c, 2**31)
    with pytest.raises(ValueError, match="grid dimension x is -1.*n=-300"):
        kernel(a, b, c, -300)
    kernel(a, b, c, 0)  # no blocks: nothing launched
    torch.cuda.synchronize()
    assert_untouched(c)


def test_error_before_allocation(armed):
    import gc

    kernel = make_add(out_idx=[2], armed=armed)
    a, b = inputs()
    # earlier tests' tensors kept alive by reference cycles would otherwise be freed by a
    # collection during the call; what must not happen is an allocation (even a freed one)
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with pytest.raises(ValueError):
        kernel(a, b.t(), N * N)
    assert torch.cuda.max_memory_allocated() == before


def test_other_arch_is_refused():
    arch = device_arch()
    other = "sm_80" if arch != "sm_80" else "sm_90a"
    kernel = make_add(arch=other)
    a, b = inputs()
    c = sentinel()
    with pytest.raises(RuntimeError, match=f"compiled for {other}.*{arch}"):
        kernel(a, b, c, N * N)
    assert_untouched(c)


def test_tensors_on_two_devices(armed):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    kernel = make_add(armed=armed)
    a, b = inputs()
    c = sentinel()
    with pytest.raises(ValueError, match="parameter 'B'.*cuda:0.*cuda:1"):
        kernel(a, b.to("cuda:1"), c, N * N)
    assert_untouched(c)


def test_runs_on_second_device():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    kernel = make_add(out_idx=[2], armed=True)  # armed on device 0
    a, b = (t.to("cuda:1") for t in inputs())
    for _ in range(2):  # loads on device 1, then launches there through the launcher
        c = kernel(a, b, N * N)
        assert c.device == a.device
        torch.cuda.synchronize(1)
        assert torch.equal(c, a + b)
