"""The native launcher's checks on CPU tensors (dry run: no driver), where torch is installed.

The launcher (crates/tile-py/src/launcher.rs) must accept exactly what the Python checks
accept and pass everything else on to them: each declined call must reach the fallback
with its arguments untouched. GPU launches through it are in test_runtime_gpu.py.
"""

import json
import sys
import weakref

import pytest
from tilers import _tilers

torch = pytest.importorskip("torch")

M, N = 8, 128


@pytest.fixture(scope="module", autouse=True)
def shim():
    sample = torch.empty((3, 4, 5))[1:, ::2, 1:]
    problem = _tilers.load_torch_shim(sample, (torch.Tensor, torch.nn.Parameter))
    if not sys.platform.startswith("linux"):
        pytest.skip(problem or "the shim is only used on Linux")
    assert problem == ""  # a torch whose tensors the shim cannot read: launches go slow


class Fallback:
    """Stands in for JITKernel._call_checked: records what the launcher passes on."""

    def __init__(self):
        self.calls = []

    def call(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "checked in Python"


def empty_strided(shape, strides, dtype, device):
    # dry run on the CPU: the launcher asks for device 0
    return torch.empty_strided(shape, strides, dtype=dtype)


def code(dtype):
    return _tilers.tensor_codes(torch.empty(0, dtype=dtype))[0]


def tensor(dtype=torch.float16, shape=(M, N), strides=None, align=16):
    strides = strides or [shape[1], 1]
    return {"kind": "tensor", "dtype_code": code(dtype), "shape": list(shape),
            "strides": list(strides), "align": align}


def make(params, grid=None, outputs=(), output_dtypes=()):
    """A dry-run launcher over `params` (inputs: all but `outputs`) and its fallback."""
    fallback = Fallback()
    spec = {
        "params": params,
        "inputs": [i for i in range(len(params)) if i not in outputs],
        "outputs": list(outputs),
        "grid": grid or [{"const": 1}] * 3, "block": [128, 1, 1], "shared_bytes": 0,
        "device_type": _tilers.tensor_codes(torch.empty(0))[1], "devices": 1,
    }
    launcher = _tilers.Launcher(
        json.dumps(spec), list(output_dtypes), empty_strided, None,
        weakref.WeakMethod(fallback.call), True,
    )
    launcher.add_device(0, 0, 0)
    return launcher, fallback


def add_launcher():
    ceildiv_n = {"op": "ceildiv", "a": {"param": 3}, "b": {"const": 256}}
    params = [tensor(), tensor(), tensor(), {"kind": "scalar", "pack": "i"}]
    return make(params, grid=[ceildiv_n, {"const": 1}, {"const": 1}])


def fp16(*shape):
    return torch.zeros(shape or (M, N), dtype=torch.float16)


def test_tensor_codes():
    codes = {code(d) for d in (torch.float16, torch.bfloat16, torch.float32, torch.int32)}
    assert len(codes) == 4
    assert _tilers.tensor_codes([1, 2]) is None


def test_accepts_what_the_python_checks_accept():
    launcher, fallback = add_launcher()
    a, b, c = fp16(), fp16(), fp16()
    assert launcher(a, b, c, M * N) is None
    assert launcher(torch.nn.Parameter(a), b, c, 1) is None
    assert fallback.calls == []


@pytest.mark.parametrize("case", [
    "dtype", "shape", "strides", "misaligned", "not a tensor", "numpy", "subclass",
    "int too large", "bool for int", "float for int", "grid of zero blocks", "too few",
    "too many", "keyword",
])
def test_declines_and_passes_the_call_on(case):
    launcher, fallback = add_launcher()
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
    elif case == "subclass":
        class Tagged(torch.Tensor):
            pass
        args[1] = b.as_subclass(Tagged)
    elif case == "int too large":
        args[3] = 2**31
    elif case == "bool for int":
        args[3] = True
    elif case == "float for int":
        args[3] = 1000.0
    elif case == "grid of zero blocks":
        args[3] = 0
    elif case == "too few":
        args = args[:3]
    elif case == "too many":
        args.append(1)
    elif case == "keyword":
        kwargs = {"n": 1}
    assert launcher(*args, **kwargs) == "checked in Python"
    (passed_args, passed_kwargs), = fallback.calls
    assert all(x is y for x, y in zip(passed_args, args)) and len(passed_args) == len(args)
    assert passed_kwargs == kwargs


def test_strides_may_differ_along_extent_one():
    launcher, fallback = make([tensor(shape=(1, N), strides=(N, 1))])
    assert launcher(torch.zeros(2, N, dtype=torch.float16)[::2]) is None  # strides (2N, 1)
    assert launcher(torch.zeros(N, 5, dtype=torch.float16).t()[2:3]) == "checked in Python"
    assert len(fallback.calls) == 1


def test_scalar_ranges_and_kinds():
    kinds = "?bBhiIqfd"
    launcher, fallback = make([tensor()] + [{"kind": "scalar", "pack": k} for k in kinds])
    a = fp16()
    good = (True, -128, 255, -(2**15), -(2**31), 2**32 - 1, -(2**63), 3.4e38, 1e300)
    assert launcher(a, *good) is None
    assert launcher(a, False, 127, 0, 2**15 - 1, 2**31 - 1, 0, 2**63 - 1, 1, 2) is None
    assert fallback.calls == []
    bad = [1, 128, 256, 2**15, 2**31, -1, 2**63, 3.5e38, "x"]
    for position, value in enumerate(bad):
        args = list(good)
        args[position] = value
        assert launcher(a, *args) == "checked in Python", (kinds[position], value)
    assert len(fallback.calls) == len(bad)
    # an int for a float parameter is converted as float() does; inf and nan pass as such
    assert launcher(a, *good[:7], 2, float("inf")) is None
    assert launcher(a, *good[:7], float("nan"), 2**1024 - 1) == "checked in Python"


def test_outputs_are_allocated_and_returned():
    params = [tensor(), tensor(torch.float32), tensor()]
    launcher, fallback = make(params, outputs=[1, 2], output_dtypes=[torch.float32, torch.float16])
    x, y = launcher(fp16())
    assert x.dtype == torch.float32 and x.shape == (M, N) and y.dtype == torch.float16
    one, _ = make([tensor(), tensor()], outputs=[1], output_dtypes=[torch.float16])
    assert isinstance(one(fp16()), torch.Tensor)
    assert fallback.calls == []


@pytest.mark.parametrize("grid, n, blocks", [
    ({"op": "floordiv", "a": {"param": 1}, "b": {"const": 3}}, -7, None),  # -3: declined
    ({"op": "floordiv", "a": {"param": 1}, "b": {"const": -3}}, -7, 2),
    ({"op": "ceildiv", "a": {"param": 1}, "b": {"const": 4}}, 9, 3),
    ({"op": "max", "a": {"param": 1}, "b": {"const": 1}}, -5, 1),
    ({"op": "mul", "a": {"param": 1}, "b": {"const": 2**40}}, 2**40, None),  # overflow
    ({"op": "sub", "a": {"const": 70000}, "b": {"param": 1}}, 0, 70000),
])
def test_grid_follows_python(grid, n, blocks):
    launcher, fallback = make([tensor(), {"kind": "scalar", "pack": "q"}],
                              grid=[grid, {"const": 1}, {"const": 1}])
    result = launcher(fp16(), n)
    assert (result is None) == (blocks is not None)
    launcher, fallback = make([tensor(), {"kind": "scalar", "pack": "q"}],
                              grid=[{"const": 1}, grid, {"const": 1}])
    # y is limited to 65535 blocks
    assert (launcher(fp16(), n) is None) == (blocks is not None and blocks <= 65535)


def test_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="not an integer scalar"):
        make([tensor(), {"kind": "scalar", "pack": "f"}],
             grid=[{"param": 1}, {"const": 1}, {"const": 1}])
    with pytest.raises(ValueError, match="no tensor argument"):
        make([tensor(), {"kind": "scalar", "pack": "i"}], outputs=[0],
             output_dtypes=[torch.float16])
