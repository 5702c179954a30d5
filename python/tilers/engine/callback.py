"""Post-processing of the generated CUDA, by TileLang's names: a function registered with
``@register_cuda_postproc_callback`` receives each kernel's CUDA source and its target
(``"cuda:sm_90a"``) before NVRTC compiles it, and returns the source to compile; the kernel's
``get_kernel_source()`` shows what it returned. One function is registered at a time
(``override=False`` keeps an earlier one); ``register_cuda_postproc(None)`` removes it.
Other back ends (HIP, C, Metal) are not tilers targets: registering for them is an error."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import TileError

_cuda_postproc: Callable[[str, str], str] | None = None


def register_cuda_postproc(func: Callable[[str, str], str] | None, override: bool = True):
    global _cuda_postproc
    if func is not None and not callable(func):
        raise TypeError(f"parameter 'func': expected a function (code, target) -> code, got {func!r}")
    if _cuda_postproc is not None and func is not None and not override:
        return
    _cuda_postproc = func


def register_cuda_postproc_callback(func=None, override: bool = True):
    """``@register_cuda_postproc_callback`` (also with parentheses, or ``(override=False)``)."""
    if callable(func):
        register_cuda_postproc(func, override)
        return func
    if func is None or isinstance(func, bool):
        keep = func if isinstance(func, bool) else override

        def register(fn):
            register_cuda_postproc(fn, keep)
            return fn

        return register
    raise TypeError(f"register_cuda_postproc_callback: expected a function or a bool, got {func!r}")


def postprocess_cuda(source: str, arch: str) -> str:
    """The source to compile: the registered function's result (unchanged without one)."""
    if _cuda_postproc is None:
        return source
    out = _cuda_postproc(source, f"cuda:{arch}")
    if not isinstance(out, str):
        raise TileError(
            f"the CUDA post-processing callback {getattr(_cuda_postproc, '__name__', _cuda_postproc)!r} "
            f"returned {type(out).__name__}, not the source (a str)"
        )
    return out


def _not_a_target(name):
    def register(*args, **kwargs):
        raise TileError(f"{name}: tilers compiles CUDA only; register_cuda_postproc_callback post-processes it")

    register.__name__ = name
    return register


register_hip_postproc = _not_a_target("register_hip_postproc")
register_hip_postproc_callback = _not_a_target("register_hip_postproc_callback")
register_c_postproc = _not_a_target("register_c_postproc")
register_c_postproc_callback = _not_a_target("register_c_postproc_callback")
register_metal_postproc = _not_a_target("register_metal_postproc")
register_metal_postproc_callback = _not_a_target("register_metal_postproc_callback")
