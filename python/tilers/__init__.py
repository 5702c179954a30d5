"""tilers: a tile-level GPU kernel language embedded in Python, compiled by a Rust core."""

from . import language
from .errors import TileError
from .jit import compile, jit

__version__ = "0.1.0"


def __getattr__(name):
    # tilers.autotune loads its module (thread pools, records) on first use: `import tilers`
    # stays fast for programs that only compile and launch.
    if name == "autotune":
        from .autotuner import autotune

        return autotune
    raise AttributeError(f"module 'tilers' has no attribute {name!r}")


__all__ = ["TileError", "__version__", "autotune", "compile", "jit", "language"]
