"""``tilelang.contrib.nvcc`` by its names: the compute version of a target or of the GPU."""

from __future__ import annotations

import re


def get_target_compute_version(target=None) -> str:
    """The compute capability as ``"9.0"``: of ``target`` (``"cuda:sm_90a"``, ``"sm_80"``)
    when given, else of the current GPU; a ValueError when neither says."""
    if target is not None:
        m = re.search(r"sm_(\d+)(\d)[af]?$", str(target).strip())
        if not m:
            raise ValueError(f"parameter 'target': expected an sm_XY architecture, got {target!r}")
        return f"{m.group(1)}.{m.group(2)}"
    from .. import runtime

    if not runtime.gpu_available():
        raise ValueError("get_target_compute_version: no target given and no CUDA GPU usable")
    arch = runtime.device_arch(runtime._current_device_index())
    return get_target_compute_version(arch)


def parse_compute_version(compute_version: str) -> tuple[int, int]:
    """``"9.0"`` -> ``(9, 0)``."""
    major, minor = str(compute_version).split(".")[:2]
    return int(major), int(minor)


def have_tensorcore(compute_version: str | None = None, target=None) -> bool:
    major, _ = parse_compute_version(compute_version or get_target_compute_version(target))
    return major >= 7
