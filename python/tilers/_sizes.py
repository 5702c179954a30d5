"""Symbolic sizes (T.dynamic) on the Python side of a call: the shapes KernelInfo writes with
sizes in them, and the binding of each size from the tensors a call gives.

The native launcher (crates/tile-py/src/launcher.rs) binds sizes itself on the fast path
and declines a call that breaks a rule below; these functions are the same rules for the
interpreter path (host.py) and for the errors that explain a declined call (kernel.py).
"""

from __future__ import annotations

SIZE_MAX = {"int32": 2**31 - 1, "int64": 2**63 - 1}


def size_of(extent):
    """The size number of a KernelInfo extent ``{"size": k}``, or None for a number."""
    if isinstance(extent, dict) and set(extent) == {"size"}:
        return extent["size"]
    return None


def is_symbolic(spec: dict) -> bool:
    return spec["kind"] == "tensor" and any(not isinstance(e, int) for e in spec["shape"])


def shape_text(spec: dict, info: dict) -> str:
    """(M, 64), as the user declared it."""
    parts = []
    for extent in spec["shape"]:
        k = size_of(extent)
        parts.append(str(extent) if k is None else info["sizes"][k]["name"])
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def shape_at(spec: dict, sizes: list[int]) -> tuple[int, ...]:
    """The shape of a tensor parameter for a call whose sizes are `sizes`."""
    out = []
    for extent in spec["shape"]:
        k = size_of(extent)
        out.append(extent if k is None else sizes[k])
    return tuple(out)


def check_shape(name: str, spec: dict, info: dict, shape: tuple, what: str = "tensor") -> None:
    """Raise ValueError when `shape` cannot be the parameter's: another rank, or another
    value of a fixed dimension (symbolic dimensions are checked by `bind`)."""
    want = spec["shape"]
    if len(shape) == len(want) and all(
        size_of(e) is not None or e == got for e, got in zip(want, shape)
    ):
        return
    if any(size_of(e) is not None for e in want):
        raise ValueError(
            f"parameter '{name}': expected a {what} of shape {shape_text(spec, info)}, got "
            f"{tuple(shape)}"
            + (
                f" ({len(shape)} dimensions, not {len(want)})"
                if len(shape) != len(want)
                else ""
            )
        )
    raise ValueError(
        f"parameter '{name}': expected shape {tuple(want)}, got {tuple(shape)} "
        "(the kernel was compiled for that shape)"
    )


def bind(info: dict, shapes: dict[int, tuple]) -> list[int]:
    """The value of each size for a call whose input tensors (parameter position → shape)
    are `shapes`, or a ValueError naming what is wrong: two tensors that disagree on a
    size (naming both), a value past the size's type or off its declared multiple."""
    params = info["params"]
    values = []
    for size in info.get("sizes", []):
        name = size["name"]
        value = first = None
        for param, dim in size["from"]:
            if param not in shapes:
                continue
            got = shapes[param][dim]
            if value is None:
                value, first = got, (param, dim)
            elif got != value:
                p0, d0 = first
                raise ValueError(
                    f"parameter '{params[param]['name']}': dimension {dim} is {got}, but "
                    f"parameter '{params[p0]['name']}' dimension {d0} is {value}: both are "
                    f"the size '{name}' (T.dynamic), which must be the same in one call"
                )
        if value is None:
            carriers = ", ".join(params[p]["name"] for p, _ in size["from"])
            raise ValueError(
                f"size '{name}' is a dimension of no input of this call ({carriers}): "
                "pass a tensor that carries it"
            )
        p0, d0 = first
        where = f"parameter '{params[p0]['name']}': dimension {d0} is the size '{name}' = {value}"
        limit = SIZE_MAX.get(size["dtype"], SIZE_MAX["int32"])
        if value > limit:
            hint = (
                f' (declare it T.dynamic("{name}", "int64"))' if size["dtype"] == "int32" else ""
            )
            raise ValueError(f"{where}, over the {size['dtype']} limit of {limit}{hint}")
        multiple = size.get("multiple_of", 1)
        if value % multiple:
            raise ValueError(
                f"{where}, which is not a multiple of {multiple} as "
                f'T.dynamic("{name}", multiple_of={multiple}) promises'
            )
        values.append(value)
    return values
