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
    **params,
) -> PassCheckResult:
    """Run ``prim_func`` (a ``@T.prim_func``, a ``@tilers.jit`` factory, a kernel it
    returned, or a serialized program) on seeded random inputs after every pass and compare
    each stage with the tile-level result.

    ``params`` rebind the function's free names (as in :func:`tilers.compile`).
    ``blocks="edges"`` runs the first and last block along each grid axis (fast; ragged
    tiles are in the last); ``"all"`` runs the whole grid. With ``check=True`` a failure
    raises ``AssertionError`` at once (else call ``.assert_ok()``).
    """
    if blocks not in ("edges", "all"):
        raise TileError(f"check_passes: blocks must be 'edges' or 'all', got {blocks!r}")
    from . import _tilers

    program_json = _program_json(prim_func, params)
    options = json.dumps({"arch": arch, "seed": int(seed), "blocks": blocks})
    try:
        text = _tilers.check_passes(program_json, options)
    except _tilers.CompileError as err:
        raise TileError(str(err)) from None
    result = PassCheckResult.from_json(text)
    if check:
        result.assert_ok()
    return result
