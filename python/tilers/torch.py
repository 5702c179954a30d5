"""tilers kernels as PyTorch operators: ``tilers.torch.custom_op(kernel, "mylib::op")``.

The operator is registered through ``torch.library`` with a schema made from the kernel's
KernelInfo: its tensor inputs and scalars in order, the parameters it writes that the
caller passes (``written`` and not in ``out_idx``) marked as mutated (``Tensor(a!)``), and its
``out_idx`` outputs returned. The fake (meta) implementation allocates the outputs from
KernelInfo's shapes (``T.dynamic`` sizes read from the inputs that carry them) without
running anything, so the op works under ``torch.compile(fullgraph=True)`` (no graph break),
``torch.export`` and inside CUDA graph capture (a call allocates its outputs through torch's
caching allocator and does not synchronize). ``backward=`` registers autograd
(``torch.library.register_autograd``) with the user's backward function.

The real implementation is the kernel itself, registered for the device its target runs on
(CUDA for a GPU target, CPU for ``target="interp"``, whose kernels take CPU tensors)."""

from __future__ import annotations

import re

import torch as _torch_mod

from .errors import TileError

_LIBRARIES: dict[str, object] = {}  # namespace -> torch.library.Library, kept alive
_SCALAR_TYPES = {"bool": "bool", "float16": "float", "bfloat16": "float", "float32": "float",
                 "float64": "float"}


def _scalar_schema(dtype: str) -> str:
    return _SCALAR_TYPES.get(dtype, "int")


def _schema_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


def custom_op(kernel, name: str, *, backward=None, setup_context=None):
    """Register ``kernel`` (a compiled tilers kernel) as the torch operator ``name``
    (``"namespace::op"``) and return it (``torch.ops.namespace.op``)."""
    from .kernel import JITKernel

    if not isinstance(kernel, JITKernel):
        raise TypeError(
            f"parameter 'kernel': expected a compiled tilers kernel (tilers.compile(...) or a "
            f"@tilers.jit factory's result), got {type(kernel).__name__}"
        )
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*::[A-Za-z_]\w*", name):
        raise ValueError(f"parameter 'name': expected 'namespace::op', got {name!r}")
    namespace, op = name.split("::")
    if hasattr(getattr(_torch_mod.ops, namespace), op):
        raise ValueError(f"parameter 'name': the operator {name} is already registered")
    params = kernel.info["params"]
    outputs = list(kernel.out_idx)
    args, inputs, mutated = [], [], []
    for i, spec in enumerate(params):
        if i in outputs:
            continue
        pname = _schema_name(spec["name"])
        if spec["kind"] == "scalar":
            args.append(f"{_scalar_schema(spec['dtype'])} {pname}")
        elif spec.get("written"):
            args.append(f"Tensor(a{len(mutated)}!) {pname}")
            mutated.append(i)
        else:
            args.append(f"Tensor {pname}")
        inputs.append(i)
    returns = "()" if not outputs else ("Tensor" if len(outputs) == 1 else
                                         "(" + ", ".join("Tensor" for _ in outputs) + ")")
    schema = f"({', '.join(args)}) -> {returns}"
    lib = _LIBRARIES.get(namespace)
    if lib is None:
        lib = _torch_mod.library.Library(namespace, "FRAGMENT")
        _LIBRARIES[namespace] = lib
    lib.define(op + schema)
    device = "CPU" if kernel.arch == "interp" or kernel.source is None else "CUDA"

    def real(*call_args):
        out = kernel(*call_args)
        if not outputs:
            return None
        return out

    lib.impl(op, real, device)

    def fake(*call_args):
        tensors = {i: a for i, a in zip(inputs, call_args)}
        first = next((a for a in call_args if isinstance(a, _torch_mod.Tensor)), None)
        sizes = []
        for size in kernel.info.get("sizes", []):
            value = None
            for param, dim in size["from"]:
                if param in tensors and isinstance(tensors[param], _torch_mod.Tensor):
                    value = tensors[param].shape[dim]
                    break
            sizes.append(value)
        made = []
        for i in outputs:
            spec = params[i]
            shape = [sizes[d["size"]] if isinstance(d, dict) else d for d in spec["shape"]]
            if any(s is None for s in shape):
                raise TileError(
                    f"{name}: output '{spec['name']}' has a T.dynamic size no input carries"
                )
            made.append(_torch_mod.empty(shape, dtype=getattr(_torch_mod, spec["dtype"]),
                                         device=first.device if first is not None else None))
        if not outputs:
            return None
        return made[0] if len(made) == 1 else tuple(made)

    _torch_mod.library.register_fake(name, fake, lib=lib)
    if backward is not None:
        _torch_mod.library.register_autograd(name, backward, setup_context=setup_context, lib=lib)
    return getattr(getattr(_torch_mod.ops, namespace), op)
