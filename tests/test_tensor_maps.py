"""Kernels with TMA tensor maps on the native launcher, in a dry run (CPU tensors, no driver).

The launcher (crates/tile-py/src/launcher.rs, tensor_map.rs) encodes one tensor map per
KernelInfo `tensor_maps` entry for every call and passes them after the parameters and
the sizes. A dry run checks each map's encode arguments (the shape, strides and pointer
of the call) and stops short of the driver; the encoding itself, the cache and the
kernel's view of the maps are tested on the GPU. The encode arguments themselves are
tested by `cargo test -p tile-py` (tensor_map.rs).
"""

import json
import sys
import weakref

import pytest
from tilers import _tilers

torch = pytest.importorskip("torch")


@pytest.fixture(params=["shim", "attributes"])
def reader(request):
    """Read tensors through torch's C shim, or through their Python attributes."""
    if request.param == "shim":
        if not sys.platform.startswith("linux"):
            pytest.skip("the shim is only used on Linux")
        assert _tilers.load_torch_shim(torch) == ""
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


def tensor(name, shape, dtype="float16", align=16, written=False, strides=None):
    """A tensor parameter, contiguous unless `strides` says otherwise; a dimension or
    stride is a number or an expression of the sizes ({"size": k})."""
    if strides is None:
        strides = [1]
        for extent in reversed(shape[1:]):
            strides.insert(0, strides[0] * extent)
    return {"kind": "tensor", "name": name, "dtype": dtype, "shape": list(shape),
            "strides": list(strides), "align": align, "written": written}


def tmap(param, box, swizzle=128):
    return {"param": param, "box": list(box), "swizzle": swizzle}


def make(reader, params, maps, outputs=(), grid=None, sizes=None):
    kernel = Kernel()
    info = {
        "name": "k", "entry": "k_kernel", "arch": "sm_90a", "params": params,
        "grid": grid or [{"const": 1}] * 3, "threads": 128, "block": [256, 1, 1],
        "shared_bytes": 0, "shared_opt_in": False, "tensor_maps": maps,
    }
    if sizes:
        info["sizes"] = sizes
    launcher = _tilers.Launcher(
        json.dumps(info), list(outputs), torch,
        weakref.WeakMethod(kernel.load), weakref.WeakMethod(kernel.declined),
        dry_run=True, torch_shim=reader == "shim",
    )
    return launcher, kernel


def fp16(*shape):
    return torch.zeros(shape, dtype=torch.float16)


def test_a_kernel_with_tensor_maps_is_accepted(reader):
    # C = A @ B with both operands read through tensor maps, C allocated by the launcher
    params = [tensor("A", [256, 128]), tensor("B", [128, 64]),
              tensor("C", [256, 64], dtype="float32", written=True)]
    maps = [tmap(0, [128, 64]), tmap(1, [64, 64])]
    launcher, kernel = make(reader, params, maps, outputs=[2])
    a, b = fp16(256, 128), fp16(128, 64)
    c = launcher(a, b)
    assert isinstance(c, torch.Tensor) and c.shape == (256, 64) and c.dtype == torch.float32
    assert launcher(a, b).shape == (256, 64)  # a second call: the same tensors
    assert kernel.calls == [] and kernel.loads == [0]


def test_a_map_of_an_output(reader):
    # a map may describe a tensor the launcher allocates (a TMA store of the result)
    params = [tensor("A", [64, 64], dtype="bfloat16"),
              tensor("C", [64, 64], dtype="bfloat16", written=True)]
    maps = [tmap(0, [64, 64]), tmap(1, [32, 64])]
    launcher, kernel = make(reader, params, maps, outputs=[1])
    c = launcher(torch.zeros(64, 64, dtype=torch.bfloat16))
    assert c.shape == (64, 64) and c.dtype == torch.bfloat16
    assert kernel.calls == []


def test_many_maps_and_a_batched_tensor(reader):
    # more maps than the launcher keeps on the stack, one of a 3D batched tensor, and
    # unswizzled and narrow-swizzle boxes
    params = [tensor(f"X{i}", [4, 64, 32]) for i in range(6)]
    maps = [tmap(i, [1, 64, 32], swizzle=[0, 64, 128][i % 3]) for i in range(6)]
    launcher, kernel = make(reader, params, maps)
    xs = [fp16(4, 64, 32) for _ in range(6)]
    assert launcher(*xs) is None
    assert kernel.calls == []


M = {"size": 0}
K = {"size": 1}
CEILDIV_M = {"op": "ceildiv", "a": M, "b": {"const": 64}}


def dynamic(reader):
    """A[M, K] through a map with a 64 x 8 box; C[M, K] allocated; grid ceildiv(M, 64)."""
    params = [tensor("A", [M, K], strides=[K, 1]),
              tensor("C", [M, K], strides=[K, 1], written=True)]
    sizes = [{"name": "M", "dtype": "int32", "multiple_of": 1, "from": [[0, 0], [1, 0]]},
             {"name": "K", "dtype": "int32", "multiple_of": 1, "from": [[0, 1], [1, 1]]}]
    return make(reader, params, [tmap(0, [64, 8], swizzle=0)], outputs=[1],
                grid=[CEILDIV_M, {"const": 1}, {"const": 1}], sizes=sizes)


def test_symbolic_sizes_give_the_maps_shape(reader):
    launcher, kernel = dynamic(reader)
    assert launcher(fp16(100, 24)).shape == (100, 24)
    assert launcher(fp16(1000, 8)).shape == (1000, 8)
    # M = 0: no blocks, returned before any map is encoded (a map has no 0 dimension)
    assert launcher(fp16(0, 24)).shape == (0, 24)
    assert kernel.calls == []


def test_a_call_that_cannot_be_encoded_names_the_parameter(reader):
    launcher, kernel = dynamic(reader)
    # rows of 4 fp16 are 8 bytes apart: TMA needs strides that are multiples of 16 bytes
    with pytest.raises(ValueError, match=(
            r"the tensor map of parameter 'A': the stride of dimension 0 is 4 elements: "
            r"8 bytes, not a positive multiple of 16")):
        launcher(fp16(100, 4))
    assert kernel.calls == []


def test_a_misaligned_tensor_is_still_declined(reader):
    # the parameter's 16-byte alignment is checked first: Python's checks explain it
    params = [tensor("A", [64, 64])]
    launcher, kernel = make(reader, params, [tmap(0, [64, 64])])
    view = fp16(64 * 64 + 8)[1:64 * 64 + 1].view(64, 64)  # 2 bytes past a multiple of 16
    assert launcher(view) == "checked in Python"
    assert len(kernel.calls) == 1


@pytest.mark.parametrize("maps, params, message", [
    ([tmap(1, [64, 64])], None, "a tensor map of parameter 1, which is not a tensor"),
    ([tmap(5, [64, 64])], None, "a tensor map of parameter 5, which is not a tensor"),
    ([tmap(0, [64])], None,
     r"Launcher: the tensor map of parameter 'A': the box \[64\] has 1 dimensions, the tensor 2"),
    ([tmap(0, [64, 64], swizzle=16)], None, "a swizzle of 16 bytes"),
    ([tmap(0, [64, 300], swizzle=0)], None, "has an extent of 300; each must be 1 to 256"),
    ([tmap(0, [64, 64], swizzle=64)], None, "rows of 128 bytes, wider than its 64-byte swizzle"),
    ([tmap(0, [64, 4], swizzle=0)], None,
     r"rows of 8 bytes \(4 x float16\); TMA needs a multiple of 16"),
    ([tmap(0, [64, 64])], [tensor("A", [64, 64], align=8)], "needs 16-byte aligned data"),
    ([tmap(0, [1] * 6)], [tensor("A", [2] * 6)], "the tensor has 6 dimensions; TMA copies 1 to 5"),
])
def test_maps_it_cannot_encode_are_refused(reader, maps, params, message):
    params = params or [tensor("A", [64, 64]), {"kind": "scalar", "name": "n", "dtype": "int32"}]
    with pytest.raises(ValueError, match=message):
        make(reader, params, maps)


def test_clusters_are_still_refused(reader):
    # (a tile per block in clusters of 2 with a grid of one block along x)
    kernel = Kernel()
    info = {
        "name": "k", "entry": "k_kernel", "arch": "sm_90a", "params": [tensor("A", [64, 64])],
        "grid": [{"const": 1}] * 3, "threads": 128, "block": [128, 1, 1], "cluster": [2, 1, 1],
        "shared_bytes": 0, "shared_opt_in": False, "tensor_maps": [tmap(0, [64, 64])],
    }
    with pytest.raises(ValueError, match="thread-block cluster"):
        _tilers.Launcher(json.dumps(info), [], torch, weakref.WeakMethod(kernel.load),
                         weakref.WeakMethod(kernel.declined), dry_run=True,
                         torch_shim=reader == "shim")
