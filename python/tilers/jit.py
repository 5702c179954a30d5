"""tilers.compile (trace, then compile in the Rust core) and the @tilers.jit decorator."""

from __future__ import annotations

import functools

from . import errors
from ._trace import PrimFunc, program_json, trace
from .errors import TileError


def compile(
    prim_func,
    out_idx=None,
    target="auto",
    lineinfo=False,
    wgmma=True,
    tma=True,
    persistent=True,
    tma_store=True,
    **params,
):
    """Compile a ``@T.prim_func`` into a callable kernel.

    ``params`` rebind the free names the function reads (such as ``block_M``) for this
    compilation; ``out_idx`` lists the parameters the kernel allocates and returns.
    ``lineinfo=True`` attributes the generated code to the kernel's Python lines (``#line``
    directives and NVRTC's ``-lineinfo``), for compute-sanitizer, Nsight Compute and cuda-gdb.
    ``wgmma=False`` keeps every ``T.gemm`` on ``mma.sync`` (the sm_80 path) on a Hopper
    target, to compare the two; by default sm_90a gemms use ``wgmma`` where they can and
    ``kernel.report()`` says why where they do not. ``tma=False`` keeps pipelined loops on
    ``cp.async`` issued by the kernel's own threads; by default an sm_90a pipeline whose
    copies TMA can carry out gets a producer warpgroup (launched after the kernel's
    ``threads``) issuing them, on mbarriers; ``persistent=False`` launches such a kernel one
    tile per block instead of one block per SM walking the tiles; ``tma_store=False`` keeps
    such a kernel's accumulator stores on the threads (16-byte stores from a staging tile)
    instead of TMA stores.

    >>> kernel = tilers.compile(add, out_idx=[2], M=1024, N=1000, block_M=32, block_N=128)
    """
    if not isinstance(prim_func, PrimFunc):
        raise TileError(f"tilers.compile expects a @T.prim_func, got {type(prim_func).__name__}")
    import json

    # out_idx is checked and normalized once, against the compiled parameters (JITKernel)
    out_key = tuple(out_idx) if isinstance(out_idx, (list, tuple)) else out_idx
    try:
        key = (tuple(sorted(params.items())), out_key, target, bool(lineinfo), bool(wgmma), bool(tma),
               bool(persistent), bool(tma_store))
        hash(key)
    except TypeError:  # an unhashable parameter value: compile without the memo
        key = None
    if key is not None and key in prim_func.compiled:
        return prim_func.compiled[key]

    program = trace(prim_func, params)
    program_text = program_json(program)

    from . import _tilers, kernel, runtime

    arch = runtime.resolve_target(target)
    options_json = kernel.compile_options(
        arch, lineinfo, fast_math=False, wgmma=bool(wgmma), tma=bool(tma),
        persistent=bool(persistent),
        tma_store=bool(tma_store),
    )
    try:
        if target == "interp":
            # the interpreter runs the tile program: verify it, generate no GPU code
            source, info_json = None, _tilers.check(program_text)
        else:
            source, info_json = _compile_program(program_text, options_json)
    except _tilers.CompileError as err:
        raise errors.from_compiler(str(err)) from None
    result = kernel.JITKernel(
        name=program["name"],
        program_json=program_text,
        source=source,
        info=json.loads(info_json),
        target=target,
        out_idx=out_idx,
        lineinfo=bool(lineinfo),
        wgmma=bool(wgmma),
        tma=bool(tma),
        persistent=bool(persistent),
        tma_store=bool(tma_store),
    )
    if key is not None:
        prim_func.compiled[key] = result
    return result


# In-process memo of the Rust core's output, keyed by the program text: a program traced
# again (its factory called again outside @tilers.jit's memo) skips the compiler. The
# cubin has its own memo and disk cache (tilers/cache.py).
_MEMO_ENTRIES = 1024
_compiled_programs: dict[tuple[str, str], tuple[str, str]] = {}


def _compile_program(program_json: str, options_json: str) -> tuple[str, str]:
    from . import _tilers

    key = (program_json, options_json)
    compiled = _compiled_programs.get(key)
    if compiled is None:
        compiled = _tilers.compile(program_json, options_json)
        if len(_compiled_programs) >= _MEMO_ENTRIES:
            _compiled_programs.clear()
        _compiled_programs[key] = compiled
    return compiled


class JitFunction:
    """A ``@tilers.jit`` factory: calling it with sizes returns a compiled kernel (memoized).

    >>> @tilers.jit(out_idx=[2])
    ... def add_kernel(M, N, block_M, block_N):
    ...     @T.prim_func
    ...     def main(A: T.Tensor((M, N), "float16"), ...): ...
    ...     return main
    >>> kernel = add_kernel(1024, 1024, 32, 128)
    """

    def __init__(
        self,
        factory,
        out_idx=None,
        target="auto",
        lineinfo=False,
        wgmma=True,
        tma=True,
        persistent=True,
    ):
        functools.update_wrapper(self, factory)
        self.factory = factory
        self.out_idx = out_idx
        self.target = target
        self.lineinfo = lineinfo
        self.wgmma = wgmma
        self.tma = tma
        self.persistent = persistent
        self.kernels = {}

    def __call__(self, *args, **kwargs):
        return self.compile(*args, **kwargs)

    def compile(self, *args, target=None, out_idx=None, **kwargs):
        """The kernel for these factory arguments, compiled once per distinct arguments."""
        target = self.target if target is None else target
        out_idx = self.out_idx if out_idx is None else out_idx
        out_key = tuple(out_idx) if isinstance(out_idx, (list, tuple)) else out_idx
        key = (args, tuple(sorted(kwargs.items())), target, out_key)
        try:
            return self.kernels[key]
        except KeyError:
            pass
        except TypeError:  # unhashable arguments: compile without the memo
            key = None
        result = compile(
            self.prim_func(*args, **kwargs), out_idx=out_idx, target=target, lineinfo=self.lineinfo,
            wgmma=self.wgmma,
            tma=self.tma,
            persistent=self.persistent,
        )
        if key is not None:
            self.kernels[key] = result
        return result

    def prim_func(self, *args, **kwargs) -> PrimFunc:
        """Run the factory; the prim_func it returns (not compiled)."""
        result = self.factory(*args, **kwargs)
        if not isinstance(result, PrimFunc):
            raise TileError(
                f"{self.__name__} returned {type(result).__name__}; a @tilers.jit "
                "function must return a @T.prim_func"
            )
        return result


def jit(
    func=None,
    *,
    out_idx=None,
    target="auto",
    lineinfo=False,
    wgmma=True,
    tma=True,
    persistent=True,
):
    """Decorate a factory of prim_funcs: ``@tilers.jit`` or ``@tilers.jit(out_idx=[2])``."""
    if func is None:
        return lambda f: jit(
            f, out_idx=out_idx, target=target, lineinfo=lineinfo, wgmma=wgmma, tma=tma,
            persistent=persistent,
        )
    if isinstance(func, PrimFunc):
        raise TileError(
            f"@tilers.jit wraps a function that returns a prim_func; "
            f"compile the prim_func '{func.__name__}' with tilers.compile instead"
        )
    return JitFunction(
        func, out_idx=out_idx, target=target, lineinfo=lineinfo, wgmma=wgmma, tma=tma,
        persistent=persistent,
    )
