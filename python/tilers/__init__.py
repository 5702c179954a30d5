"""tilers: a tile-level GPU kernel language embedded in Python, compiled by a Rust core."""

from . import language
from .errors import TileError
from .jit import compile, jit
from .math import cdiv, next_power_of_2
from .pass_config import PassConfigKey

__version__ = "0.1.0"

# Loaded on first use (`import tilers` stays fast for programs that only compile and
# launch): the autotuner (thread pools, records), the profiler and the test helpers.
_LAZY = {
    "autotune": ("autotuner", "autotune"),
    "JITKernel": ("kernel", "JITKernel"),
    "Profiler": ("profiler", "Profiler"),
    "TensorSupplyType": ("utils.tensor", "TensorSupplyType"),
    "env": ("env", "env"),
}
_SUBMODULES = {"autotuner", "profiler", "testing", "utils", "layout", "math", "cache", "eager", "transform", "export"}


def __getattr__(name):
    import importlib

    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'tilers' has no attribute {name!r}")


def disable_cache() -> None:
    """Compile without the on-disk cubin cache (TileLang's name; ``TILERS_CACHE=0`` too)."""
    from . import cache

    cache.set_enabled(False)


def enable_cache() -> None:
    """Use the on-disk cubin cache again."""
    from . import cache

    cache.set_enabled(True)


def is_cache_enabled() -> bool:
    from . import cache

    return cache.disk_cache_enabled()


def set_log_level(level) -> None:
    """Set the level of the ``tilers`` logger (``"INFO"``, ``logging.DEBUG``, ...)."""
    import logging

    logging.getLogger("tilers").setLevel(level)


__all__ = [
    "JITKernel", "PassConfigKey", "Profiler", "TensorSupplyType", "TileError", "__version__",
    "autotune", "cdiv", "compile", "disable_cache", "enable_cache", "is_cache_enabled", "jit",
    "language", "next_power_of_2", "set_log_level",
]
