"""tilers.compile (trace, then compile in the Rust core) and the @tilers.jit decorator."""

from __future__ import annotations

import functools

from . import errors
from ._trace import PrimFunc, program_json, trace
from .errors import TileError


def _typed(value):
    """A memo key that tells 2 from 2.0 and 1 from True (equal, and equal hashes, in Python,
    but a factory may build a different kernel from each): every scalar with its type,
    through tuples and lists."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_typed(v) for v in value)
    return (type(value).__name__, value)


def _typed_values(values: tuple):
    """``_typed`` for a tuple of arguments, cheaply on a memo hit: the values beside their
    types (a C-level map) unless one is itself a container."""
    types = tuple(map(type, values))
    if tuple in types or list in types:
        return _typed(values)
    return (values, types)


def compile(
    prim_func,
    out_idx=None,
    target="auto",
    lineinfo=False,
    wgmma=True,
    tma=True,
    persistent=True,
    tma_store=True,
    pass_configs=None,
    fast_math=False,
    cluster=None,
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
    tile per block instead of one block per SM walking the tiles, ``persistent="pingpong"``
    walks them with two copies of the kernel's threads taking alternate tiles, their main
    loops in turn (one's epilogue overlapping the other's tensor-core work; the second copy
    and the producers are launched after the kernel's ``threads``); ``tma_store=False`` keeps
    such a kernel's accumulator stores on the threads (16-byte stores from a staging tile)
    instead of TMA stores. ``cluster=(2, 1)`` (or ``(1, 2)``, 4 blocks at most) walks a
    persistent kernel's tiles in thread-block clusters of that many tiles along ``bx`` (``by``),
    or launches a kernel of a tile per block (symbolic sizes, ``persistent=False``) in
    clusters of consecutive blocks along ``bx``: the producer copies the cluster's blocks
    share (those whose position does not depend on the block index along the cluster) are
    multicast, each block loading its part into all; ``kernel.report()`` says what was
    shared, or why no cluster was made (a kernel's ``T.ClusterKernel(cluster_dims=)`` wins). ``pass_configs``
    takes TileLang's switches
    (``{tilers.PassConfigKey.TL_DISABLE_TMA_LOWER: True}``; see tilers/pass_config.py).

    >>> kernel = tilers.compile(add, out_idx=[2], M=1024, N=1000, block_M=32, block_N=128)
    """
    if not isinstance(prim_func, PrimFunc):
        from .eager import EagerFunction

        if isinstance(prim_func, (JitFunction, EagerFunction)):
            raise TileError(
                f"tilers.compile expects a @T.prim_func, got the @tilers.jit function "
                f"'{prim_func.__name__}': call it, or use {prim_func.__name__}.compile(...)"
            )
        raise TileError(f"tilers.compile expects a @T.prim_func, got {type(prim_func).__name__}")
    # TileLang's compile options that tilers has no use for (tilelang.compile(func,
    # execution_backend="cython", ...)): not names the function reads
    params = {k: v for k, v in params.items() if k not in _TILELANG_NO_OPS}
    options = compile_options(target, lineinfo, wgmma, tma, persistent, tma_store, fast_math,
                              pass_configs, cluster)
    # out_idx is checked and normalized once, against the compiled parameters (JITKernel)
    out_key = _typed(out_idx)
    try:
        key = (_typed(tuple(sorted(params.items()))), out_key, tuple(sorted(options.items())))
        hash(key)
    except TypeError:  # an unhashable parameter value: compile without the memo
        key = None
    if key is not None and key in prim_func.compiled:
        return prim_func.compiled[key]

    program = trace(prim_func, params)
    result = build_kernel(program, program_json(program), out_idx, **options)
    if key is not None:
        prim_func.compiled[key] = result
    return result


def compile_options(target="auto", lineinfo=False, wgmma=True, tma=True, persistent=True,
                    tma_store=True, fast_math=False, pass_configs=None, cluster=None) -> dict:
    """The keyword options of build_kernel, with TileLang's ``pass_configs`` applied."""
    from . import pass_config

    options = {
        "target": target, "lineinfo": bool(lineinfo), "wgmma": bool(wgmma), "tma": bool(tma),
        "persistent": _persistent(persistent), "tma_store": bool(tma_store),
        "fast_math": bool(fast_math), "cluster": _cluster(cluster),
    }
    return pass_config.apply(pass_configs, options)


def _cluster(value):
    """``cluster=``: None, an int (blocks along ``bx``) or ``(x, y)``: a tuple, or None
    for no cluster."""
    if value is None:
        return None
    dims = (value, 1) if isinstance(value, int) and not isinstance(value, bool) else value
    if (
        not isinstance(dims, (tuple, list))
        or len(dims) not in (2, 3)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims)
        or (len(dims) == 3 and dims[2] != 1)
        or dims[0] * dims[1] > 16
    ):
        raise TileError(
            f"cluster={value!r}: expected (x, y), the blocks of a cluster along bx and by "
            "(positive ints, 16 in all at most), an int x for (x, 1), or None"
        )
    dims = (int(dims[0]), int(dims[1]))
    return None if dims == (1, 1) else dims


def _persistent(value):
    """``persistent=``: True, False or "pingpong"."""
    if isinstance(value, str):
        if value != "pingpong":
            raise TileError(f"persistent={value!r}: expected True, False or 'pingpong'")
        return value
    return bool(value)


def build_kernel(program: dict, program_text: str, out_idx, *, target="auto", lineinfo=False,
                 wgmma=True, tma=True, persistent=True, tma_store=True, fast_math=False,
                 cluster=None):
    """A traced program compiled by the Rust core into a JITKernel (its cubin on first use)."""
    import json

    from . import _tilers, kernel, runtime

    arch = runtime.resolve_target(target)
    options_json = kernel.compile_options(
        arch, lineinfo, fast_math=fast_math, wgmma=wgmma, tma=tma, persistent=persistent,
        tma_store=tma_store, cluster=cluster,
    )
    try:
        if target == "interp":
            # the interpreter runs the tile program: verify it, generate no GPU code
            source, info_json = None, _tilers.check(program_text)
        else:
            source, info_json = _compile_program(program_text, options_json)
    except _tilers.CompileError as err:
        raise errors.from_compiler(str(err)) from None
    return kernel.JITKernel(
        name=program["name"],
        program_json=program_text,
        source=source,
        info=json.loads(info_json),
        target=target,
        out_idx=out_idx,
        lineinfo=lineinfo,
        fast_math=fast_math,
        wgmma=wgmma,
        tma=tma,
        persistent=persistent,
        tma_store=tma_store,
        cluster=cluster,
    )


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

    def __init__(self, factory, out_idx=None, **options):
        functools.update_wrapper(self, factory)
        self.factory = factory
        self.out_idx = out_idx
        self.options = options
        self.target = options["target"]
        self.kernels = {}

    def __call__(self, *args, **kwargs):
        return self.compile(*args, **kwargs)

    def compile(self, *args, target=None, out_idx=None, pass_configs=None, **kwargs):
        """The kernel for these factory arguments, compiled once per distinct arguments
        (``pass_configs`` on top of the decorator's: an autotune config may carry its own)."""
        options = self.options
        options_key = None  # the decorator's options (the common call: no copy, no sort)
        if target is not None or pass_configs:
            options = dict(options)
            if target is not None:
                options["target"] = target
            if pass_configs:
                from . import pass_config

                options = pass_config.apply(pass_configs, options)
            options_key = tuple(sorted(options.items()))
        out_idx = self.out_idx if out_idx is None else out_idx
        names = tuple(sorted(kwargs)) if kwargs else ()  # keyword order makes no other kernel
        kw = (names, _typed_values(tuple(kwargs[n] for n in names))) if kwargs else ()
        key = (_typed_values(args), kw, options_key, _typed(out_idx))
        try:
            return self.kernels[key]
        except KeyError:
            pass
        except TypeError:  # unhashable arguments: compile without the memo
            key = None
        result = compile(self.prim_func(*args, **kwargs), out_idx=out_idx, **options)
        if key is not None:
            self.kernels[key] = result
        return result

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self.compile(*args, **kwargs).get_kernel_source()

    def prim_func(self, *args, **kwargs) -> PrimFunc:
        """Run the factory; the prim_func it returns (not compiled)."""
        result = self.factory(*args, **kwargs)
        if not isinstance(result, PrimFunc):
            raise TileError(
                f"{self.__name__} returned {type(result).__name__}; a @tilers.jit factory "
                "must return a @T.prim_func (an eager @tilers.jit function opens "
                "`with T.Kernel(...)` in its own body and returns its T.empty outputs; see "
                "docs/porting.md)"
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
    tma_store=True,
    fast_math=False,
    pass_configs=None,
    cluster=None,
    **tilelang_options,
):
    """Decorate a kernel function: ``@tilers.jit`` or ``@tilers.jit(out_idx=[2])``.

    Two styles (the rule, docs/porting.md): a function containing a nested ``@T.prim_func``
    that it returns is a *factory* (calling it returns a compiled kernel); a function whose
    own body opens ``with T.Kernel(...)`` (declaring its tensors with ``A: T.Tensor(...)``,
    sizes with ``T.const`` and outputs with ``T.empty``) is *eager*: calling it with tensors
    compiles (once per shapes, dtypes and configuration) and runs it, and returns its
    outputs. TileLang's other options (``execution_backend``, ``verbose``, ``target_host``,
    ``debug_root_path``, ``compile_flags``) are accepted and have no effect.
    """
    unknown = set(tilelang_options) - _TILELANG_NO_OPS
    if unknown:
        raise TypeError(f"tilers.jit() got an unexpected keyword argument '{sorted(unknown)[0]}'")
    if func is None:
        return lambda f: jit(
            f, out_idx=out_idx, target=target, lineinfo=lineinfo, wgmma=wgmma, tma=tma,
            persistent=persistent, tma_store=tma_store, fast_math=fast_math,
            pass_configs=pass_configs, cluster=cluster, **tilelang_options,
        )
    if isinstance(func, PrimFunc):
        raise TileError(
            f"@tilers.jit wraps a function that returns a prim_func; "
            f"compile the prim_func '{func.__name__}' with tilers.compile instead"
        )
    options = compile_options(target, lineinfo, wgmma, tma, persistent, tma_store, fast_math,
                              pass_configs, cluster)
    from . import eager

    if eager.is_eager(func):
        if out_idx is not None:
            raise TileError(
                f"@tilers.jit(out_idx=...) on the eager function '{func.__name__}': an eager "
                "function allocates its outputs with T.empty and returns them, so there is "
                "no output parameter to name; drop out_idx (it is for factories returning a "
                "@T.prim_func)"
            )
        return eager.EagerFunction(func, options)
    return JitFunction(func, out_idx=out_idx, **options)


# TileLang's jit options that have no counterpart in tilers (accepted, no effect)
_TILELANG_NO_OPS = {"execution_backend", "verbose", "target_host", "debug_root_path", "compile_flags"}
