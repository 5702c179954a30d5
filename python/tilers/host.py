"""Running a kernel on host arrays (numpy, or CPU torch tensors) with the tilers interpreter."""

from __future__ import annotations

import json
import sys

from tilers import _sizes

# numpy dtype names of the KernelInfo dtypes; bfloat16 comes from ml_dtypes
NUMPY_DTYPES = {
    "bool": "bool", "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16",
    "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
    "float16": "float16", "float32": "float32", "float64": "float64",
}


def numpy_dtype(name: str):
    import numpy

    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as error:
            raise RuntimeError(
                "bfloat16 host arrays need the ml_dtypes package (pip install ml_dtypes)"
            ) from error
        return numpy.dtype(ml_dtypes.bfloat16)
    return numpy.dtype(NUMPY_DTYPES[name])


def is_host_array(arg) -> bool:
    """A numpy array or a CPU torch tensor (without importing either)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(arg, numpy.ndarray):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(arg, torch.Tensor) and arg.device.type == "cpu"


def is_gpu_tensor(arg) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(arg, torch.Tensor) and arg.device.type != "cpu"


KDL_CUDA = 2  # DLPack's device type of CUDA memory


def is_dlpack_gpu_array(arg) -> bool:
    """An array of another framework (CuPy, JAX, ...) in CUDA memory, by the DLPack protocol."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(arg, torch.Tensor):
        return False
    device = getattr(arg, "__dlpack_device__", None)
    if device is None or not hasattr(arg, "__dlpack__"):
        return False
    try:
        return device()[0] == KDL_CUDA
    except Exception:
        return False


def as_numpy(name: str, spec: dict, arg, info: dict):
    """A writable numpy view of a host argument, checked against the parameter's spec (its
    symbolic dimensions are bound afterwards, by `_sizes.bind`)."""
    import numpy

    want = numpy_dtype(spec["dtype"])
    shape = _sizes.shape_text(spec, info)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(arg, torch.Tensor):
        if arg.dtype != getattr(torch, spec["dtype"]):
            raise ValueError(
                f"parameter '{name}': expected dtype {spec['dtype']}, got {arg.dtype} "
                f"(tilers never casts silently)"
            )
        if not arg.is_contiguous():
            raise ValueError(f"parameter '{name}': expected a contiguous tensor — pass {name}.contiguous()")
        view = arg.view(torch.int16).numpy().view(want) if spec["dtype"] == "bfloat16" else arg.numpy()
    elif isinstance(arg, numpy.ndarray):
        view = arg
    else:
        raise TypeError(
            f"parameter '{name}': expected a numpy array of {spec['dtype']} with shape "
            f"{shape}, got {type(arg).__name__}"
        )
    if view.dtype != want:
        raise ValueError(
            f"parameter '{name}': expected dtype {spec['dtype']}, got {view.dtype} "
            f"(tilers never casts silently: pass {name}.astype(...))"
        )
    _sizes.check_shape(name, spec, info, tuple(view.shape), "numpy array")
    if not view.flags.c_contiguous:
        raise ValueError(
            f"parameter '{name}': expected a C-contiguous array, got strides {view.strides} "
            f"— pass numpy.ascontiguousarray({name})"
        )
    if not view.flags.writeable and spec.get("written", True):
        raise ValueError(
            f"parameter '{name}': the kernel writes it, and the array is read-only; pass a writable copy"
        )
    return view


def call(kernel, args, scalar_check):
    """Run `kernel` on host arguments with the interpreter; return its outputs (out_idx)."""
    import numpy

    from tilers import _tilers
    from tilers.errors import TileError

    specs = kernel.info["params"]
    views = {}
    values = [None] * len(specs)
    torch_inputs = False
    for position, arg in zip(kernel._input_positions, args):
        spec = specs[position]
        if spec["kind"] == "tensor":
            views[position] = as_numpy(spec["name"], spec, arg, kernel.info)
            torch_inputs |= not isinstance(arg, numpy.ndarray)
        else:
            values[position] = scalar_check(position, arg)
    written = [p for p in views if specs[p].get("written", True)]
    for i, p in enumerate(written):
        for q in written[i + 1 :]:
            if numpy.shares_memory(views[p], views[q]):
                raise TileError(
                    f"parameters '{specs[p]['name']}' and '{specs[q]['name']}' are the same memory "
                    "and the kernel writes both; the interpreter cannot order their writes: pass "
                    "separate arrays"
                )
    sizes = _sizes.bind(kernel.info, {p: tuple(v.shape) for p, v in views.items()})
    outputs = []
    for position in kernel.out_idx:
        spec = specs[position]
        out = numpy.zeros(_sizes.shape_at(spec, sizes), dtype=numpy_dtype(spec["dtype"]))
        views[position] = out
        outputs.append(out)
    for position, view in views.items():
        values[position] = view.tobytes()
    values.extend(sizes)  # the sizes follow the parameters, as the CUDA kernel takes them
    try:
        results = _tilers.interpret(kernel.program_json, values, json.dumps({"arch": kernel.arch}))
    except _tilers.CompileError as error:
        raise TileError(str(error)) from None
    # only tensors the kernel writes come back: an input passed twice (in place, `k(a, a)`)
    # must not have its result overwritten by the unchanged copy of the other parameter
    for position, data in enumerate(results):
        if data is not None and (specs[position].get("written", True) or position in kernel.out_idx):
            view = views[position]
            numpy.copyto(view, numpy.frombuffer(data, dtype=view.dtype).reshape(view.shape))
    if torch_inputs:
        import torch

        outputs = [_to_torch(torch, out) for out in outputs]
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _to_torch(torch, array):
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(array)
