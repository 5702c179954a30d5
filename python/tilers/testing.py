"""Testing helpers: check a program through every pass of the compiler without a GPU.

>>> result = tilers.testing.check_passes(matmul(256, 256, 256))
>>> print(result)              # one line per pass: ok / mismatch / error / skipped
>>> result.assert_ok()         # AssertionError naming the first pass that changed the answer

The module after every pass runs on the same seeded random inputs: tile-level stages on the
reference interpreter, thread-level stages (after ``lower_tile_ops``) on a warp-level model
that also reports races, deadlocks, ``cp.async`` data read in flight and out-of-bounds
accesses. Each stage's outputs are compared with the tile-level result (the program after
``verify`` and ``simplify``): integers bit-exactly, floats within a tolerance of their dtype.
"""

from __future__ import annotations

import dataclasses
import json

from .errors import TileError

__all__ = ["PassCheckResult", "StageResult", "check_passes"]

# IR lines shown per side in a failure message (the whole text is in .ir_before / .ir_after)
_IR_LINES = 400


@dataclasses.dataclass
class StageResult:
    """One pass: ``status`` is "ok", "mismatch", "error" or "skipped" (a tile-level module
    past ``simplify`` holding constructs only the lowering reads)."""

    pass_name: str
    level: str
    status: str
    message: str = ""
    seconds: float = 0.0
    mismatch: dict | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("mismatch", "error")


@dataclasses.dataclass
class PassCheckResult:
    """The outcome of :func:`check_passes`; ``str()`` is a table, ``assert_ok()`` raises."""

    name: str
    stages: list
    seed: int = 0
    blocks: str = "edges"
    arch: str = "sm_80"
    ir_before: str | None = None
    ir_after: str | None = None

    @classmethod
    def from_json(cls, text: str | dict) -> PassCheckResult:
        data = json.loads(text) if isinstance(text, str) else text
        stages = [
            StageResult(
                pass_name=s["pass"],
                level=s.get("level", "tile"),
                status=s["status"],
                message=s.get("message", ""),
                seconds=float(s.get("seconds", 0.0)),
                mismatch=s.get("mismatch"),
            )
            for s in data["stages"]
        ]
        return cls(
            name=data.get("name", "?"),
            stages=stages,
            seed=data.get("seed", 0),
            blocks=data.get("blocks", "edges"),
            arch=data.get("arch", "sm_80"),
            ir_before=data.get("ir_before"),
            ir_after=data.get("ir_after"),
        )

    @property
    def ok(self) -> bool:
        return self.first_failure is None

    @property
    def first_failure(self) -> StageResult | None:
        """The first pass whose output disagrees with the reference (None when all agree)."""
        return next((s for s in self.stages if s.failed), None)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

    def table(self) -> str:
        width = max([len("pass")] + [len(s.pass_name) for s in self.stages])
        lines = [
            f"check_passes {self.name} ({self.arch}, seed {self.seed}, blocks {self.blocks}): "
            + ("ok" if self.ok else f"FAILED at {self.first_failure.pass_name}"),
            f"  {'pass':<{width}}  level   status    time    detail",
        ]
        for s in self.stages:
            detail = s.message.splitlines()[0] if s.message else ""
            lines.append(
                f"  {s.pass_name:<{width}}  {s.level:<6}  {s.status:<8}  {s.seconds:6.3f}s  {detail}".rstrip()
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def failure_message(self) -> str:
        """What assert_ok raises with: the first failing pass, its report, the IR around it."""
        bad = self.first_failure
        if bad is None:
            return ""
        index = self.stages.index(bad)
        before = self.stages[index - 1].pass_name if index > 0 else "simplify"
        parts = [
            f"pass '{bad.pass_name}' changed the answer of '{self.name}' "
            f"(the first failing pass; seed {self.seed}, blocks {self.blocks}): {bad.status}",
            f"  {bad.message}",
            "",
            self.table(),
            "",
            f"IR before '{bad.pass_name}' (after '{before}'):",
            _clip(self.ir_before),
            "",
            f"IR after '{bad.pass_name}':",
            _clip(self.ir_after),
        ]
        return "\n".join(parts)

    def assert_ok(self) -> PassCheckResult:
        if not self.ok:
            raise AssertionError(self.failure_message())
        return self


def _clip(text: str | None) -> str:
    if text is None:
        return "  (not available)"
    lines = text.splitlines()
    if len(lines) > _IR_LINES:
        lines = lines[:_IR_LINES] + [
            f"... {len(lines) - _IR_LINES} more lines (see .ir_before / .ir_after)"
        ]
    return "\n".join("  " + line for line in lines)


def _program_json(target, params) -> str:
    from ._trace import PrimFunc, program_json, trace
    from .jit import JitFunction
    from .kernel import JITKernel

    if isinstance(target, JITKernel):
        if params:
            raise TileError(
                "check_passes: a compiled kernel takes no parameters; pass the prim_func"
            )
        return target.program_json
    if isinstance(target, JitFunction):
        target = target.prim_func(**params)
        params = {}
    if isinstance(target, PrimFunc):
        return program_json(trace(target, params))
    if isinstance(target, str):  # a serialized program
        return target
    raise TileError(
        "check_passes expects a @T.prim_func, a @tilers.jit factory, a compiled kernel or a "
        f"serialized program, got {type(target).__name__}"
    )


def check_passes(
    prim_func,
    *,
    seed: int = 0,
    blocks: str = "edges",
    arch: str = "sm_80",
    check: bool = False,
    compile_options: dict | None = None,
    zeros: tuple = (),
    **params,
) -> PassCheckResult:
    """Run ``prim_func`` (a ``@T.prim_func``, a ``@tilers.jit`` factory, a kernel it
    returned, or a serialized program) on seeded random inputs after every pass and compare
    each stage with the tile-level result.

    ``params`` rebind the function's free names (as in :func:`tilers.compile`).
    ``blocks="edges"`` runs the first and last block along each grid axis (fast; ragged
    tiles are in the last); ``"all"`` runs the whole grid, as a persistent kernel and one
    in thread-block clusters always do (a cluster's blocks wait for each other). With ``check=True`` a failure
    raises ``AssertionError`` at once (else call ``.assert_ok()``). ``compile_options`` take
    :func:`tilers.compile`'s switches that choose another kernel (``{"persistent":
    "pingpong"}``, ``{"tma": False}``, ``wgmma``, ``tma_store``, ``{"cluster": (2, 1)}``).
    ``zeros`` names tensor parameters that start as zeros instead of random values (a
    counter the kernel requires zeroed).
    """
    if blocks not in ("edges", "all"):
        raise TileError(f"check_passes: blocks must be 'edges' or 'all', got {blocks!r}")
    from . import _tilers

    program_json = _program_json(prim_func, params)
    opts = {"arch": arch, "seed": int(seed), "blocks": blocks}
    if zeros:
        opts["zeros"] = [str(z) for z in zeros]
    for key, value in (compile_options or {}).items():
        if key == "persistent" and value == "pingpong":
            opts["pingpong"] = True
        elif key == "cluster":
            from .jit import _cluster

            dims = _cluster(value)
            if dims is not None:
                opts["cluster"] = list(dims)
        elif key in ("wgmma", "tma", "persistent", "tma_store"):
            opts[key] = bool(value)
        else:
            raise TileError(
                f"check_passes: compile_options takes wgmma, tma, persistent, tma_store and cluster, got {key!r}"
            )
    options = json.dumps(opts)
    try:
        text = _tilers.check_passes(program_json, options)
    except _tilers.CompileError as err:
        raise TileError(str(err)) from None
    result = PassCheckResult.from_json(text)
    if check:
        result.assert_ok()
    return result


# ---------------------------------------------------------------------------------------
# TileLang's testing helpers, by its names (tilelang.testing)
# ---------------------------------------------------------------------------------------


def torch_assert_close(
    tensor_a, tensor_b, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001, verbose=False,
    equal_nan=True, check_device=True, check_dtype=True, check_layout=True,
    check_stride=False, base_name="LHS", ref_name="RHS",
):
    """Raise AssertionError when more than ``max_mismatched_ratio`` of the elements differ
    by more than ``atol + rtol * |b|`` (TileLang's check; ``torch.testing.assert_close``
    allows no mismatch); True otherwise. Shapes must agree, and dtypes and devices when
    checked."""
    from .utils.tensor import torch_assert_close as check

    return check(
        tensor_a, tensor_b, rtol=rtol, atol=atol, max_mismatched_ratio=max_mismatched_ratio,
        verbose=verbose, equal_nan=equal_nan, check_device=check_device,
        check_dtype=check_dtype, check_layout=check_layout, check_stride=check_stride,
        base_name=base_name, ref_name=ref_name,
    )


def set_random_seed(seed: int = 42) -> None:
    """Seed Python's, numpy's and torch's generators (every GPU's too)."""
    import random

    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _gpu_capability():
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_capability()
    except Exception:  # noqa: BLE001 - no usable torch means no GPU
        pass
    return None


def _skip_unless(condition: bool, reason: str):
    def decorate(func):
        try:
            import pytest
        except ImportError:  # outside pytest the function runs (and fails where it must)
            return func
        return pytest.mark.skipif(not condition, reason=reason)(func)

    return decorate


def requires_cuda(func=None):
    """Skip the test (pytest) when no CUDA GPU is usable: ``@tilers.testing.requires_cuda``."""
    decorate = _skip_unless(_gpu_capability() is not None, "needs a CUDA GPU")
    return decorate if func is None else decorate(func)


def requires_package(*names):
    """Skip the test when one of the packages cannot be imported."""
    import importlib.util

    missing = [n for n in names if importlib.util.find_spec(n) is None]
    return _skip_unless(not missing, f"needs {', '.join(missing)}")


_COMPARE = {
    "ge": lambda a, b: a >= b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b,
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b,
}


def requires_cuda_compute_version(major: int, minor: int = 0, mode: str = "ge"):
    """Skip unless the GPU's compute capability compares with (major, minor) by ``mode``
    ("ge", "gt", "le", "lt", "eq"): ``@requires_cuda_compute_version(9, 0)`` for Hopper."""
    if mode not in _COMPARE:
        raise ValueError(f"parameter 'mode': expected one of {', '.join(_COMPARE)}, got {mode!r}")
    capability = _gpu_capability()
    ok = capability is not None and _COMPARE[mode](tuple(capability), (major, minor))
    return _skip_unless(ok, f"needs a GPU of compute capability {mode} {major}.{minor}")


def requires_cuda_compute_version_ge(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "ge")


def requires_cuda_compute_version_gt(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "gt")


def requires_cuda_compute_version_le(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "le")


def requires_cuda_compute_version_lt(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "lt")


def requires_cuda_compute_version_eq(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "eq")


def main():
    """Run the calling file's tests with pytest (``if __name__ == "__main__":
    tilers.testing.main()``) and exit with its status."""
    import inspect
    import sys

    import pytest

    caller = inspect.stack()[1].filename
    sys.exit(pytest.main([caller, *sys.argv[1:]]))


_recorded: list = []


def process_func(func, name=None, /, **kwargs):
    """Call ``func(**kwargs)`` (a benchmark returning its latency in ms) and record the result
    under ``name``; the latency."""
    latency = func(**kwargs)
    _recorded.append((name or getattr(func, "__name__", "func"), latency))
    return latency


def regression(prefixes=("regression_",), verbose=True):
    """Run the calling module's ``regression_*`` functions; print a table of their latencies."""
    import inspect

    caller = inspect.stack()[1].frame.f_globals
    rows = []
    for name, value in list(caller.items()):
        if callable(value) and name.startswith(tuple(prefixes)):
            start = len(_recorded)
            result = value()
            if len(_recorded) == start and isinstance(result, (int, float)):
                _recorded.append((name, result))
            rows.extend(_recorded[start:])
    if verbose:
        print("| name | latency (ms) |\n| --- | --- |")
        for name, latency in rows:
            print(f"| {name} | {latency} |")
    return rows
