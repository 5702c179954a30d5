"""The native launcher on CPU tensors (dry run: no driver), where torch is installed.

The launcher (crates/tile-py/src/launcher.rs) is the one place that accepts or declines a
call: it must accept every call the Python checks accept, and pass every other one,
untouched, to the kernel's fallback (JITKernel._declined), whose Python checks name the
wrong argument. Each test runs with both of its tensor readers: torch's C shim and the
Python attributes. GPU launches through it are in test_runtime_gpu.py.
"""

import json
import os
import sys
import weakref

import pytest
import tilers
import tilers.language as T
from tilers import _tilers
from tilers.errors import TileError
from tilers.kernel import JITKernel

sys.path.insert(0, os.path.dirname(__file__))
import kernels

torch = pytest.importorskip("torch")

M, N = 8, 128


@pytest.fixture(params=["shim", "attributes"])
def reader(request):
    """Read tensors through torch's C shim, or through their Python attributes."""
    if request.param == "shim":
        problem = _tilers.load_torch_shim(torch)
        if not sys.platform.startswith("linux"):
            pytest.skip(problem or "the shim is only used on Linux")
        assert problem == ""  # a torch whose tensors the shim cannot read: launches go slow
    return request.param


class Kernel:
    """Stands in for JITKernel: records the calls declined and the devices loaded."""

    def __init__(self):
        self.calls = []
        self.loads = []

    def declined(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "checked in Python"

    def load(self, device):
        self.loads.append(device)
        return [0], 0  # the function of the one kernel, its context


def tensor(name, dtype="float16", shape=(M, N), strides=None, align=16, written=False):
    if strides is None:  # contiguous
        strides = [1]
        for extent in reversed(shape[1:]):
            strides.insert(0, strides[0] * extent)
    return {"kind": "tensor", "name": name, "dtype": dtype, "shape": list(shape),
            "strides": list(strides), "align": align, "written": written}


def scalar(name, dtype="int32"):
    return {"kind": "scalar", "name": name, "dtype": dtype}


def info(params, grid=None, **fields):
    """A KernelInfo (docs/format.md) of a kernel with these parameters."""
    return dict({
        "name": "k", "entry": "k_kernel", "arch": "sm_90a", "params": params,
        "grid": grid or [{"const": 1}] * 3, "threads": 128, "block": [128, 1, 1],
        "shared_bytes": 0, "shared_opt_in": False,
    }, **fields)


def make(params, reader, grid=None, outputs=(), kernel=None, **fields):
    """A dry-run launcher of a kernel with `params` and the stand-in kernel it calls."""
    kernel = kernel or Kernel()
    launcher = _tilers.Launcher(
        json.dumps(info(params, grid, **fields)), list(outputs), torch,
        weakref.WeakMethod(kernel.load), weakref.WeakMethod(kernel.declined),
        dry_run=True, torch_shim=reader == "shim",
    )
    return launcher, kernel


CEILDIV_N = {"op": "ceildiv", "a": {"param": 3}, "b": {"const": 256}}


def add_launcher(reader):
    params = [tensor("A"), tensor("B"), tensor("C", written=True), scalar("n")]
    return make(params, reader, grid=[CEILDIV_N, {"const": 1}, {"const": 1}])


def fp16(*shape):
    return torch.zeros(shape or (M, N), dtype=torch.float16)


class Tagged(torch.Tensor):
    """A tensor subclass that is not torch.nn.Parameter."""


def test_tensor_codes(reader):
    if reader != "shim":
        pytest.skip("the codes are the shim's")
    codes = {_tilers.tensor_codes(torch.empty(0, dtype=d))[0]
             for d in (torch.float16, torch.bfloat16, torch.float32, torch.int32)}
    assert len(codes) == 4
    assert _tilers.tensor_codes([1, 2]) is None


def test_reader_is_reported(reader):
    launcher, _ = add_launcher(reader)
    if reader == "shim":
        assert launcher.tensor_reader == "torch's C shim"
    else:
        assert launcher.tensor_reader == "Python attributes (torch_shim=False)"


def test_accepts_what_the_python_checks_accept(reader):
    numpy = pytest.importorskip("numpy")
    launcher, kernel = add_launcher(reader)
    a, b, c = fp16(), fp16(), fp16()
    assert launcher(a, b, c, M * N) is None
    # tensor subclasses are read as their base tensor
    assert launcher(torch.nn.Parameter(a), b, c, 1) is None
    assert launcher(a, b.as_subclass(Tagged), c.as_subclass(Tagged), 1) is None
    # an int parameter takes any numbers.Integral (bools, numpy integers), as Python's checks
    assert launcher(a, b, c, True) is None
    assert launcher(a, b, c, numpy.int64(7)) is None
    assert kernel.calls == []
    assert kernel.loads == [0]  # loaded once, on the first call


@pytest.mark.parametrize("case", [
    "dtype", "shape", "strides", "misaligned", "not a tensor", "numpy", "meta device",
    "int too large", "float for int", "numpy float for int", "too few", "too many", "keyword",
])
def test_declines_and_passes_the_call_on(case, reader):
    numpy = pytest.importorskip("numpy")
    launcher, kernel = add_launcher(reader)
    a, b, c = fp16(), fp16(), fp16()
    args, kwargs = [a, b, c, M * N], {}
    if case == "dtype":
        args[1] = b.float()
    elif case == "shape":
        args[1] = fp16(M, N - 1)
    elif case == "strides":
        args[1] = fp16(N, M).t()
    elif case == "misaligned":
        args[1] = torch.zeros(M * N + 8, dtype=torch.float16)[1 : 1 + M * N].view(M, N)
    elif case == "not a tensor":
        args[1] = [1, 2]
    elif case == "numpy":
        args[1] = b.numpy()
    elif case == "meta device":  # in a dry run the CPU stands for CUDA: other devices fail
        args[1] = torch.empty(M, N, dtype=torch.float16, device="meta")
    elif case == "int too large":
        args[3] = 2**31
    elif case == "float for int":
        args[3] = 1000.0
    elif case == "numpy float for int":
        args[3] = numpy.float32(1000)
    elif case == "too few":
        args = args[:3]
    elif case == "too many":
        args.append(1)
    elif case == "keyword":
        kwargs = {"n": 1}
    assert launcher(*args, **kwargs) == "checked in Python"
    (passed_args, passed_kwargs), = kernel.calls
    assert all(x is y for x, y in zip(passed_args, args)) and len(passed_args) == len(args)
    assert passed_kwargs == kwargs
    assert kernel.loads == []  # declined before anything is loaded


def test_strides_may_differ_along_extent_one(reader):
    launcher, kernel = make([tensor("A", shape=(1, N), strides=(N, 1))], reader)
    assert launcher(torch.zeros(2, N, dtype=torch.float16)[::2]) is None  # strides (2N, 1)
    assert launcher(torch.zeros(N, 5, dtype=torch.float16).t()[2:3]) == "checked in Python"
    assert len(kernel.calls) == 1


def test_scalar_ranges_and_kinds(reader):
    dtypes = ["bool", "int8", "uint8", "int16", "int32", "uint32", "int64", "float32", "float64"]
    params = [tensor("A")] + [scalar(f"s{i}", dtype) for i, dtype in enumerate(dtypes)]
    launcher, kernel = make(params, reader)
    a = fp16()
    good = (True, -128, 255, -(2**15), -(2**31), 2**32 - 1, -(2**63), 3.4e38, 1e300)
    assert launcher(a, *good) is None
    assert launcher(a, False, 127, 0, 2**15 - 1, 2**31 - 1, 0, 2**63 - 1, 1, 2) is None
    assert kernel.calls == []
    bad = [1, 128, 256, 2**15, 2**31, -1, 2**63, 3.5e38, "x"]
    for position, value in enumerate(bad):
        args = list(good)
        args[position] = value
        assert launcher(a, *args) == "checked in Python", (dtypes[position], value)
    assert len(kernel.calls) == len(bad)
    # an int for a float parameter is converted as float() does; inf and nan pass as such
    assert launcher(a, *good[:7], 2, float("inf")) is None
    assert launcher(a, *good[:7], float("nan"), 2**1024 - 1) == "checked in Python"


def test_unsigned_16_and_64_bit_scalars(reader):
    params = [tensor("A"), scalar("h", "uint16"), scalar("q", "uint64")]
    launcher, kernel = make(params, reader)
    a = fp16()
    assert launcher(a, 0, 0) is None
    assert launcher(a, 2**16 - 1, 2**64 - 1) is None  # past 2^63: packed as its bits
    assert launcher(a, 7, 2**63) is None
    assert kernel.calls == []
    bad = [(-1, 0), (2**16, 0), (0, -1), (0, 2**64), (0, 1.0)]
    for args in bad:
        assert launcher(a, *args) == "checked in Python", args
    assert len(kernel.calls) == len(bad)


def test_16_bit_float_scalars(reader):
    # packed as their storage bits; past the largest finite value they do not fit
    params = [tensor("A"), scalar("h", "float16"), scalar("b", "bfloat16")]
    launcher, kernel = make(params, reader)
    a = fp16()
    for good in [(1.5, -2.25), (65504.0, 3.38e38), (0, 1), (float("inf"), float("nan"))]:
        assert launcher(a, *good) is None, good
    assert kernel.calls == []
    bad = [(65505.0, 0.0), (0.0, 3.4e38), ("x", 0.0)]
    for args in bad:
        assert launcher(a, *args) == "checked in Python", args
    assert len(kernel.calls) == len(bad)


def test_outputs_are_allocated_and_returned(reader):
    params = [tensor("A"), tensor("B", "float32", written=True), tensor("C", written=True)]
    launcher, kernel = make(params, reader, outputs=[1, 2])
    x, y = launcher(fp16())
    assert x.dtype == torch.float32 and x.shape == (M, N) and y.dtype == torch.float16
    one, _ = make([tensor("A"), tensor("B", written=True)], reader, outputs=[1])
    assert isinstance(one(fp16()), torch.Tensor)
    assert kernel.calls == []


def test_kernel_of_scalars_only(reader):
    """No tensor argument to take the device from: torch's current device (0 in a dry run)."""
    params = [tensor("out", "float64", shape=(9,), strides=(1,), align=8, written=True),
              scalar("a", "int8"), scalar("x", "float64"), scalar("flag", "bool")]
    launcher, kernel = make(params, reader, outputs=[0])
    out = launcher(-3, 2.5, True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.shape == (9,)
    assert kernel.loads == [0]
    assert launcher(1000, 2.5, True) == "checked in Python"


def test_more_than_32_parameters(reader):
    count = 40
    params = [tensor(f"A{i}", "float32") for i in range(count)] + [scalar("n")]
    grid = [{"op": "ceildiv", "a": {"param": count}, "b": {"const": 128}}, {"const": 1}, {"const": 1}]
    launcher, kernel = make(params, reader, grid=grid, outputs=[count - 1])
    args = [torch.zeros(M, N) for _ in range(count - 1)]
    assert isinstance(launcher(*args, 1000), torch.Tensor)
    args[35] = args[35].half()
    assert launcher(*args, 1000) == "checked in Python"
    with pytest.raises(ValueError, match="grid dimension x is -1 .*n=-200"):
        launcher(*[torch.zeros(M, N) for _ in range(count - 1)], -200)
    assert len(kernel.calls) == 1


@pytest.mark.parametrize("grid, n, blocks", [
    ({"op": "floordiv", "a": {"param": 1}, "b": {"const": 3}}, -7, None),  # -3
    ({"op": "floordiv", "a": {"param": 1}, "b": {"const": 3}}, 2, 0),  # no blocks: no launch
    ({"op": "floordiv", "a": {"param": 1}, "b": {"const": -3}}, -7, 2),
    ({"op": "ceildiv", "a": {"param": 1}, "b": {"const": 4}}, 9, 3),
    ({"op": "max", "a": {"param": 1}, "b": {"const": 1}}, -5, 1),
    ({"op": "mul", "a": {"param": 1}, "b": {"const": 2**40}}, 2**40, None),  # 2**80
    ({"op": "sub", "a": {"const": 70000}, "b": {"param": 1}}, 0, 70000),
])
def test_grid_follows_python(grid, n, blocks, reader):
    for axis, limit in ((0, 2**31 - 1), (1, 65535)):
        dims = [{"const": 1}] * 3
        dims[axis] = grid
        launcher, kernel = make([tensor("A"), scalar("n", "int64")], reader, grid=dims)
        if blocks is not None and blocks <= limit:
            assert launcher(fp16(), n) is None
            continue
        with pytest.raises(ValueError) as error:
            launcher(fp16(), n)
        message = str(error.value)
        assert message.startswith(f"grid dimension {'xy'[axis]} is ")
        assert f"(from scalar parameter n={n})" in message
        assert kernel.calls == [] and kernel.loads == []


def test_float_parameters_in_the_grid(reader):
    grid = [{"op": "ceildiv", "a": {"param": 1}, "b": {"const": 4}}, {"const": 1}, {"const": 1}]
    launcher, kernel = make([tensor("A"), scalar("x", "float32")], reader, grid=grid)
    assert launcher(fp16(), 9.9) is None  # ceildiv(9, 4)
    assert launcher(fp16(), 12) is None
    assert launcher(fp16(), -0.5) is None  # ceildiv(0, 4): no blocks, nothing launched
    with pytest.raises(ValueError, match=r"grid dimension x is -1 \(from scalar parameter x=-4.5\)"):
        launcher(fp16(), -4.5)
    with pytest.raises(ValueError, match="not finite.*x=nan"):
        launcher(fp16(), float("nan"))
    assert kernel.calls == []



def test_a_clustered_grid_of_sizes_is_checked_per_call(reader):
    # a grid along x read from a scalar (or a size) is checked at each call: whole clusters
    grid = [{"op": "ceildiv", "a": {"param": 1}, "b": {"const": 64}}, {"const": 1}, {"const": 1}]
    launcher, kernel = make([tensor("A"), scalar("n")], reader, grid=grid, cluster=[2, 1, 1])
    assert launcher(fp16(), 256) is None  # 4 blocks: 2 clusters
    assert launcher(fp16(), 0) is None  # no blocks: nothing launched
    with pytest.raises(ValueError, match=r"grid dimension x is 3 \(from scalar parameter n=129\): the kernel "
                                         r"runs in thread-block clusters of 2 blocks along x, so it must be a multiple of 2"):
        launcher(fp16(), 129)
    # a persistent kernel's grid is its tiles, walked by whole clusters: any count
    persistent, _ = make([tensor("A"), scalar("n")], reader, grid=grid, cluster=[2, 1, 1], persistent=True)
    assert persistent(fp16(), 129) is None


class Refusing(Kernel):
    def load(self, device):
        raise RuntimeError(f"kernel 'k' was compiled for sm_80, but cuda:{device} cannot run it")


def test_load_errors_stop_the_call(reader):
    launcher, kernel = make([tensor("A"), tensor("B", written=True)], reader, outputs=[1],
                            kernel=Refusing())
    with pytest.raises(RuntimeError, match="cuda:0 cannot run it"):
        launcher(fp16())
    assert kernel.calls == []


def test_refuses_what_it_cannot_run(reader):
    with pytest.raises(ValueError, match="grid reads parameter 0, which is not a scalar"):
        make([tensor("A")], reader, grid=[{"param": 0}, {"const": 1}, {"const": 1}])
    with pytest.raises(ValueError, match="'h' of float8_e4m3fn cannot be passed by value"):
        make([tensor("A"), scalar("h", "float8_e4m3fn")], reader)
    # clusters: along x only, and a kernel of a tile per block needs a grid along x that
    # is a multiple of the cluster (a constant one checked once, here)
    with pytest.raises(ValueError, match=r"clusters of 2 blocks along x, and its grid along x \(1\) is not a multiple of 2"):
        make([tensor("A")], reader, cluster=[2, 1, 1])
    with pytest.raises(ValueError, match=r"needs a thread-block cluster \[1, 2, 1\]: clusters run along x only"):
        make([tensor("A")], reader, cluster=[1, 2, 1], grid=[{"const": 1}, {"const": 2}, {"const": 1}])
    make([tensor("A")], reader, cluster=[2, 1, 1], grid=[{"const": 4}, {"const": 1}, {"const": 1}])
    with pytest.raises(ValueError, match="compiled for the interpreter"):
        make([tensor("A")], reader, entry=None)
    with pytest.raises(ValueError, match="not a KernelInfo"):
        make([{"kind": "tensor", "name": "A"}], reader)


# --- JITKernel on the launcher: declines explained by the Python checks --------------------

ADD_SOURCE = "// not compiled: a dry run never loads the kernel"


def add_kernel(out_idx=None):
    """The add kernel of test_runtime_gpu.py (n elements of N x N tensors), prepared for a
    dry run: CPU tensors stand for CUDA tensors."""
    size = 1000
    params = [tensor(name, shape=(size, size)) for name in "AB"]
    params += [tensor("C", shape=(size, size), written=True), scalar("n")]
    kernel = JITKernel("add", json.dumps({"version": 1}), ADD_SOURCE,
                       info(params, [CEILDIV_N, {"const": 1}, {"const": 1}], name="add"),
                       "cuda:sm_90a", out_idx)
    kernel._prepare(dry_run=True)
    return kernel


def inputs():
    return torch.randn(1000, 1000).half(), torch.randn(1000, 1000).half()


@pytest.mark.parametrize("fast_launch", ["1", "0"])
def test_kernel_calls_go_through_the_launcher(fast_launch, monkeypatch):
    monkeypatch.setenv("TILERS_FAST_LAUNCH", fast_launch)
    kernel = add_kernel(out_idx=[2])
    if fast_launch == "1":
        assert kernel._entry is kernel._launcher  # no Python frame on the way
    else:
        assert kernel._entry == kernel._checked_call  # the Python checks first
    a, b = inputs()
    c = kernel(a, b, 1000 * 1000)
    assert isinstance(c, torch.Tensor) and c.shape == (1000, 1000) and c.dtype == torch.float16
    assert kernel(torch.nn.Parameter(a, requires_grad=False), b, 1) is not None


@pytest.mark.parametrize("fast_launch", ["1", "0"])
@pytest.mark.parametrize("case, error, message", [
    ("dtype", ValueError,
     "parameter 'A': expected dtype float16, got torch.float32 (tilers never casts silently: "
     "pass A.to(torch.float16))"),
    ("shape", ValueError,
     "parameter 'B': expected shape (1000, 1000), got (1000, 999) (the kernel was compiled for "
     "that shape)"),
    ("not a tensor", TypeError,
     "parameter 'B': expected a torch.Tensor of float16 with shape (1000, 1000), got list"),
    ("transposed", ValueError,
     "parameter 'B': expected a contiguous tensor with strides (1000, 1), got strides "
     "(1, 1000) — pass B.contiguous()"),
    ("misaligned", ValueError,
     "parameter 'B': the kernel assumes a 16-byte aligned data pointer, but this one is 2 "
     "bytes past a multiple of 16 (a view that starts at an offset, such as x[1:]?) — pass "
     "B.clone()"),
    ("float for int", TypeError, "parameter 'n': expected an int (int32), got float 1000.0"),
    ("int too large", OverflowError,
     "parameter 'n': 2147483648 does not fit in int32 (range -2147483648 to 2147483647)"),
    ("negative blocks", ValueError,
     "grid dimension x is -3 (from scalar parameter n=-1000): a grid dimension cannot be "
     "negative"),
    ("count", TypeError,
     "add() takes 3 tensor/scalar arguments (A, B, n; C is an output allocated by the kernel) "
     "but 2 were given"),
    ("keyword", TypeError,
     "add() takes its arguments by position, not by keyword (n): call it as add(A, B, n)"),
])
def test_declined_calls_are_explained(case, error, message, fast_launch, monkeypatch):
    monkeypatch.setenv("TILERS_FAST_LAUNCH", fast_launch)
    kernel = add_kernel(out_idx=[2])
    a, b = inputs()
    args, kwargs = [a, b, 1000], {}
    if case == "dtype":
        args[0] = a.float()
    elif case == "shape":
        args[1] = b[:, :999].contiguous()
    elif case == "not a tensor":
        args[1] = [1, 2]
    elif case == "transposed":
        args[1] = b.t()
    elif case == "misaligned":
        args[1] = torch.zeros(1000 * 1000 + 8, dtype=torch.float16)[1 : 1 + 1000 * 1000].view(1000, 1000)
    elif case == "float for int":
        args[2] = 1000.0
    elif case == "int too large":
        args[2] = 2**31
    elif case == "negative blocks":
        args[2] = -1000
    elif case == "count":
        args = args[:2]
    elif case == "keyword":
        args, kwargs = args[:2], {"n": 3}
    with pytest.raises(error) as raised:
        kernel(*args, **kwargs)
    assert str(raised.value) == message


def test_kernel_of_scalars_only_has_a_launcher():
    dtypes = ["int8", "uint8", "int16", "int32", "uint32", "int64", "float32", "float64", "bool"]
    params = [tensor("out", "float64", shape=(9,), strides=(1,), align=8, written=True)]
    params += [scalar(f"s{i}", dtype) for i, dtype in enumerate(dtypes)]
    kernel = JITKernel("scalars", json.dumps({"version": 1}), ADD_SOURCE,
                       info(params, name="scalars"), "auto", [0])
    kernel._prepare(dry_run=True)
    values = (-100, 200, -30000, -(2**31), 2**32 - 1, -(2**40) - 3, 1.5, 2.0**-30, True)
    assert kernel(*values).shape == (9,)
    with pytest.raises(OverflowError, match="parameter 's0': 1000 does not fit in int8"):
        kernel(1000, *values[1:])
    with pytest.raises(TypeError, match="parameter 's8': expected a bool, got int"):
        kernel(*values[:8], 1)


def test_compiled_kernel_with_a_float_grid():
    @T.prim_func
    def fill(X: T.Tensor((1024,), "float32"), x: T.float32):
        with T.Kernel(T.ceildiv(T.int32(x), 256), threads=128) as bx:
            for i in T.Parallel(256):
                X[bx * 256 + i] = x

    kernel = tilers.compile(fill, target="cuda:sm_90a")
    assert kernel.info["params"][0]["written"]
    kernel._prepare(dry_run=True)
    assert kernel(torch.zeros(1024), 1000.0) is None
    assert kernel(torch.zeros(1024), 0.5) is None  # no blocks: nothing launched
    with pytest.raises(ValueError, match=r"grid dimension x is -1 \(from scalar parameter x=-300.0\)"):
        kernel(torch.zeros(1024), -300.0)


def test_compiled_kernel_in_a_dry_run():
    kernel = tilers.compile(kernels.add(256, 256, "float32"), out_idx=[2], target="cuda:sm_90a")
    kernel._prepare(dry_run=True)
    assert kernel(torch.randn(256, 256), torch.randn(256, 256)).shape == (256, 256)
    with pytest.raises(ValueError, match="parameter 'B': expected dtype float32"):
        kernel(torch.randn(256, 256), torch.randn(256, 256).double())


def test_out_idx_is_checked_once():
    with pytest.raises(TileError, match="out_idx 3 names scalar parameter 'n'"):
        JITKernel("add", "{}", ADD_SOURCE, info([tensor("A"), tensor("B"), tensor("C"),
                                                 scalar("n")], name="add"), "auto", [3])


# --- symbolic sizes (T.dynamic) --------------------------------------------------------

SIZE_M = {"size": 0}


def sized(name, dims, written=False, dtype="float16"):
    """A tensor parameter whose dimensions are numbers or {"size": k}."""
    spec = tensor(name, dtype, shape=(1, 1), written=written)
    spec["shape"] = list(dims)
    spec["strides"] = [1] * len(dims)  # not read for symbolic shapes: contiguous is required
    return spec


def sized_launcher(reader, multiple_of=1):
    params = [sized("A", [SIZE_M, N]), sized("B", [SIZE_M, N]), sized("C", [SIZE_M, N], True)]
    sizes = [{"name": "M", "dtype": "int32", "multiple_of": multiple_of,
              "from": [[0, 0], [1, 0], [2, 0]]}]
    grid = [{"op": "ceildiv", "a": SIZE_M, "b": {"const": 32}}, {"const": 1}, {"const": 1}]
    return make(params, reader, grid=grid, outputs=[2], sizes=sizes)


def test_sizes_are_bound_from_the_tensors(reader):
    launcher, kernel = sized_launcher(reader)
    for m in (1, 7, 128, 1000):
        c = launcher(fp16(m, N), fp16(m, N))
        assert c.shape == (m, N) and c.dtype == torch.float16
    assert kernel.calls == [] and kernel.loads == [0]
    # no blocks (M = 0): nothing loaded or launched, an empty output
    launcher, kernel = sized_launcher(reader)
    c = launcher(fp16(0, N), fp16(0, N))
    assert c.shape == (0, N) and kernel.loads == []


def test_calls_that_break_the_sizes_are_declined(reader):
    launcher, kernel = sized_launcher(reader, multiple_of=16)
    assert launcher(fp16(32, N), fp16(32, N)).shape == (32, N)
    declined = [
        (fp16(32, N), fp16(48, N)),      # A and B disagree on M
        (fp16(40, N), fp16(40, N)),      # not a multiple of 16
        (fp16(32, N + 1), fp16(32, N)),  # a fixed dimension
        (fp16(32), fp16(32, N)),         # rank
        (fp16(N, 32).t(), fp16(32, N)),  # not contiguous
    ]
    for args in declined:
        assert launcher(*args) == "checked in Python"
    assert len(kernel.calls) == len(declined)


def test_a_size_must_come_from_an_input(reader):
    params = [sized("A", [N]), sized("C", [SIZE_M, N], True)]
    sizes = [{"name": "M", "dtype": "int32", "multiple_of": 1, "from": [[1, 0]]}]
    with pytest.raises(ValueError, match="size 'M' is a dimension of no input tensor"):
        make(params, reader, outputs=[1], sizes=sizes)


@pytest.mark.parametrize("fast_launch", ["1", "0"])
def test_compiled_dynamic_kernel_in_a_dry_run(fast_launch, monkeypatch):
    monkeypatch.setenv("TILERS_FAST_LAUNCH", fast_launch)
    m_size = T.dynamic("M", multiple_of=8)
    kernel = tilers.compile(kernels.add(m_size, 256, "float32"), out_idx=[2], target="cuda:sm_90a")
    kernel._prepare(dry_run=True)
    for m in (0, 8, 4096):
        assert kernel(torch.randn(m, 256), torch.randn(m, 256)).shape == (m, 256)
    with pytest.raises(ValueError) as raised:
        kernel(torch.randn(8, 256), torch.randn(16, 256))
    assert str(raised.value) == (
        "parameter 'B': dimension 0 is 16, but parameter 'A' dimension 0 is 8: both are the "
        "size 'M' (T.dynamic), which must be the same in one call"
    )
    with pytest.raises(ValueError) as raised:
        kernel(torch.randn(12, 256), torch.randn(12, 256))
    assert str(raised.value) == (
        "parameter 'A': dimension 0 is the size 'M' = 12, which is not a multiple of 8 as "
        'T.dynamic("M", multiple_of=8) promises'
    )
    with pytest.raises(ValueError, match=r"expected a torch.Tensor|expected shape|shape \(M, 256\)"):
        kernel(torch.randn(8, 255), torch.randn(8, 255))
