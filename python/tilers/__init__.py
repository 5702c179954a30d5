"""tilers: a tile-level GPU kernel language embedded in Python, compiled by a Rust core."""

from . import language
from .errors import TileError
from .jit import compile, jit

__version__ = "0.1.0"

__all__ = ["TileError", "__version__", "compile", "jit", "language"]
