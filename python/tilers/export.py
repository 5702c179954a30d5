"""Ahead-of-time export: a compiled kernel as files a C or C++ program builds and launches
with only the CUDA driver at run time (docs/export.md).

>>> kernel.export("build/kernels")                    # gemm.cu, gemm.json, gemm.cubin,
...                                                   # tilers_gemm.h, tilers_gemm.c
>>> tilers.export.dispatcher("build/kernels", "gemm", [
...     ("gemm_small", small, {"M": (1, 128)}),       # exported here under that name
...     ("gemm_large", large, {}),                    # the rest
... ])
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tilers.errors import TileError


def _check_name(name: str, what: str) -> None:
    if not (name and (name[0].isalpha() or name[0] == "_") and all(
        c.isascii() and (c.isalnum() or c == "_") for c in name
    )):
        raise TileError(f"{what} {name!r} is not a C identifier (letters, digits and _)")


def export_kernel(kernel, directory, name: str | None = None) -> dict[str, Path]:
    """Write `kernel`'s CUDA source, KernelInfo, cubin and C launcher into `directory`, the
    files `tilers-cc program.json -o DIR --name NAME` writes: ``NAME.cu``, ``NAME.json``,
    ``NAME.cubin``, ``tilers_NAME.h`` and ``tilers_NAME.c`` (``tilers_NAME_launch``). NAME
    is the kernel's unless given (a C identifier). Returns the paths by suffix."""
    from tilers import _tilers

    name = kernel.name if name is None else name
    _check_name(name, "the export name")
    if kernel.source is None:
        raise TileError(
            f"kernel '{kernel.name}' was compiled for the interpreter (target=\"interp\"): it has "
            "no GPU code to export; compile it with target=\"cuda:sm_90a\" (or the GPU's arch)"
        )
    info_json = json.dumps(kernel.info)
    try:
        header, source = _tilers.export_c(info_json, kernel.cubin, name)
    except ValueError as error:
        raise TileError(f"kernel '{kernel.name}' cannot be exported: {error}") from None
    directory = Path(directory)
    os.makedirs(directory, exist_ok=True)
    files = {
        ".cu": (directory / f"{name}.cu", kernel.source.encode()),
        ".json": (directory / f"{name}.json", info_json.encode()),
        ".cubin": (directory / f"{name}.cubin", kernel.cubin),
        ".h": (directory / f"tilers_{name}.h", header.encode()),
        ".c": (directory / f"tilers_{name}.c", source.encode()),
    }
    for path, data in files.values():
        path.write_bytes(data)
    return {suffix: path for suffix, (path, _) in files.items()}


def _conditions(when) -> list[str]:
    """{"M": (1, 128), "A.0": (None, 64)} or ["M=1..128"] as the dispatcher's texts."""
    if isinstance(when, dict):
        texts = []
        for key, bounds in when.items():
            low, high = bounds
            texts.append(f"{key}={'' if low is None else int(low)}..{'' if high is None else int(high)}")
        return texts
    return [str(w) for w in when]


def dispatcher(directory, name: str, members) -> dict[str, Path]:
    """Write ``tilers_NAME.h`` / ``tilers_NAME.c``: ``tilers_NAME_launch`` runs a call on the
    first of `members` whose conditions hold and whose checks take the call's shapes (a
    config per size bucket, as Triton's AOT link step makes). Each member is ``(export_name,
    kernel, when)``: `kernel` a JITKernel exported here under `export_name`, or None for one
    exported into `directory` before; `when` a dict of inclusive ranges on sizes or tensor
    dimensions, ``{"M": (1, 128), "A.0": (None, 64)}`` (None: open), or {} for always.
    The members share one signature (tensors and scalars of the same dtypes and ranks)."""
    from tilers import _tilers

    _check_name(name, "the dispatcher name")
    directory = Path(directory)
    specs = []
    for member, kernel, when in members:
        _check_name(member, "the specialization name")
        if kernel is not None:
            export_kernel(kernel, directory, member)
        info_path = directory / f"{member}.json"
        if not info_path.is_file():
            raise TileError(
                f"specialization '{member}': {info_path} does not exist; export the kernel "
                "first (kernel.export(directory, name)) or pass it in the member"
            )
        specs.append((member, info_path.read_text(encoding="utf-8"), _conditions(when)))
    try:
        header, source = _tilers.export_dispatcher(name, specs)
    except ValueError as error:
        raise TileError(f"dispatcher '{name}': {error}") from None
    files = {".h": directory / f"tilers_{name}.h", ".c": directory / f"tilers_{name}.c"}
    files[".h"].write_text(header, encoding="utf-8")
    files[".c"].write_text(source, encoding="utf-8")
    return files
