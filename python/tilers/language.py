"""The tile language, used as ``import tilers.language as T`` (TileLang-compatible names)."""

# No `from __future__ import annotations`: it would leave `annotations` in dir(T). Every
# helper below is reached through `_trace.` or `_builtins.` for the same reason: the
# module's public names are the DSL's, and nothing else.
import builtins as _builtins

from . import _trace, _user_layout
from ._trace import cast

__all__ = [
    "alloc_reducer",
    "reducer_init",
    "reducer_update",
    "finalize_reducer",
    "Layout",
    "Fragment",
    "wait_wgmma",
    "wgmma_gemm",
    "fence_proxy_async",
    "cluster_sync",
    "cluster_arrive",
    "cluster_arrive_relaxed",
    "cluster_wait",
    "block_rank_in_cluster",
    "copy_cluster",
    "reinterpret",
    "cumsum",
    "vectorized",
    "SharedBuffer",
    "FragmentBuffer",
    "LocalBuffer",
    "sync_threads",
    "loop_break",
    "AccessPtr",
    "access_ptr",
    "address_of",
    "ptx_cp_async",
    "call_extern",
    "make_tensor",
    "ptr",
    "reshape",
    "view",
    "im2col",
    "shfl_sync",
    "shfl_xor",
    "shfl_down",
    "shfl_up",
    "tvm_warp_shuffle",
    "get_thread_extent",
    "get_block_binding",
    "get_lane_idx",
    "get_warp_idx",
    "get_warp_idx_sync",
    "get_warp_group_idx",
    "import_source",
    "inline_ptx",
    "ptx_commit_group",
    "ptx_wait_group",
    "cp_async_barrier_noinc",
    "floormod",
    "floordiv",
    "clamp",
    "Serial",
    "Cast",
    "macro",
    "get_thread_binding",
    "thread_binding",
    "alloc_var",
    "Var",
    "uint4",
    "int4",
    "tfloat32",
    "disable_warp_group_reg_alloc",
    "no_set_max_nreg",
    "annotate_consumer_reg_alloc",
    "annotate_producer_reg_dealloc",
    "dec_max_nreg",
    "inc_max_nreg",
    "set_max_nreg",
    "WarpSpecialize",
    "ws",
    "tma_copy",
    "mbarrier_expect_tx",
    "mbarrier_arrive",
    "barrier_arrive",
    "mbarrier_wait_parity",
    "barrier_wait",
    "alloc_barrier",
    "empty",
    "const",
    "short",
    "long",
    "float4_e2m1fn",
    "float6_e3m2fn",
    "float6_e2m3fn",
    "float8_e8m0fnu",
    "float8_e5m2fnuz",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e4m3fn",
    "float8_e4m3",
    "dtype",
    "double",
    "half",
    "uint",
    "int",
    "float",
    "uint64",
    "uint16",
    "annotate_layout",
    "make_swizzled_layout",
    "use_swizzle",
    "Buffer",
    "Else",
    "If",
    "Kernel",
    "ClusterKernel",
    "Parallel",
    "Pipelined",
    "Tensor",
    "abs",
    "alloc_fragment",
    "alloc_local",
    "alloc_shared",
    "alloc_global",
    "atomic_add",
    "atomic_addx2",
    "atomic_addx4",
    "atomic_max",
    "atomic_min",
    "bfloat16",
    "bool",
    "cast",
    "ceil",
    "ceildiv",
    "clear",
    "copy",
    "cos",
    "device_assert",
    "dynamic",
    "erf",
    "exp",
    "exp2",
    "fill",
    "gemm",
    "GemmWarpPolicy",
    "float16",
    "float32",
    "float64",
    "floor",
    "if_then_else",
    "infinity",
    "int8",
    "int16",
    "int32",
    "int64",
    "log",
    "log2",
    "max",
    "min",
    "prim_func",
    "print",
    "reduce_absmax",
    "reduce_max",
    "reduce_min",
    "reduce_sum",
    "rsqrt",
    "serial",
    "symbolic",
    "sigmoid",
    "sin",
    "sqrt",
    "tanh",
    "uint8",
    "uint32",
    "unroll",
]

# dtypes: strings that also work as scalar-parameter annotations (`n: T.int32`) and as
# converters (`T.float32(1.0)`).
dtype = _trace.DType
bool = _trace.DType("bool")
int8 = _trace.DType("int8")
uint8 = _trace.DType("uint8")
int16 = _trace.DType("int16")
uint16 = _trace.DType("uint16")
int32 = _trace.DType("int32")
uint32 = _trace.DType("uint32")
int64 = _trace.DType("int64")
uint64 = _trace.DType("uint64")
float16 = _trace.DType("float16")
bfloat16 = _trace.DType("bfloat16")
float32 = _trace.DType("float32")
float64 = _trace.DType("float64")
# TileLang's aliases
float = float32
int = int32
uint = uint32
half = float16
double = float64
short = int16
long = int64
# reserved (quantized GEMM work): they exist, and using one is an error that says so
float8_e4m3 = _trace.ReservedDType("float8_e4m3")
float8_e4m3fn = _trace.ReservedDType("float8_e4m3fn")
float8_e4m3fnuz = _trace.ReservedDType("float8_e4m3fnuz")
float8_e5m2 = _trace.ReservedDType("float8_e5m2")
float8_e5m2fnuz = _trace.ReservedDType("float8_e5m2fnuz")
float8_e8m0fnu = _trace.ReservedDType("float8_e8m0fnu")
float6_e2m3fn = _trace.ReservedDType("float6_e2m3fn")
float6_e3m2fn = _trace.ReservedDType("float6_e3m2fn")
float4_e2m1fn = _trace.ReservedDType("float4_e2m1fn")
tfloat32 = _trace.ReservedDType("tfloat32")
int4 = _trace.ReservedDType("int4")
uint4 = _trace.ReservedDType("uint4")


# ----------------------------------------------------------------------------------------
# functions and parameters


def prim_func(func) -> _trace.PrimFunc:
    """Mark a function as a tile kernel; it is traced when compiled.

    >>> @T.prim_func
    ... def add(A: T.Tensor((1024,), "float16"), B: T.Tensor((1024,), "float16")): ...
    """
    return _trace.PrimFunc(func)


class _TensorAnnotation:
    """``T.Tensor((M, N), "float16")`` or ``T.Tensor[(M, N), "float16"]``: the annotation of a
    tensor parameter (in a prim_func's header, or in an eager function's body)."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __call__(self, shape, dtype="float32", data=None, scope=None):
        if data is not None:
            # T.Tensor(shape, dtype, buf.data) inside a kernel: a row-major view of buf
            loc = _trace.capture()
            if not isinstance(data, _trace.BufferData):
                raise _trace.user_error(
                    f"T.{self._name}(shape, dtype, data): data must be a buffer's .data, got {type(data).__name__}",
                    loc=loc,
                    help="e.g. A_flat = T.Tensor((M * N,), dtype, A.data)",
                )
            return _trace.make_view(data.buffer, shape, _trace.normalize_dtype(dtype), loc, f"T.{self._name}")
        return _trace.TensorType(shape, dtype)

    def __getitem__(self, key):
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], (tuple, list)):
            return _trace.TensorType(key[0], key[1])
        if isinstance(key, tuple) and len(key) == 2 and not isinstance(key[1], (tuple, list)):
            return _trace.TensorType(key[0], key[1])
        return _trace.TensorType(key, "float32")

    def __repr__(self):
        return f"T.{self._name}"


Tensor = _TensorAnnotation("Tensor")
Buffer = _TensorAnnotation("Buffer")


class _TileAnnotation:
    """``T.SharedBuffer([64, 64], "float16")`` (and ``T.FragmentBuffer``, ``T.LocalBuffer``):
    TileLang's annotation of a ``T.macro`` helper's tile parameter. It documents the helper:
    the helper is traced inline and receives the tile itself. A kernel's parameters are
    global tensors (``T.Tensor``); there it is an error."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __call__(self, shape, dtype="float32"):
        return _trace.TileAnnotation(self._name, shape, dtype)

    def __getitem__(self, key):
        shape, dtype = key if isinstance(key, tuple) and len(key) == 2 else (key, "float32")
        return _trace.TileAnnotation(self._name, shape, dtype)

    def __repr__(self):
        return f"T.{self._name}"


SharedBuffer = _TileAnnotation("SharedBuffer")
FragmentBuffer = _TileAnnotation("FragmentBuffer")
LocalBuffer = _TileAnnotation("LocalBuffer")


def const(names, dtype="int32"):
    """Sizes of an eager ``@tilers.jit`` function: ``M, N, K = T.const("M, N, K")``, each
    bound from the first tensor dimension that is that name (``A: T.Tensor((M, K), dtype)``)
    in the call, or from a keyword of that name; a kernel is compiled per distinct value."""
    from . import eager

    return eager.const(names, dtype)


def empty(*shape, dtype="float32"):
    """An output of an eager ``@tilers.jit`` function: ``C = T.empty((M, N), dtype)``,
    allocated by each call and returned by it (``return C``)."""
    from . import eager

    return eager.empty(*shape, dtype=dtype)


# ----------------------------------------------------------------------------------------
# the kernel and its buffers


class Kernel:
    """The launch grid: ``with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):``.

    Yields one block index for a 1-D grid, else a tuple ``(bx, by)`` or ``(bx, by, bz)``.
    """

    cluster = None  # [x, y]: T.ClusterKernel's cluster_dims

    def __init__(self, *grid, threads=128, prelude=None):
        from . import eager

        eager.stop_discovery()  # an eager function's declarations come before its kernel
        self.loc = _trace.capture()
        if not 1 <= len(grid) <= 3:
            raise _trace.user_error(
                f"T.Kernel takes 1 to 3 grid dimensions, got {len(grid)}",
                loc=self.loc,
                help="fold extra dimensions into one, e.g. T.Kernel(nx * ny, nz)",
            )
        self.grid = [_grid_node(g, self.loc) for g in grid]
        if threads is None:
            threads = 128
        # threads=(x, y[, z]): CUDA's block shape; the block runs x * y * z threads numbered
        # as CUDA numbers them (x fastest), and T.get_thread_binding(d) is each coordinate
        dims = tuple(threads) if isinstance(threads, (tuple, list)) else (threads,)
        if not 1 <= len(dims) <= 3 or not all(
            isinstance(d, _builtins.int) and not isinstance(d, _builtins.bool) and d > 0 for d in dims
        ):
            raise _trace.user_error(
                f"threads must be a positive int or a tuple of 1 to 3 positive ints, got {threads!r}",
                loc=self.loc,
                help="pass a Python int such as threads=128, or a block shape such as threads=(32, 4)",
            )
        self.thread_dims = dims
        self.threads = dims[0] * (dims[1] if len(dims) > 1 else 1) * (dims[2] if len(dims) > 2 else 1)
        # prelude: CUDA C++ emitted before the kernel (as T.import_source's)
        if prelude is not None and not isinstance(prelude, str):
            raise _trace.user_error(
                f"T.Kernel: prelude must be a string of CUDA C++, got {type(prelude).__name__}",
                loc=self.loc,
                help="pass the code as a str, or import it with T.import_source",
            )
        self.prelude = prelude

    def __enter__(self):
        builder = _trace.current_builder()
        if builder.kernel_index is not None:
            raise _trace.user_error(
                "a T.Kernel inside another T.Kernel",
                loc=self.loc,
                help="T.Kernel blocks of one prim_func follow each other: close this kernel's "
                "`with` block before the next one opens (each call launches them in order)",
            )
        builder.open_kernel()
        if self.prelude:
            builder.extern_sources.append(self.prelude)
        builder.kernel_threads = self.threads
        builder.kernel_cluster = self.cluster
        builder.thread_dims = self.thread_dims
        builder.grid_dims = list(self.grid)
        count = len(self.grid)
        names = _trace.target_names(self.loc, _trace._WITH_TARGETS, count)
        names = names or ["bx", "by", "bz"][:count]
        indices = [builder.new_var(n, "block_idx", axis=a) for a, n in enumerate(names)]
        builder.block_vars = indices
        # the grid may read a variable of an earlier kernel only by mistake: checked on exit
        self.body = builder.open_block("T.Kernel", self.loc)
        return indices[0] if count == 1 else tuple(indices)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        builder = _trace.current_builder()
        builder.close_block(self.body)
        kernel = {
            "grid": self.grid,
            "threads": self.threads,
            "body": self.body,
            "loc": builder.json_loc(self.loc),
        }
        if self.cluster is not None:
            kernel["cluster"] = list(self.cluster)
        if builder.reg_budget:
            kernel["reg_budget"] = dict(builder.reg_budget)
        if builder.extern_sources:
            kernel["extern_sources"] = list(builder.extern_sources)
        if builder.raster is not None:
            if len(self.grid) < 2:
                raise _trace.user_error(
                    "T.use_swizzle reorders a 2-D grid; this T.Kernel has one dimension",
                    loc=builder.raster_loc,
                    help="give T.Kernel two grid dimensions (bx, by), or drop T.use_swizzle",
                )
            kernel["raster"] = builder.raster
        builder.close_kernel(kernel)
        return False


class ClusterKernel(Kernel):
    """A kernel launched in thread-block clusters (sm_90+): ``with T.ClusterKernel(gx, gy,
    cluster_dims=2, threads=128) as (bx, by):`` (``cluster_dims`` an int for ``(x, 1, 1)``
    or ``(x, y[, 1])``, 16 blocks at most). tilers makes the cluster for a TMA pipeline
    (the kernel's own copies multicast, as the compile option ``cluster=`` does, which this
    overrides for the kernel): the producer copies the cluster's blocks share are loaded
    once per cluster. Where no cluster can be made (no TMA pipeline, a grid the cluster does
    not divide, an sm_80 target) ``kernel.report()`` says why and the kernel runs without:
    the blocks compute the same either way. A kernel that works across its cluster itself
    (``T.copy_cluster``, ``T.cluster_sync``) always runs in its clusters (along bx, 2 to 16
    blocks: past 8, the portable size, the launcher allows the function Hopper's non-portable
    sizes), or is refused."""

    def __init__(self, *grid, cluster_dims=None, threads=128, prelude=None):
        super().__init__(*grid, threads=threads, prelude=prelude)
        dims = cluster_dims
        if isinstance(dims, _builtins.int) and not isinstance(dims, _builtins.bool):
            dims = (dims,)
        ok = (
            isinstance(dims, (tuple, list))
            and 1 <= len(dims) <= 3
            and all(isinstance(d, _builtins.int) and not isinstance(d, _builtins.bool) and d >= 1 for d in dims)
        )
        if ok:
            dims = tuple(dims) + (1,) * (3 - len(dims))
            ok = dims[2] == 1 and dims[0] * dims[1] <= 16
        if not ok:
            raise _trace.user_error(
                f"T.ClusterKernel: cluster_dims must be an int or a tuple (x, y[, 1]) of positive "
                f"ints, 16 blocks in all at most, got {cluster_dims!r}",
                loc=self.loc,
                help="e.g. cluster_dims=2 (two blocks along bx) or cluster_dims=(1, 2)",
            )
        self.cluster = None if dims[:2] == (1, 1) else [dims[0], dims[1]]


def _grid_node(value, loc) -> dict:
    expr = _trace.literal(value)
    if not _trace.is_int(expr.dtype):
        raise _trace.user_error(
            f"a grid dimension must be an integer, got {expr.dtype}",
            loc=loc,
            help="compute the grid with integers, e.g. T.ceildiv(N, block_N)",
        )
    return cast(expr, "int64" if expr.dtype in ("int64", "uint32", "uint64") else "int32").node()


def _alloc(scope: str, shape, dtype):
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, f"T.alloc_{scope}", loc)
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    symbolic = [d for d in dims if isinstance(d, _trace.Size)]
    if symbolic:
        raise _trace.user_error(
            f"a {scope} tile's shape must be fixed, but dimension {dims.index(symbolic[0])} is "
            f"the T.dynamic size '{symbolic[0].name}'",
            loc=loc,
            help=f"allocate a tile of a fixed size (e.g. block_M) and loop over "
            f"T.ceildiv({symbolic[0].name}, block_M) tiles; only tensor parameters may have "
            "T.dynamic dimensions",
        )
    if not dims or not all(
        isinstance(d, _builtins.int) and not isinstance(d, _builtins.bool) and d > 0 for d in dims
    ):
        raise _trace.user_error(
            f"a {scope} buffer's shape must be positive Python ints, got {dims!r}",
            loc=loc,
            help="tile sizes are fixed when the kernel is compiled: pass them to "
            "tilers.compile (e.g. block_M=64), not as kernel arguments",
        )
    name = _trace.assigned_name(loc) or f"buf{len(builder.buffers)}"
    return builder.new_buffer(name, scope, _trace.normalize_dtype(dtype), dims, loc)


def use_swizzle(panel_size: int = 10, order: str = "row", enable: _builtins.bool = True):
    """Threadblock rasterization for L2 reuse: ``T.use_swizzle(panel_size=8)`` inside
    ``T.Kernel``. Blocks are numbered panel by panel: consecutive blocks walk down
    ``panel_size`` values of ``by`` before moving to the next ``bx`` (``order="col"``: along
    ``panel_size`` values of ``bx``, then the next ``by``), so blocks running at the same time
    share rows of A and columns of B in L2. Every ``(bx, by)`` still runs exactly once."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.use_swizzle", loc)
    if not enable:
        return
    if (
        isinstance(panel_size, _builtins.bool)
        or not isinstance(panel_size, _builtins.int)
        or not (1 <= panel_size <= 65535)
    ):
        raise _trace.user_error(
            f"T.use_swizzle: panel_size must be a Python int from 1 to 65535, got {panel_size!r}",
            loc=loc,
            help="e.g. T.use_swizzle(panel_size=8)",
        )
    if order not in ("row", "col"):
        raise _trace.user_error(
            f'T.use_swizzle: order must be "row" or "col", got {order!r}',
            loc=loc,
            help='"row": blocks walk down panel_size values of by, then the next bx',
        )
    if builder.raster is not None:
        raise _trace.user_error(
            "T.use_swizzle is already set for this kernel",
            loc=loc,
            help="call it once, at the top of the T.Kernel block",
        )
    builder.raster = {"panel": panel_size, "order": order}
    builder.raster_loc = loc


class _SwizzledLayout:
    """The XOR swizzle of a shared tile (16-byte chunks permuted by row within 128-byte
    lines), made by ``T.make_swizzled_layout(buf)`` for ``T.annotate_layout``."""

    def __init__(self, buffer, loc):
        self.buffer = buffer
        self.loc = loc

    def __repr__(self):
        return f"<swizzled layout of {self.buffer.name}>"


# user layouts (tilers/_user_layout.py): T.Layout(shape, fn) for global and shared buffers,
# T.Fragment (a hint) for fragments
Layout = _user_layout.Layout
Fragment = _user_layout.Fragment


def make_swizzled_layout(buffer):
    """The bank-conflict-free swizzled layout of a shared tile, for ``T.annotate_layout``:
    ``T.annotate_layout({A_s: T.make_swizzled_layout(A_s)})``."""
    loc = _trace.capture()
    if not isinstance(buffer, _trace.Buffer):
        raise _trace.user_error(
            f"T.make_swizzled_layout takes a buffer, got {type(buffer).__name__}",
            loc=loc,
            help="pass the tile itself: T.make_swizzled_layout(A_shared)",
        )
    return _SwizzledLayout(buffer, loc)


def annotate_layout(layouts: dict):
    """Choose layouts instead of letting tilers infer them:
    ``T.annotate_layout({A_shared: T.make_swizzled_layout(A_shared)})``. Shared tiles take
    the swizzled layout (tiles that T.gemm reads are swizzled without asking); fragment
    layouts come from the instructions that use them."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.annotate_layout", loc)
    if not isinstance(layouts, dict):
        raise _trace.user_error(
            f"T.annotate_layout takes a dict {{buffer: layout}}, got {type(layouts).__name__}",
            loc=loc,
            help="e.g. T.annotate_layout({A_shared: T.make_swizzled_layout(A_shared)})",
        )
    for buffer, layout in layouts.items():
        if not isinstance(buffer, _trace.Buffer):
            raise _trace.user_error(
                f"T.annotate_layout: keys must be buffers, got {type(buffer).__name__}",
                loc=loc,
                help="e.g. T.annotate_layout({A_shared: T.make_swizzled_layout(A_shared)})",
            )
        if isinstance(layout, _user_layout.Fragment):
            if buffer.scope != "fragment":
                raise _trace.user_error(
                    f"T.annotate_layout: '{buffer.name}' is a {buffer.scope} buffer; a "
                    "T.Fragment lays out a fragment",
                    loc=loc,
                    help="give shared and global buffers a T.Layout",
                )
            if tuple(layout.input_shape) != tuple(buffer.shape):
                raise _trace.user_error(
                    f"T.annotate_layout: the T.Fragment is for shape {list(layout.input_shape)}, "
                    f"but '{buffer.name}' is {list(buffer.shape)}",
                    loc=loc,
                    help=f"make it from the fragment's shape: T.Fragment({buffer.name}.shape, ...)",
                )
            continue  # a hint: tilers chooses fragment layouts (tilers/_user_layout.py)
        if isinstance(layout, _user_layout.Layout):
            if buffer.scope not in ("global", "shared"):
                raise _trace.user_error(
                    f"T.annotate_layout: '{buffer.name}' is a {buffer.scope} buffer; a T.Layout "
                    "lays out global or shared memory",
                    loc=loc,
                    help="a fragment's layout says which thread holds an element: T.Fragment",
                )
            if buffer.used:
                raise _trace.user_error(
                    f"T.annotate_layout: '{buffer.name}' is used before its layout is given",
                    loc=loc,
                    help="annotate layouts at the start of the kernel, before the first access",
                )
            layout.check_bijection(buffer, loc)
            buffer.user_layout = layout
            continue
        if not isinstance(layout, _SwizzledLayout):
            raise _trace.user_error(
                f"T.annotate_layout: the layout of '{buffer.name}' must come from "
                f"T.make_swizzled_layout, T.Layout or T.Fragment, got {type(layout).__name__}",
                loc=loc,
                help="fragment layouts are inferred from the instructions that use them",
            )
        if layout.buffer is not buffer:
            raise _trace.user_error(
                f"T.annotate_layout: '{buffer.name}' is given the layout made for "
                f"'{layout.buffer.name}'",
                loc=loc,
                help=f"use T.make_swizzled_layout({buffer.name})",
            )
        if buffer.scope != "shared":
            raise _trace.user_error(
                f"T.annotate_layout: '{buffer.name}' is a {buffer.scope} buffer; only shared "
                "tiles can be swizzled",
                loc=loc,
                help="fragment layouts are inferred from the instructions that use them",
            )
        itemsize = _trace.dtype_bytes(buffer.dtype)
        row_bytes = buffer.shape[-1] * itemsize
        total = row_bytes
        for d in buffer.shape[:-1]:
            total *= d
        if row_bytes % 16 or total % 128:
            raise _trace.user_error(
                f"T.annotate_layout: '{buffer.name}' {list(buffer.shape)} {buffer.dtype} cannot "
                f"be swizzled: the swizzle permutes 16-byte chunks of 128-byte lines, and this "
                f"tile is {total} bytes with {row_bytes}-byte rows",
                loc=loc,
                help="swizzle tiles whose rows are a multiple of 16 bytes and whose size is a "
                "multiple of 128 bytes",
            )
        buffer.swizzle = True


def alloc_shared(shape, dtype, scope=None):
    """A tile in shared memory: ``A_s = T.alloc_shared((bM, bK), "float16")``."""
    return _alloc("shared", shape, dtype)


def alloc_fragment(shape, dtype, scope=None):
    """A tile spread over the threads' registers: ``acc = T.alloc_fragment((bM, bN), "float32")``."""
    return _alloc("fragment", shape, dtype)


def alloc_global(shape, dtype, scope="global"):
    """Global scratch memory the runtime allocates for every call (through torch's caching
    allocator, without synchronizing), for partial results that outlive a tile: split-K
    partials, log-sum-exp. It is no parameter: the call neither passes nor gets it, and its
    contents are undefined when the kernel starts (write before you read). Declare it before
    ``T.Kernel`` (as TileLang does) or inside; every block sees the same buffer, and tile
    operations of one block that write it and read it back are ordered by a barrier, as on
    shared memory (between blocks nothing is ordered)::

        partial = T.alloc_global((num_split, M), "float32")
        with T.Kernel(num_split, threads=128) as bs:
            ...
    """
    loc = _trace.capture()
    from . import eager

    trace = eager.current()
    if trace is not None and trace.consts is None:
        return eager._Placeholder()  # an eager function's discovery trace (sizes unbound yet)
    builder = _trace.current_builder()
    if scope != "global":
        raise _trace.user_error(
            f"T.alloc_global allocates global memory, not {scope!r}",
            loc=loc,
            help="use T.alloc_shared or T.alloc_fragment for on-chip tiles",
        )
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for axis, d in enumerate(dims):
        if isinstance(d, _trace.Size):
            continue
        if isinstance(d, _trace.Expr):
            raise _trace.user_error(
                f"T.alloc_global: dimension {axis} is an expression of kernel values; a "
                "scratch dimension is a Python int or a T.dynamic size",
                loc=loc,
                help='declare the dimension as a size of its own (M2 = T.dynamic("M2")) and '
                "give it to a tensor parameter too, or compute it in Python",
            )
        if not isinstance(d, _builtins.int) or isinstance(d, _builtins.bool) or d <= 0:
            raise _trace.user_error(
                f"T.alloc_global: the shape must be positive Python ints or T.dynamic sizes, "
                f"got {dims!r}",
                loc=loc,
                help="e.g. T.alloc_global((num_split, M), \"float32\")",
            )
    if not dims:
        raise _trace.user_error(
            "T.alloc_global: the shape has no dimensions", loc=loc,
            help="e.g. T.alloc_global((num_split, M), \"float32\")",
        )
    for d in dims:
        if isinstance(d, _trace.Size):
            builder.size_var(d)
    name = _trace.assigned_name(loc) or f"scratch{len(builder.scratch)}"
    buffer = builder.new_buffer(name, "global", _trace.normalize_dtype(dtype), dims, loc)
    builder.scratch.append(buffer)
    if builder.kernel_index is None:
        # declared outside the kernels: some kernel after it must use it (checked at the end)
        builder.scratch_declared[buffer.name] = (len(builder.kernels), loc)
    return buffer


def alloc_local(shape, dtype, scope=None):
    """Per-thread registers: ``x = T.alloc_local((1,), "float32")``."""
    return _alloc("local", shape, dtype)


# ----------------------------------------------------------------------------------------
# tile operations


def copy(src, dst, pad=None, *, disable_tma=False, coalesced_width=None, annotations=None,
         eviction_policy=None):
    """Copy a region: ``T.copy(A[by * bM, k * bK], A_s)``, ``T.copy(acc, C[by * bM, bx * bN])``.

    ``pad`` is the value read past the end of a global tensor (0 by default),
    e.g. ``pad=-T.infinity("float32")`` before a max. TileLang's hints ``disable_tma``,
    ``coalesced_width``, ``annotations`` and ``eviction_policy`` are accepted: tilers chooses
    each copy's instruction and vector width itself (``kernel.report()`` says which).
    """
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.copy", loc)
    if _user_layout.has_user_layout(src) or _user_layout.has_user_layout(dst):
        _user_layout.expand("T.copy", src, dst, loc, pad=pad)
        return
    src_region = _trace.region(src, dst, loc)
    dst_region = _trace.region(dst, src, loc)
    pad_node = None
    if pad is not None:
        dtype = builder.buffers[src_region["buf"]].dtype
        pad_node = cast(_trace.literal(pad, dtype), dtype).node()
    builder.emit({"op": "copy", "src": src_region, "dst": dst_region, "pad": pad_node}, loc)


def fill(dst, value, *, annotations=None):
    """Set every element of a buffer or region: ``T.fill(acc, 0)``, ``T.fill(A_s[0:16, :], 1)``;
    on a ``T.alloc_var``, its value (``T.clear(x)`` sets it to 0)."""
    if isinstance(dst, Var):
        dst.set(value)
        return
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.fill", loc)
    if _user_layout.has_user_layout(dst):
        target = dst if isinstance(dst, _trace.Buffer) else dst.buffer
        _user_layout.expand("T.fill", None, dst, loc, fill_value=_trace.literal(value, target.dtype))
        return
    if (isinstance(dst, _trace.Load) and not dst.has_slices()
            and len(dst.indices) == len(dst.buffer.shape)):
        # one element (TileLang's T.fill(s_count[0], 0)): a store
        dst.buffer[tuple(dst.indices)] = value
        return
    dst_region = _trace.region(dst, None, loc)
    dtype = builder.buffers[dst_region["buf"]].dtype
    builder.emit(
        {
            "op": "fill",
            "dst": dst_region,
            "value": cast(_trace.literal(value, dtype), dtype).node(),
        },
        loc,
    )


def clear(dst):
    """Set every element to zero: ``T.clear(acc)``."""
    fill(dst, 0)


def _reduce(kind: str, src, dst, dim: int, clear: _builtins.bool):
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, f"T.reduce_{kind}", loc)
    for what, operand in (("source", src), ("destination", dst)):
        if not isinstance(operand, _trace.Buffer):
            raise _trace.user_error(
                f"the {what} of T.reduce_{kind} must be a whole buffer",
                loc=loc,
                help="reduce a fragment, e.g. T.reduce_max(scores, row_max, dim=1)",
            )
    rank = len(src.shape)
    if not isinstance(dim, _builtins.int) or not -rank <= dim < rank:
        raise _trace.user_error(
            f"dim={dim!r} is out of range for '{src.name}' with {rank} dimensions",
            loc=loc,
            help=f"use a dimension from 0 to {rank - 1} (or -1 for the last)",
        )
    # a shared operand (TileLang allows them) is reduced through a fragment copy of it
    if "shared" in (src.scope, dst.scope) and not {src.scope, dst.scope} - {"shared", "fragment"}:
        s_frag = alloc_fragment(src.shape, src.dtype) if src.scope == "shared" else src
        d_frag = alloc_fragment(dst.shape, dst.dtype) if dst.scope == "shared" else dst
        if s_frag is not src:
            copy(src, s_frag)
        if d_frag is not dst and not clear:
            copy(dst, d_frag)
        _reduce(kind, s_frag, d_frag, dim, clear)
        if d_frag is not dst:
            copy(d_frag, dst)
        return
    builder.emit(
        {
            "op": "reduce",
            "kind": kind,
            "src": src.id,
            "dst": dst.id,
            "dim": dim % rank,
            "clear": _builtins.bool(clear),
        },
        loc,
    )


def reduce_max(src, dst, dim=-1, clear=True, *, annotations=None):
    """Row maxima: ``T.reduce_max(scores, row_max, dim=1)``."""
    _reduce("max", src, dst, dim, clear)


def reduce_min(src, dst, dim=-1, clear=True, *, annotations=None):
    """Minima along ``dim``: ``T.reduce_min(x, m, dim=1)``."""
    _reduce("min", src, dst, dim, clear)


def reduce_sum(src, dst, dim=-1, clear=True, *, annotations=None):
    """Sums along ``dim``: ``T.reduce_sum(p, row_sum, dim=1)``."""
    _reduce("sum", src, dst, dim, clear)


def reduce_absmax(src, dst, dim=-1, clear=True, *, annotations=None):
    """Largest magnitude along ``dim``: ``T.reduce_absmax(x, amax, dim=1)``."""
    _reduce("absmax", src, dst, dim, clear)


class GemmWarpPolicy:
    """How T.gemm spreads the block's warps over the output tile (TileLang's names):
    ``T.gemm(A_s, B_s, acc, policy=T.GemmWarpPolicy.FullRow)``. ``FullRow`` stacks the warps
    along M, ``FullCol`` along N; ``Square`` (the default) keeps each warp's tile closest to
    square."""

    Square = "square"
    FullRow = "full_row"
    FullCol = "full_col"


def gemm(
    A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False,
    k_pack=1, wg_wait=0, mbar=None,
):
    """C += A @ B on tiles: ``T.gemm(A_shared, B_shared, acc)``.

    A is (M, K) — (K, M) with ``transpose_A`` — and B is (K, N) — (N, K) with
    ``transpose_B``, in shared memory or fragments; C is an (M, N) fragment. A shared operand
    may be part of a tile: one stage of a multi-buffered tile (``A_s[k % 2, :, :]``) or a
    window of fixed slices (``Q_s[:, 0:64]``). float16 and
    bfloat16 inputs accumulate in float32, int8 inputs in int32. ``clear_accum=True``
    overwrites C instead of adding to it; a traced condition (``clear_accum=(k == 0)``, the
    same on every thread) clears C first where it holds. TileLang's ``k_pack`` and ``wg_wait`` are accepted
    (tilers picks the instruction shape, and a gemm completes before its accumulator is read).
    """
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.gemm", loc)
    if mbar is not None:
        raise _trace.user_error(
            "T.gemm(..., mbar=...) signals a barrier when an asynchronous gemm completes; tilers' "
            "gemms complete before the next statement",
            loc=loc,
            help="arrive at the barrier after the gemm: T.barrier_arrive(bar)",
        )
    operands = {}
    for what, operand in (("A", A), ("B", B), ("C", C)):
        if what != "C" and isinstance(operand, _trace.Load):
            # part of a shared tile: a stage (A_s[k % 2, :, :]) or a window (Q_s[:, 0:64])
            operands[what] = _trace.region(operand, None, loc)
            continue
        if not isinstance(operand, _trace.Buffer):
            raise _trace.user_error(
                f"operand {what} of T.gemm must be a shared or fragment tile"
                + (" or a slice of a shared tile" if what != "C" else " (the accumulator, used whole)"),
                loc=loc,
                help="allocate tiles with T.alloc_shared / T.alloc_fragment and copy into them",
            )
        _trace.refuse_user_layout(operand, loc, "T.gemm")
        operands[what] = operand.id
    if policy not in (GemmWarpPolicy.Square, GemmWarpPolicy.FullRow, GemmWarpPolicy.FullCol):
        raise _trace.user_error(
            f"policy={policy!r} is not a T.GemmWarpPolicy (Square, FullRow or FullCol)",
            loc=loc,
            help="pass policy=T.GemmWarpPolicy.Square, .FullRow or .FullCol",
        )
    if isinstance(clear_accum, _trace.Expr):
        # decided at run time: C is cleared where the condition holds, then accumulated into
        cond = _trace.literal(clear_accum)
        if cond.dtype != "bool":
            raise _trace.user_error(
                f"T.gemm(clear_accum=...) needs a bool or a bool condition, got {cond.dtype}",
                loc=loc,
                help="pass a comparison, e.g. clear_accum=(k == 0)",
            )
        body = builder.open_block("T.gemm(clear_accum=...)", loc)
        fill(C, 0)
        builder.close_block(body)
        builder.emit({"op": "if", "cond": cond.node(), "then": body, "else": []}, loc)
        clear_accum = False
    builder.emit(
        {
            "op": "gemm",
            "a": operands["A"],
            "b": operands["B"],
            "c": operands["C"],
            "transpose_a": _builtins.bool(transpose_A),
            "transpose_b": _builtins.bool(transpose_B),
            "policy": policy,
            "clear_accum": _builtins.bool(clear_accum),
        },
        loc,
    )


_MEMORY_ORDERS = {
    None: None,
    "relaxed": None,
    "consume": "acquire",  # as C++ compilers and TileLang treat it
    "acquire": "acquire",
    "release": "release",
    "acq_rel": "acq_rel",
    "seq_cst": "seq_cst",
}
_ATOMIC_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "uint32", "int64", "uint64")


def _is_tile(x) -> _builtins.bool:
    """A whole buffer or a subscript with a slice: what a tile atomic updates or reads."""
    return isinstance(x, _trace.Buffer) or (isinstance(x, _trace.Load) and x.has_slices())


def _atomic(op: str, dst, value, memory_order, return_prev):
    """``T.atomic_<op>``: one element (``C[i, j]``, ``value`` a scalar), or a tile (``dst`` or
    ``value`` a buffer or a region; a subscript of indices only is the tile's corner, as in
    ``T.copy``)."""
    what = f"T.atomic_{op}"
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, what, loc)
    if memory_order not in _MEMORY_ORDERS:
        raise _trace.user_error(
            f"{what}(memory_order={memory_order!r}) is not a memory order",
            loc=loc,
            help='use "relaxed" (the default), "acquire", "release", "acq_rel" or "seq_cst"',
        )
    order = _MEMORY_ORDERS[memory_order]
    if not isinstance(dst, (_trace.Buffer, _trace.Load)):
        raise _trace.user_error(
            f"{what} needs a destination in a global or shared buffer, got {type(dst).__name__}",
            loc=loc,
            help=f"pass an element ({what}(C[i, j], v)) or a tile ({what}(C[i0:i0 + 64, :], acc))",
        )
    target = dst if isinstance(dst, _trace.Buffer) else dst.buffer
    if target.scope not in ("global", "shared"):
        raise _trace.user_error(
            f"{what} needs a global or shared buffer; '{target.name}' is a {target.scope} buffer",
            loc=loc,
            help=f"each element of a {target.scope} buffer has one owner: update it in place "
            f"({target.name}[i] = ...) instead",
        )
    if target.dtype not in _ATOMIC_DTYPES:
        raise _trace.user_error(
            f"{what} does not support {target.dtype} ('{target.name}')",
            loc=loc,
            help="atomics exist for " + ", ".join(_ATOMIC_DTYPES) + " buffers",
        )
    if _is_tile(dst) or _is_tile(value):
        if return_prev:
            raise _trace.user_error(
                f"{what}(..., return_prev=True) returns one old value, so it takes one element, not a tile",
                loc=loc,
                help=f"update elements in a T.Parallel loop: old = {what}(C[i, j], v, return_prev=True)",
            )
        if not isinstance(value, (_trace.Buffer, _trace.Load)):
            raise _trace.user_error(
                f"{what} on a tile needs a tile of values (a fragment, shared tile or region), "
                f"got {type(value).__name__}",
                loc=loc,
                help=f"update elements in a T.Parallel loop: {what}(C[i, j], v), or fill a "
                f"fragment with the value and pass it",
            )
        if _user_layout.has_user_layout(dst) or _user_layout.has_user_layout(value):
            _user_layout.expand(what, value, dst, loc, atomic=op, memory_order=memory_order)
            return None
        node = {
            "op": "copy",
            "src": _trace.region(value, dst, loc),
            "dst": _trace.region(dst, value, loc),
            "atomic": op,
        }
        if order is not None:
            node["memory_order"] = order
        builder.emit(node, loc)
        return None
    idx = _trace.element_indices(target, dst.indices, dst.loc)
    dtype = target.dtype
    node = {"op": f"atomic_{op}", "buf": target.id, "idx": idx, "value": cast(_trace.literal(value, dtype), dtype).node()}
    if order is not None:
        node["memory_order"] = order
    prev = None
    if return_prev:
        name = _trace.assigned_name(loc) or f"{target.name}_prev"
        prev = builder.new_buffer(name, "local", dtype, (1,), loc)
        node["prev"] = prev.id
    builder.emit(node, loc)
    return None if prev is None else _trace.Load(prev, (0,), loc)


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False, annotations=None):
    """Atomically add ``value`` into ``dst``: an element, ``T.atomic_add(C[i, j], acc[i, j])``,
    or a tile, ``T.atomic_add(C[by * bM, bx * bN], acc)`` (the corner, as in ``T.copy``) or
    ``T.atomic_add(dQ[b, k * bN:(k + 1) * bN, :], dq)``. A tile is added by the block's threads
    (vector atomics where the GPU has them); elements past a tensor's edge are skipped.

    ``memory_order`` is ``"relaxed"`` (the default), ``"acquire"``, ``"release"``,
    ``"acq_rel"`` or ``"seq_cst"`` (``"consume"`` reads as acquire), at GPU scope.
    ``return_prev=True`` (elements only) returns the element's old value:
    ``ticket = T.atomic_add(counter[0], 1, return_prev=True)``. TileLang's ``use_tma`` is a
    hint tilers does not need.
    """
    return _atomic("add", dst, value, memory_order, return_prev)


def _atomic_add_wide(width, dst, value, return_prev):
    """``T.atomic_addx2`` / ``T.atomic_addx4``: ``width`` consecutive elements from the element
    ``dst`` names (an element or a slice ``C[i, j:j + width]``) add those from ``value`` (the
    same forms, or a scalar for every element)."""
    what = f"T.atomic_addx{width}"
    loc = _trace.capture()
    if return_prev:
        raise _trace.user_error(
            f"{what}(..., return_prev=True) is not supported yet",
            loc=loc,
            help="take the old values element by element: T.atomic_add(C[i, j], v, return_prev=True)",
        )

    def elements(x, name):
        if not isinstance(x, _trace.Load):
            return None
        idx = list(x.indices)
        last = idx[-1] if idx else None
        if isinstance(last, slice):
            start = 0 if last.start is None else last.start
            fixed = isinstance(last.stop, _builtins.int) and isinstance(start, _builtins.int)
            if fixed and last.stop - start != width:
                raise _trace.user_error(
                    f"{what}: the slice of '{x.buffer.name}' has {last.stop - start} elements, not {width}",
                    loc=loc,
                    help=f"name {width} consecutive elements: {x.buffer.name}[..., j:j + {width}] or {x.buffer.name}[..., j]",
                )
            last = start
        if any(isinstance(i, slice) for i in idx[:-1]) or last is None:
            raise _trace.user_error(
                f"{what}: {name} must be one element (the first of {width}) or a slice of the last dimension",
                loc=loc,
                help=f"{what}(C[i, j], acc_s[r, j]) adds C[i, j:j + {width}] += acc_s[r, j:j + {width}]",
            )
        return [x.buffer[tuple(idx[:-1] + [last + k])] for k in range(width)]

    targets = elements(dst, "the destination")
    sources = elements(value, "the value") if isinstance(value, _trace.Load) else [value] * width
    for t, v in zip(targets, sources):
        _atomic("add", t, v, None, False)


def atomic_addx2(dst, value, return_prev=False):
    """Two consecutive elements at once: ``T.atomic_addx2(C[i, j], v[r, j])`` adds
    ``C[i, j:j + 2] += v[r, j:j + 2]`` (each element atomically)."""
    _atomic_add_wide(2, dst, value, return_prev)


def atomic_addx4(dst, value, return_prev=False):
    """Four consecutive elements at once: ``T.atomic_addx4(dKV[b, i, d * 4], acc_s[r, d * 4])``
    (each element atomically)."""
    _atomic_add_wide(4, dst, value, return_prev)


def atomic_max(dst, value, memory_order=None, return_prev=False, annotations=None):
    """Atomically keep the larger of ``dst`` and ``value``: ``T.atomic_max(amax[0], m)``, or on
    a tile as ``T.atomic_add`` does. On floats a NaN ``value`` changes nothing, a NaN element
    takes ``value``, and -0.0 counts as less than +0.0. ``memory_order`` and ``return_prev``
    as for ``T.atomic_add``."""
    return _atomic("max", dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order=None, return_prev=False, annotations=None):
    """Atomically keep the smaller of ``dst`` and ``value``: ``T.atomic_min(lo[i], x)``, or on a
    tile as ``T.atomic_add`` does; floats as in ``T.atomic_max`` (-0.0 is the smaller zero)."""
    return _atomic("min", dst, value, memory_order, return_prev)


# ----------------------------------------------------------------------------------------
# loops and conditions


def Parallel(*extents, annotations=None, prefer_async=None, coalesced_width=None):
    """Element-wise loops the compiler maps onto threads: ``for i, j in T.Parallel(bM, bN):``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.Parallel", loc)
    if not 1 <= len(extents) <= 4:
        raise _trace.user_error(
            f"T.Parallel takes 1 to 4 extents, got {len(extents)}",
            loc=loc,
            help="loop over at most four dimensions, e.g. T.Parallel(block_M, block_N)",
        )
    for extent in extents:
        if isinstance(extent, _trace.Size):
            raise _trace.user_error(
                f"T.Parallel extents are tile sizes, fixed when the kernel is compiled; "
                f"'{extent.name}' is a T.dynamic size",
                loc=loc,
                help=f"loop over a fixed tile (T.Parallel(block_M)) inside a loop over "
                f"T.ceildiv({extent.name}, block_M) tiles, or use T.serial({extent.name})",
            )
        if not isinstance(extent, _builtins.int) or isinstance(extent, _builtins.bool) or extent <= 0:
            raise _trace.user_error(
                f"T.Parallel extents must be positive Python ints, got {extent!r}",
                loc=loc,
                help="use T.serial for a loop with a traced extent",
            )
        if extent > 1 << 24:
            raise _trace.user_error(
                f"T.Parallel extent {extent} is above the 2^24 iterations one loop may have",
                loc=loc,
                help="tile the work over the grid: each block should handle a tile of at most a few thousand elements per thread",
            )
    names = _trace.target_names(loc, _trace._FOR_TARGETS, len(extents))
    names = names or [f"i{len(builder.vars) + k}" for k in range(len(extents))]
    loop_vars = [builder.new_var(n, "loop") for n in names]
    return _parallel_body(builder, loop_vars, list(extents), loc)


def _parallel_body(builder, loop_vars, extents, loc):
    body = builder.open_block("T.Parallel", loc)
    stack = builder.__dict__.setdefault("_parallel_stack", [])
    frame = {"vars": loop_vars, "extents": extents, "updates": []}
    stack.append(frame)
    try:
        yield loop_vars[0] if len(loop_vars) == 1 else tuple(loop_vars)
    finally:
        stack.pop()
    builder.close_block(body)
    for update in frame["updates"]:  # each reducer update's partials start at the identity
        fill(update["part"], _REDUCER_IDENTITY[update["op"]](update["part"].dtype))
    builder.emit(
        {
            "op": "parallel",
            "vars": [v.node()["id"] for v in loop_vars],
            "extents": extents,
            "body": body,
        },
        loc,
    )
    for update in frame["updates"]:
        _finish_reducer_update(update, loop_vars, extents)


# ----------------------------------------------------------------------------------------
# reducers (T.alloc_reducer): an update inside a T.Parallel loop that leaves out some loop
# variables (`acc[i] += a[i, j] * x[j]`) combines every iteration's contribution: each is
# kept in a partial tile over the whole loop, reduced over the left-out dimensions after the
# loop (T.reduce_*: shuffles and shared memory as the layout needs), and combined into the
# reducer. TileLang's finalize_reducer then has nothing left to combine.

_REDUCER_COMBINE = {"sum": "add", "max": "max", "min": "min"}
_REDUCER_IDENTITY = {
    "sum": lambda dtype: 0,
    "max": lambda dtype: -infinity(dtype) if _trace.is_float(dtype) else _int_limits(dtype)[0],
    "min": lambda dtype: infinity(dtype) if _trace.is_float(dtype) else _int_limits(dtype)[1],
}


def _int_limits(dtype):
    from .kernel import INTEGER_RANGES

    return INTEGER_RANGES[dtype]


def alloc_reducer(shape, dtype, op="sum", replication=None):
    """A fragment whose updates inside T.Parallel loops are reductions:
    ``acc = T.alloc_reducer(block_M, "float32")``, ``T.clear(acc)`` (or
    ``T.reducer_init(acc)``), ``acc[i] += a[i, j] * x[j]`` in a ``T.Parallel(block_M,
    block_N)`` loop (or ``T.reducer_update(acc[i], v)``), ``T.finalize_reducer(acc)``.
    ``op`` is ``"sum"``, ``"max"`` or ``"min"``; TileLang's ``replication`` has no effect."""
    loc = _trace.capture()
    if op not in _REDUCER_COMBINE:
        raise _trace.user_error(
            f"T.alloc_reducer(op={op!r}): tilers reduces with \"sum\", \"max\" or \"min\"",
            loc=loc,
            help="bitwise reducers are not supported yet: reduce with T.Parallel and T.atomic_* instead",
        )
    if replication not in (None, "all", "none"):
        raise _trace.user_error(
            f"T.alloc_reducer(replication={replication!r}) is not 'all', 'none' or None",
            loc=loc,
            help="leave it out: tilers chooses how partials are held",
        )
    buf = _alloc("fragment", shape, dtype)
    buf.reducer_op = op
    return buf


def _reducer(acc, what, loc):
    if not isinstance(acc, _trace.Buffer) or acc.reducer_op is None:
        raise _trace.user_error(
            f"{what} takes a buffer made by T.alloc_reducer, got "
            f"{getattr(acc, 'name', type(acc).__name__)!r}",
            loc=loc,
            help="allocate it with acc = T.alloc_reducer(shape, dtype, op=\"sum\")",
        )
    return acc


def reducer_init(acc, value=None):
    """Set every element of a reducer to ``value`` (its op's identity by default):
    ``T.reducer_init(acc)``."""
    loc = _trace.capture()
    _reducer(acc, "T.reducer_init", loc)
    fill(acc, _REDUCER_IDENTITY[acc.reducer_op](acc.dtype) if value is None else value)


def reducer_update(ref, contribution):
    """Combine ``contribution`` into the reducer element ``ref``: ``T.reducer_update(acc[i],
    v)`` (inside a T.Parallel loop, a reduction over the loop variables ``ref`` leaves out)."""
    loc = _trace.capture()
    if not isinstance(ref, _trace.Load) or ref.has_slices():
        raise _trace.user_error(
            "T.reducer_update takes one element of a reducer, as acc[i]",
            loc=loc,
            help="update elements inside a T.Parallel loop: T.reducer_update(acc[i], v)",
        )
    acc = _reducer(ref.buffer, "T.reducer_update", loc)
    if not _reducer_update(acc, ref.indices, contribution, loc):
        current = _trace.Load(acc, ref.indices, loc)
        acc[ref.indices] = _combine(acc.reducer_op, current, contribution)


def finalize_reducer(acc, dst=None):
    """TileLang's end of a reduction epoch: the updates were combined at the end of each
    T.Parallel loop, so only the copy into ``dst`` (when given) is left."""
    loc = _trace.capture()
    _reducer(acc, "T.finalize_reducer", loc)
    if dst is not None:
        copy(acc, dst)


def _combine(op, a, b):
    if op == "sum":
        return a + b
    return max(a, b) if op == "max" else min(a, b)


def _reducer_store(acc, indices, value, loc) -> _builtins.bool:
    """``acc[indices] = value`` on a reducer: when it reads ``acc[indices] op v`` inside a
    T.Parallel loop whose variables it leaves out, a reduction of ``v`` (True); else a store."""
    builder = _trace.current_builder()
    stack = builder.__dict__.get("_parallel_stack") or []
    if not stack or not isinstance(value, _trace.Expr):
        return False
    node = value.node()
    want = {"add": "sum", "max": "max", "min": "min"}.get(node.get("op"))
    if want != acc.reducer_op:
        return False
    own = _trace.Load(acc, tuple(indices), loc).node()
    same = lambda n: n.get("op") == "load" and n.get("buf") == own["buf"] and n.get("idx") == own["idx"]  # noqa: E731
    if same(node["a"]):
        other = node["b"]
    elif same(node["b"]):
        other = node["a"]
    else:
        return False
    return _reducer_update(acc, indices, _trace.Expr(other), loc)


def _reducer_update(acc, indices, contribution, loc) -> _builtins.bool:
    builder = _trace.current_builder()
    stack = builder.__dict__.get("_parallel_stack") or []
    if not stack:
        return False
    frame = stack[-1]
    var_ids = [v.node()["id"] for v in frame["vars"]]
    used = []
    for i in indices:
        n = _trace.literal(i).node() if not _builtins.isinstance(i, _builtins.int) else None
        if n is None or n.get("op") != "var" or n["id"] not in var_ids:
            raise _trace.user_error(
                f"an update of the reducer '{acc.name}' inside T.Parallel must index it by "
                "loop variables of that loop",
                loc=loc,
                help=f"e.g. {acc.name}[i] += x[i, j] in `for i, j in T.Parallel(...)`",
            )
        used.append(var_ids.index(n["id"]))
    if len(used) == len(var_ids):
        return False  # every loop variable: each iteration its own element, a plain store
    if used != sorted(used) or len(set(used)) != len(used):
        raise _trace.user_error(
            f"the reducer '{acc.name}' is indexed by loop variables out of the loop's order",
            loc=loc,
            help="index it by the kept loop variables in the order T.Parallel lists them",
        )
    part = builder.new_buffer(f"{acc.name}_part", "fragment", acc.dtype, tuple(frame["extents"]), loc)
    part[tuple(frame["vars"])] = contribution
    frame["updates"].append({"acc": acc, "part": part, "kept": used, "op": acc.reducer_op, "loc": loc})
    return True


def _finish_reducer_update(update, loop_vars, extents):
    """After the loop: reduce the partials over the left-out dimensions and combine them in."""
    builder = _trace.current_builder()
    acc, part, kept, op = update["acc"], update["part"], update["kept"], update["op"]
    cur, dims = part, list(range(len(extents)))
    for d in reversed(range(len(extents))):
        if d in kept:
            continue
        shape = tuple(extents[k] for k in dims if k != d)
        nxt = builder.new_buffer(f"{acc.name}_red", "fragment", acc.dtype, shape, update["loc"])
        _reduce(op, cur, nxt, dims.index(d), True)
        dims.remove(d)
        cur = nxt
    names = [f"r{len(builder.vars)}_{k}" for k in range(len(dims))]
    lvars = [builder.new_var(n, "loop") for n in names]
    body = _parallel_body(builder, lvars, [extents[k] for k in dims], update["loc"])
    next(body)
    acc[tuple(lvars)] = _combine(op, _trace.Load(acc, tuple(lvars), update["loc"]), cur[tuple(lvars)])
    next(body, None)


def _for_loop(kind: str, start, stop, stages, what: str, step=None):
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, what, loc)
    if stop is None:
        start, stop = 0, start
    if step is not None and not (isinstance(step, _builtins.int) and step == 1):
        return _stepped_loop(builder, kind, start, stop, step, what, loc)
    extent = stop if isinstance(start, _builtins.int) and start == 0 else stop - start
    start_node = _loop_bound(start, loc, what)
    extent_node = _loop_bound(extent, loc, what)
    names = _trace.target_names(loc, _trace._FOR_TARGETS, 1)
    var = builder.new_var(names[0] if names else f"i{len(builder.vars)}", "loop")
    stmt = {
        "op": "for",
        "var": var.node()["id"],
        "start": start_node,
        "extent": extent_node,
        "kind": kind,
    }
    if stages is not None:
        stmt["stages"] = stages
    return _for_body(builder, var, stmt, loc, what)


def _stepped_loop(builder, kind, start, stop, step, what, loc):
    """``T.serial(start, stop, step)`` (TileLang's stepped loops): a loop over the
    iteration count, its variable ``start + k * step`` (a negative step counts down; the
    loop runs no iteration where the range is empty)."""
    if isinstance(step, _builtins.bool) or not isinstance(step, _builtins.int):
        raise _trace.user_error(
            f"{what} step must be a Python int, got {step!r}",
            loc=loc,
            help="a step known when the kernel is traced: T.serial(0, n, 2); for a run-time step, "
            "loop over the count and compute the index",
        )
    if step == 0:
        raise _trace.user_error(f"{what} step must not be 0", loc=loc, help="use 1 to take every value")
    for bound in (start, stop):
        _loop_bound(bound, loc, what)  # integers, or an error at the line
    span = stop - start if step > 0 else start - stop
    size = _builtins.abs(step)
    if isinstance(span, _builtins.int):
        count = _builtins.max(0, -(-span // size))
    else:
        count = (span + (size - 1)) // size
    names = _trace.target_names(loc, _trace._FOR_TARGETS, 1)
    var = builder.new_var((names[0] + "_k") if names else f"k{len(builder.vars)}", "loop")
    stmt = {
        "op": "for",
        "var": var.node()["id"],
        "start": _loop_bound(0, loc, what),
        "extent": _loop_bound(count, loc, what),
        "kind": kind,
    }
    value = start + var * step if not (isinstance(start, _builtins.int) and start == 0) else var * step
    stmt["body"] = builder.open_block(what, loc)
    yield value
    builder.close_block(stmt["body"])
    builder.emit(stmt, loc)


def _for_body(builder, var, stmt, loc, what):
    stmt["body"] = builder.open_block(what, loc)
    yield var
    builder.close_block(stmt["body"])
    builder.emit(stmt, loc)


def _loop_bound(value, loc, what) -> dict:
    expr = _trace.literal(value)
    if not _trace.is_int(expr.dtype):
        raise _trace.user_error(
            f"{what} bounds must be integers, got {expr.dtype}",
            loc=loc,
            help='convert the bound with T.cast(x, "int32")',
        )
    return expr.node()


def serial(start, stop=None, step=None, *, annotations=None):
    """A sequential loop: ``for k in T.serial(n):``, ``T.serial(start, stop)`` or
    ``T.serial(start, stop, step)`` (a Python int step, negative counts down).
    ``annotations`` (TileLang's loop hints) are accepted and not used."""
    return _for_loop("serial", start, stop, None, "T.serial", step)


def unroll(start, stop=None, step=None, *, explicit=False, unroll_factor=None, annotations=None):
    """A sequential loop the compiler unrolls: ``for k in T.unroll(4):`` (a ``step`` as in
    :func:`serial`; TileLang's ``explicit``, ``unroll_factor`` and ``annotations`` are
    accepted and not used: tilers unrolls the whole loop)."""
    return _for_loop("unroll", start, stop, None, "T.unroll", step)


def vectorized(start, stop=None):
    """TileLang's vectorized loop, ``for v in T.vectorized(8):``: an unrolled sequential loop
    in tilers (the compiler picks vector widths for tile copies itself; the C compiler may
    merge the unrolled scalar accesses)."""
    return _for_loop("unroll", start, stop, None, "T.vectorized")


def Pipelined(start, stop=None, num_stages=0, order=None, stage=None, sync=None, group=None):
    """A loop whose copies are software-pipelined: ``for k in T.Pipelined(n, num_stages=3):``.

    TileLang's manual schedule: ``stage=`` and ``order=`` give each statement of the body
    (or, with ``group=[[0], [1, 2], ...]``, each group of statements) its stage — a statement
    of stage ``s`` runs iteration ``i - s`` at step ``i`` — and its place in a step. The
    compiler checks that the schedule keeps every dependence of the source loop (else an
    error at the statement), runs it (docs/architecture.md, "Manual pipeline schedules") and
    the report says how. Without ``num_stages``, the pipeline is ``max(stage) + 1`` deep.
    ``sync=`` is accepted and not used (the compiler places the barriers)."""
    if not isinstance(num_stages, _builtins.int) or isinstance(num_stages, _builtins.bool) or num_stages < 0:
        raise _trace.user_error(
            f"num_stages must be a non-negative int, got {num_stages!r}",
            help="use num_stages=2 or 3 to overlap copies with compute, or 0 for none",
        )
    if num_stages > 16:
        raise _trace.user_error(
            f"num_stages={num_stages} is above the 16 stages a pipeline may have",
            help="use num_stages=2 to 4: more stages than copies in flight only cost shared memory",
        )
    for name, value in {"order": order, "stage": stage}.items():
        if value is None:
            continue
        if not isinstance(value, (list, tuple)) or not _builtins.all(
            isinstance(x, _builtins.int) and not isinstance(x, _builtins.bool) and -1 <= x <= 64 for x in value
        ):
            raise _trace.user_error(
                f"T.Pipelined({name}=...) takes a list of ints from -1 to 64 (one per statement of the "
                f"loop body, or per group), got {value!r}",
                help=f"e.g. {name}=[0, 0, 1]",
            )
    if group is not None and (
        not isinstance(group, (list, tuple))
        or not _builtins.all(
            isinstance(g, (list, tuple)) and _builtins.all(isinstance(x, _builtins.int) for x in g) for g in group
        )
    ):
        raise _trace.user_error(
            f"T.Pipelined(group=...) takes a list of lists of statement indices, got {group!r}",
            help="e.g. group=[[0], [1, 2], [3]] with one order and stage per group",
        )
    if order is not None and stage is not None and len(order) != len(stage):
        raise _trace.user_error(
            f"T.Pipelined: order= has {len(order)} entries and stage= {len(stage)}; they describe the "
            "same statements",
            help="give one order and one stage per statement of the loop body (or per group)",
        )
    if group is not None and order is None and stage is None:
        raise _trace.user_error(
            "T.Pipelined(group=...) without order= or stage=: the groups have nothing to say",
            help="give order= and stage= one entry per group",
        )
    if sync is not None:
        import warnings

        loc = _trace.capture()
        warnings.warn_explicit(
            "T.Pipelined(sync=...): tilers places the pipeline's barriers itself; sync= is not used",
            UserWarning, loc.file, loc.line,
        )
    if order is None and stage is None:
        return _for_loop("pipelined", start, stop, num_stages, "T.Pipelined")
    return _scheduled_loop(start, stop, num_stages, order, stage, group)


def _scheduled_loop(start, stop, num_stages, order, stage, group):
    """`T.Pipelined` with a manual schedule: the loop, then its schedule per statement."""
    loc = _trace.capture()
    inner = _for_loop("pipelined", start, stop, num_stages, "T.Pipelined")
    var = next(inner)
    builder = _trace.current_builder()
    stmt_body = builder.blocks[-1].body
    yield var
    body = list(stmt_body)
    lines = ", ".join(f"{i}: {st['op']} (line {st.get('loc', [0, '?'])[1]})" for i, st in enumerate(body))
    entries = len(order if order is not None else stage)
    if group is not None:
        if len(group) != entries:
            raise _trace.user_error(
                f"T.Pipelined: group= has {len(group)} groups and order=/stage= {entries} entries",
                loc=loc,
                help="give one order and one stage per group",
            )
        per = [None] * len(body)
        for g, members in enumerate(group):
            for k in members:
                if not 0 <= k < len(body):
                    raise _trace.user_error(
                        f"T.Pipelined: group {g} names statement {k}; the loop body has {len(body)} "
                        f"statements ({lines})",
                        loc=loc,
                        help="number the body's statements from 0",
                    )
                if per[k] is not None:
                    raise _trace.user_error(
                        f"T.Pipelined: statement {k} is in groups {per[k]} and {g}",
                        loc=loc,
                        help="put each statement of the body in one group",
                    )
                per[k] = g
        missing = [k for k, g in enumerate(per) if g is None]
        if missing:
            raise _trace.user_error(
                f"T.Pipelined: statement(s) {missing} of the loop body are in no group ({lines})",
                loc=loc,
                help="put each statement of the body in one group",
            )
    else:
        if entries != len(body):
            raise _trace.user_error(
                f"T.Pipelined: order=/stage= give {entries} entries; the loop body has {len(body)} "
                f"statements ({lines})",
                loc=loc,
                help="give one entry per statement of the loop body, or group them with group=",
            )
        per = list(range(len(body)))
    stages = [stage[g] if stage is not None else 0 for g in per]
    orders = [order[g] if order is not None else k for k, g in enumerate(per)]
    schedule = {"stage": stages, "order": orders}
    # TileLang: without num_stages the pipeline is max(stage) + 1 deep
    depth = num_stages if num_stages else _builtins.max([0, *stages]) + 1
    try:
        next(inner)
    except StopIteration:
        pass
    loop = builder.blocks[-1].body[-1] if builder.blocks else None
    if loop is None or loop.get("op") != "for" or loop.get("body") is not stmt_body:
        raise _trace.user_error("T.Pipelined: internal error placing the schedule", loc=loc)
    loop["schedule"] = schedule
    loop["stages"] = depth


class If:
    """Statements run when ``cond`` holds: ``with T.If(i < n): ...``; follow with ``T.Else()``."""

    def __init__(self, cond):
        self.loc = _trace.capture()
        self.cond = _trace.literal(cond)
        if self.cond.dtype != "bool":
            raise _trace.user_error(
                f"T.If needs a bool condition, got {self.cond.dtype}",
                loc=self.loc,
                help="use a comparison, e.g. T.If(i < n)",
            )

    def __enter__(self):
        builder = _trace.current_builder()
        _trace.require_kernel(builder, "T.If", self.loc)
        self.body = builder.open_block("T.If", self.loc)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        builder = _trace.current_builder()
        builder.close_block(self.body)
        builder.emit(
            {"op": "if", "cond": self.cond.node(), "then": self.body, "else": []}, self.loc
        )
        return False


class Else:
    """The other branch of the ``with T.If(cond):`` block just before it:
    ``with T.If(i < n): ...`` then ``with T.Else(): ...``."""

    def __init__(self):
        self.loc = _trace.capture()

    def __enter__(self):
        builder = _trace.current_builder()
        _trace.require_kernel(builder, "T.Else", self.loc)
        siblings = builder.blocks[-1].body
        if not siblings or siblings[-1]["op"] != "if" or siblings[-1]["else"]:
            raise _trace.user_error(
                "`with T.Else():` must directly follow a `with T.If(...):` block",
                loc=self.loc,
                help="place it right after the T.If block it belongs to, at the same indentation",
            )
        self.target = siblings[-1]
        self.body = builder.open_block("T.Else", self.loc)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        _trace.current_builder().close_block(self.body)
        self.target["else"] = self.body
        return False


# ----------------------------------------------------------------------------------------
# scalar math


def max(a, b):
    """The larger of two values: ``T.max(x, 0.0)``."""
    if not isinstance(a, _trace.Expr) and not isinstance(b, _trace.Expr):
        return _builtins.max(a, b)
    return _trace.binary("max", a, b)


def min(a, b):
    """The smaller of two values: ``T.min(x, y)``."""
    if not isinstance(a, _trace.Expr) and not isinstance(b, _trace.Expr):
        return _builtins.min(a, b)
    return _trace.binary("min", a, b)


def abs(x):
    """``|x|``: ``T.abs(A[i] - B[i])``."""
    return _trace.unary("abs", x)


def exp(x):
    """``e**x``: ``T.exp(x - row_max[i])``."""
    return _trace.unary("exp", x)


def exp2(x):
    """``2**x``: ``T.exp2(x * 1.44269504)``."""
    return _trace.unary("exp2", x)


def log(x):
    """The natural logarithm: ``T.log(row_sum[i])``."""
    return _trace.unary("log", x)


def log2(x):
    """The base-2 logarithm: ``T.log2(x)``."""
    return _trace.unary("log2", x)


def sqrt(x):
    """The square root: ``T.sqrt(var[i] + 1e-5)``."""
    return _trace.unary("sqrt", x)


def rsqrt(x):
    """``1 / sqrt(x)``: ``T.rsqrt(var[i] + 1e-5)``."""
    return _trace.unary("rsqrt", x)


def tanh(x):
    """The hyperbolic tangent: ``T.tanh(x)``."""
    return _trace.unary("tanh", x)


def sigmoid(x):
    """``1 / (1 + exp(-x))``: ``x * T.sigmoid(x)`` is SiLU."""
    return _trace.unary("sigmoid", x)


def erf(x):
    """The error function: ``0.5 * x * (1 + T.erf(x * 0.70710678))`` is GELU."""
    return _trace.unary("erf", x)


def sin(x):
    """The sine: ``T.sin(angle[i])``."""
    return _trace.unary("sin", x)


def cos(x):
    """The cosine: ``T.cos(angle[i])``."""
    return _trace.unary("cos", x)


def floor(x):
    """Round down: ``T.floor(x)``."""
    return _trace.unary("floor", x)


def ceil(x):
    """Round up: ``T.ceil(x)``."""
    return _trace.unary("ceil", x)


def cumsum(src, dst=None, dim=0, reverse=False, annotations=None):
    """Inclusive prefix sums of a shared or fragment tile along ``dim``: ``T.cumsum(G_s,
    dim=1)`` in place, ``T.cumsum(src, dst, dim=0, reverse=True)`` into ``dst`` (summing from
    the end). Each line along ``dim`` is summed by one thread in order (deterministic); a
    fragment goes through a shared copy, as TileLang's does. ``annotations`` is accepted."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.cumsum", loc)
    dst = src if dst is None else dst
    for what, b in (("source", src), ("destination", dst)):
        if not isinstance(b, _trace.Buffer) or b.scope not in ("shared", "fragment", "local"):
            raise _trace.user_error(
                f"the {what} of T.cumsum must be a whole shared or fragment tile",
                loc=loc,
                help="allocate it with T.alloc_shared or T.alloc_fragment (copy a region into one first)",
            )
    shape = [_builtins.int(x) for x in src.shape]
    if [_builtins.int(x) for x in dst.shape] != shape:
        raise _trace.user_error(
            f"T.cumsum: the destination's shape {list(dst.shape)} differs from the source's {shape}", loc=loc)
    if not isinstance(dim, _builtins.int) or not -len(shape) <= dim < len(shape):
        raise _trace.user_error(f"T.cumsum: dim={dim!r} is not a dimension of a {len(shape)}-d tile", loc=loc)
    dim %= len(shape)
    # the scan runs in a shared tile: dst itself, or a staging copy of a fragment
    work = dst if dst.scope == "shared" else alloc_shared(shape, dst.dtype)
    if work is not src:
        copy(src, work)
    n = shape[dim]
    others = [e for d, e in enumerate(shape) if d != dim] or [1]
    for idx in Parallel(*others):
        idx = list(idx) if isinstance(idx, (list, tuple)) else [idx]
        for k in serial(1, n):
            at = n - 1 - k if reverse else k
            prev = at + 1 if reverse else at - 1
            lead = idx if len(shape) > 1 else []
            cur = tuple(lead[:dim] + [at] + lead[dim:])
            before = tuple(lead[:dim] + [prev] + lead[dim:])
            work[cur] = work[cur] + work[before]
    if work is not dst:
        copy(work, dst)


def reinterpret(value, dtype):
    """``value``'s bits read as ``dtype``, a type of the same width: ``T.reinterpret(x,
    T.uint32)`` of a float32 ``x`` (TIR's older order, ``T.reinterpret(dtype, value)``, is
    taken too). Integer and float types of 1, 2, 4 or 8 bytes; not bool."""
    loc = _trace.capture()
    if not isinstance(value, _trace.Expr) and isinstance(dtype, _trace.Expr):
        value, dtype = dtype, value
    target = _trace.normalize_dtype(dtype)
    x = _trace.literal(value)
    if "bool" in (x.dtype, target) or _trace.dtype_bytes(x.dtype) != _trace.dtype_bytes(target):
        raise _trace.user_error(
            f"T.reinterpret({x.dtype} value, {target}): the two types must have the same width "
            f"({x.dtype}: {_trace.dtype_bytes(x.dtype)} bytes, {target}: {_trace.dtype_bytes(target)}), "
            "and neither may be bool",
            loc=loc,
            help="reinterpret float32 as int32/uint32, float16 or bfloat16 as int16/uint16, "
                 "float64 as int64/uint64; use T.cast to convert a value",
        )
    if x.dtype == target:
        return x
    return _trace.node("reinterpret", target, a=x.node())


def if_then_else(cond, a, b):
    """``a`` where ``cond`` holds, else ``b``: ``T.if_then_else(i < n, A[i], 0.0)``."""
    if not isinstance(cond, _trace.Expr):
        return a if cond else b
    return _trace.select(cond, a, b)


def infinity(dtype):
    """Positive infinity of a float dtype: ``pad=-T.infinity("float32")``."""
    dtype = _trace.normalize_dtype(dtype)
    if not _trace.is_float(dtype):
        raise _trace.user_error(
            f"T.infinity needs a float dtype, got {dtype}",
            help='use a float dtype such as T.infinity("float32")',
        )
    return _trace.const(_builtins.float("inf"), dtype)


def dynamic(name, dtype="int32", multiple_of=None):
    """A symbolic size: ``M = T.dynamic("M")``, then ``A: T.Tensor((M, K), "float16")``.

    One compiled kernel serves every value of ``M``; each call binds it from the tensors it
    is given (tensors that disagree on it are an error naming both). ``M`` may appear in
    the grid (``T.ceildiv(M, block_M)``), in loop bounds and in the kernel's arithmetic, not
    in a tile's shape. ``T.dynamic("m, n")`` gives a tuple. ``dtype``: "int32" (the
    default) or "int64". ``multiple_of=16`` promises that every value is a multiple of 16:
    the launcher checks it on every call, and the compiler removes the bounds checks the
    promise makes redundant and may vectorize along the size. A size of 0 launches nothing.
    """
    return _trace.make_sizes(name, dtype, multiple_of)


def symbolic(name, dtype="int32", multiple_of=None):
    """The older name of ``T.dynamic`` (TileLang keeps it as a deprecated alias)."""
    return _trace.make_sizes(name, dtype, multiple_of)


def ceildiv(a, b):
    """``(a + b - 1) // b``; plain ints give a plain int: ``T.ceildiv(1000, 128) == 8``."""
    if isinstance(a, _builtins.int) and isinstance(b, _builtins.int):
        if b <= 0:
            raise _trace.user_error(f"T.ceildiv({a}, {b}): the divisor must be a positive integer")
        return -(-a // b)
    for operand in (a, b):
        if operand is None or isinstance(operand, (_builtins.float, _builtins.str, _builtins.list,
                                                   _builtins.tuple, _builtins.dict)):
            raise _trace.user_error(
                f"T.ceildiv({a!r}, {b!r}): operands must be integers or traced integer values, "
                f"got {type(operand).__name__}"
            )
    return (a + b - 1) // b


# ----------------------------------------------------------------------------------------
# debugging


def print(value, msg="", block=None):
    """Print a value or a tile, with the block index: ``T.print(acc, "acc")``, ``T.print(x, "x")``.

    A scalar is printed once per block (once per iteration inside ``T.Parallel``, with the
    loop indices); a buffer, or a region such as ``A_s[0:4, :]``, is printed whole from
    outside ``T.Parallel``. ``block=(bx, by)`` prints from that block only. On the GPU this
    is ``printf``; on the interpreter it writes to stdout:
    ``[block (0, 1, 0)] x: 3.5``.
    """
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.print", loc)
    if not isinstance(msg, str):
        raise _trace.user_error(
            f"the message of T.print must be a str, got {type(msg).__name__}",
            loc=loc,
            help='pass a string literal, e.g. T.print(x, "x")',
        )
    if isinstance(value, _trace.Buffer) or (isinstance(value, _trace.Load) and value.has_slices()):
        what = {"tile": _trace.region(value, None, loc)}
    else:
        what = {"value": _trace.literal(value).node()}
    stmt = {"op": "print", **what, "msg": msg}
    if block is not None:
        stmt["block"] = _print_block(block, loc)
    builder.emit(stmt, loc)


def _print_block(block, loc) -> list:
    coords = list(block) if isinstance(block, (tuple, list)) else [block]
    ok = 1 <= len(coords) <= 3 and all(
        isinstance(c, _builtins.int) and not isinstance(c, _builtins.bool) and c >= 0 for c in coords
    )
    if not ok:
        raise _trace.user_error(
            f"block={block!r} must be 1 to 3 non-negative Python ints",
            loc=loc,
            help="name one block of the grid, e.g. block=(0, 1); leave it out to print from every block",
        )
    return coords


def device_assert(cond, msg=""):
    """Stop the kernel when ``cond`` is false: ``T.device_assert(i < n, "i out of range")``.

    Inside ``T.Parallel`` it is checked for every iteration, outside once per block. On the
    GPU a failure prints the file, line and message and traps (the launch fails); on the
    interpreter it raises ``TileError`` naming this line and the block.
    """
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.device_assert", loc)
    if not isinstance(msg, str):
        raise _trace.user_error(
            f"the message of T.device_assert must be a str, got {type(msg).__name__}",
            loc=loc,
            help='pass a string literal, e.g. T.device_assert(i < n, "i out of range")',
        )
    condition = _trace.literal(cond)
    if condition.dtype != "bool":
        raise _trace.user_error(
            f"T.device_assert needs a bool condition, got {condition.dtype}",
            loc=loc,
            help="use a comparison, e.g. T.device_assert(x >= 0)",
        )
    builder.emit({"op": "device_assert", "cond": condition.node(), "msg": msg}, loc)


# ----------------------------------------------------------------------------------------
# explicit warp specialization (TileLang's expert controls)


def alloc_barrier(arrive_count):
    """Shared-memory mbarriers the kernel synchronizes on itself:
    ``bar = T.alloc_barrier(128)`` (one barrier that completes a phase when 128 threads
    arrive) or ``bars = T.alloc_barrier([128] * 4)`` (four: ``bars[i]``). Initialized
    before the kernel's first statement; waited on with ``T.barrier_wait(bar, parity)``,
    arrived at with ``T.barrier_arrive(bar)``, completed by ``T.tma_copy(..., barrier=bar)``.
    """
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.alloc_barrier", loc)
    counts = [arrive_count] if isinstance(arrive_count, _builtins.int) else arrive_count
    try:
        counts = [c.__index__() for c in counts]
    except (TypeError, AttributeError):
        counts = None
    if not counts or any(isinstance(c, _builtins.bool) or not 1 <= c <= (1 << 20) - 1 for c in counts):
        raise _trace.user_error(
            f"T.alloc_barrier takes a positive arrive count or a list of them, got {arrive_count!r}",
            loc=loc,
            help="e.g. T.alloc_barrier(128), or T.alloc_barrier([128, 128]) for two barriers",
        )
    if len(builder.blocks) != 1:
        raise _trace.user_error(
            "T.alloc_barrier must be called at the top of the kernel, outside loops, T.ws "
            "regions and branches",
            loc=loc,
            help="allocate the barriers next to the shared tiles, before the loop",
        )
    name = _trace.assigned_name(loc) or "barrier"
    buffer = builder.new_buffer(name, "shared", "int64", (len(counts),), loc)
    buffer.is_barrier = True
    for i, count in enumerate(counts):
        builder.emit(
            {"op": "barrier_init", "bar": buffer.id, "idx": _trace.const(i, "int32").node(), "count": count},
            loc,
        )
    return buffer


def _barrier_ref(barrier, what: str, loc):
    """(buffer, index node) of ``bar`` (a one-barrier allocation) or ``bars[i]``."""
    if isinstance(barrier, _trace.Buffer) and getattr(barrier, "is_barrier", False):
        if barrier.shape[0] != 1:
            raise _trace.user_error(
                f"{what}: '{barrier.name}' holds {barrier.shape[0]} barriers; pick one",
                loc=loc,
                help=f"index it: {barrier.name}[i]",
            )
        return barrier, _trace.const(0, "int32").node()
    if isinstance(barrier, _trace.Load) and getattr(barrier.buffer, "is_barrier", False):
        if len(barrier.indices) != 1 or isinstance(barrier.indices[0], slice):
            raise _trace.user_error(
                f"{what}: index a barrier array with one index, as {barrier.buffer.name}[i]",
                loc=loc,
            )
        i = barrier.indices[0]
        count = barrier.buffer.shape[0]
        if isinstance(i, _builtins.int) and not isinstance(i, _builtins.bool) and not -count <= i < count:
            raise _trace.user_error(
                f"{what}: '{barrier.buffer.name}' holds {count} barrier(s); index {i} is out of range",
                loc=loc,
                help=f"index it from 0 to {count - 1}",
            )
        index = _trace.index_node(i, count, loc)
        return barrier.buffer, index
    raise _trace.user_error(
        f"{what} takes a barrier from T.alloc_barrier, got {type(barrier).__name__}",
        loc=loc,
        help="bar = T.alloc_barrier(128), then pass bar (or bars[i])",
    )


def _int_node(value, what: str, loc):
    expr = _trace.literal(value)
    if not _trace.is_int(expr.dtype):
        raise _trace.user_error(f"{what} must be an integer, got {expr.dtype}", loc=loc)
    return cast(expr, "int32").node()


def barrier_wait(mbarrier, parity):
    """Wait until the phase of ``mbarrier`` with this parity (0 or 1) has completed:
    ``T.barrier_wait(bar, ko % 2)``. A fresh barrier's phase 0 is in progress, so waiting
    for parity 1 passes at once (the idiom for "the slot is free" in the first round)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.barrier_wait", loc)
    buffer, index = _barrier_ref(mbarrier, "T.barrier_wait", loc)
    if isinstance(parity, _builtins.int) and parity not in (0, 1):
        raise _trace.user_error(
            f"T.barrier_wait: a phase parity is 0 or 1, got {parity}",
            loc=loc,
            help="wait for (k // stages) % 2, the parity of the k-th use of a stage's barrier",
        )
    builder.emit(
        {"op": "barrier_wait", "bar": buffer.id, "idx": index,
         "parity": _int_node(parity, "the parity of T.barrier_wait", loc)},
        loc,
    )


def mbarrier_wait_parity(mbarrier, parity):
    """TileLang's name of ``T.barrier_wait``: ``T.mbarrier_wait_parity(bars[k % 2], (k // 2) % 2)``."""
    return barrier_wait(mbarrier, parity)


def barrier_arrive(mbarrier):
    """Every thread running the statement arrives at ``mbarrier`` (the threads of its
    ``T.ws`` region, or all of the kernel's): ``T.barrier_arrive(bar)``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.barrier_arrive", loc)
    buffer, index = _barrier_ref(mbarrier, "T.barrier_arrive", loc)
    builder.emit({"op": "barrier_arrive", "bar": buffer.id, "idx": index}, loc)


def mbarrier_arrive(mbarrier, cta_id=None):
    """TileLang's name of ``T.barrier_arrive`` (``cta_id``, a peer block of a cluster, is not
    supported: tilers has no thread-block clusters yet)."""
    if cta_id is not None:
        raise _trace.user_error(
            "T.mbarrier_arrive(..., cta_id=...) arrives at a barrier of another block of a "
            "thread-block cluster; tilers does not launch clusters yet",
            help="arrive at this block's barrier: T.mbarrier_arrive(bar)",
        )
    return barrier_arrive(mbarrier)


def mbarrier_expect_tx(mbarrier, tx):
    """One thread of the statement's threads adds ``tx`` bytes of expected transactions to the
    barrier's current phase (``T.tma_copy`` does this itself)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.mbarrier_expect_tx", loc)
    buffer, index = _barrier_ref(mbarrier, "T.mbarrier_expect_tx", loc)
    builder.emit(
        {"op": "barrier_expect_tx", "bar": buffer.id, "idx": index,
         "bytes": _int_node(tx, "the byte count of T.mbarrier_expect_tx", loc)},
        loc,
    )


def tma_copy(src, dst, *, barrier=None, cluster_mask=None, leader_scope_threads=None,
             eviction_policy=None, annotations=None):
    """A bulk tensor copy (TMA) of a global tile into a shared one, completing on
    ``barrier``: ``T.tma_copy(A[by * bM, k * bK], A_s, barrier=bar)``. One thread issues it
    and adds its bytes to the barrier's phase; the threads then ``T.barrier_arrive(bar)``
    and the consumers ``T.barrier_wait(bar, parity)`` for the data (sm_90a)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.tma_copy", loc)
    if cluster_mask is not None:
        raise _trace.user_error(
            "T.tma_copy(..., cluster_mask=...) multicasts within a thread-block cluster; "
            "tilers does not launch clusters yet",
            loc=loc,
            help="drop cluster_mask: each block loads its own tile",
        )
    if barrier is None:
        raise _trace.user_error(
            "T.tma_copy needs the barrier its bytes complete on: T.tma_copy(src, dst, barrier=bar)",
            loc=loc,
            help="bar = T.alloc_barrier(128) before the loop; T.tma_store-style copies to "
            "global memory are written with T.copy",
        )
    buffer, index = _barrier_ref(barrier, "T.tma_copy", loc)
    src_region = _trace.region(src, dst, loc)
    dst_region = _trace.region(dst, src, loc)
    builder.emit(
        {"op": "tma_copy", "src": src_region, "dst": dst_region, "bar": buffer.id, "idx": index},
        loc,
    )


class ws:
    """A warp-role region: ``with T.ws(0):`` runs on warpgroup 0 (threads 0-127) only,
    ``with T.ws(1):`` on threads 128-255, ``with T.ws(0, 1):`` on both. Tile operations
    inside are spread over the region's threads; the kernel's own regions replace the
    warp roles tilers would choose (its pipelines then stay on the threads that run them)."""

    def __init__(self, *groups):
        self.loc = _trace.capture()
        if not groups or not all(isinstance(g, _builtins.int) and not isinstance(g, _builtins.bool) and g >= 0 for g in groups):
            raise _trace.user_error(
                f"T.ws takes warpgroup indices (0, 1, ...), got {groups!r}",
                loc=self.loc,
                help="with T.ws(0): ... runs on threads 0-127",
            )
        ordered = sorted(set(groups))
        if ordered != list(range(ordered[0], ordered[-1] + 1)):
            raise _trace.user_error(
                f"T.ws({', '.join(map(str, groups))}): a region's warpgroups must be consecutive",
                loc=self.loc,
                help="write one region per run of consecutive warpgroups",
            )
        self.first = 128 * ordered[0]
        self.count = 128 * len(ordered)

    def __enter__(self):
        builder = _trace.current_builder()
        _trace.require_kernel(builder, "T.ws", self.loc)
        threads = builder.open_threads
        kernel_threads = builder.kernel_threads
        if self.first + self.count > kernel_threads:
            raise _trace.user_error(
                f"T.ws runs on threads {self.first}-{self.first + self.count - 1}, but the kernel "
                f"has threads={kernel_threads}",
                loc=self.loc,
                help=f"launch threads={self.first + self.count} in T.Kernel, or use a lower warpgroup",
            )
        if threads:
            raise _trace.user_error(
                "T.ws regions cannot be nested", loc=self.loc,
                help="close the outer `with T.ws(...)` first",
            )
        builder.open_threads = True
        self.body = builder.open_block("T.ws", self.loc)
        return None

    def __exit__(self, exc_type, exc, tb):
        builder = _trace.current_builder()
        builder.open_threads = False
        if exc_type is not None:
            return False
        builder.close_block(self.body)
        tid = builder.thread_var()
        cond = tid < self.first + self.count
        if self.first:
            cond = (tid >= self.first) & cond
        builder.emit({"op": "if", "cond": cond.node(), "then": self.body}, self.loc)
        return False


WarpSpecialize = ws


def set_max_nreg(reg_count, is_inc):
    """``setmaxnreg``: the warpgroup running it raises (``is_inc=1``) or lowers (0) its
    register budget to ``reg_count`` (24-256, a multiple of 8): ``T.set_max_nreg(240, 1)``
    in a consumer region, ``T.set_max_nreg(40, 0)`` in a producer one (sm_90a)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.set_max_nreg", loc)
    if (not isinstance(reg_count, _builtins.int) or isinstance(reg_count, _builtins.bool)
            or not 24 <= reg_count <= 256 or reg_count % 8):
        raise _trace.user_error(
            f"T.set_max_nreg: the register count must be a multiple of 8 in 24..256, got {reg_count!r}",
            loc=loc,
        )
    builder.emit({"op": "set_max_nreg", "regs": reg_count, "inc": _builtins.bool(is_inc)}, loc)


def inc_max_nreg(reg_count):
    """``T.set_max_nreg(reg_count, 1)``: ``T.inc_max_nreg(240)``."""
    return set_max_nreg(reg_count, 1)


def dec_max_nreg(reg_count):
    """``T.set_max_nreg(reg_count, 0)``: ``T.dec_max_nreg(40)``."""
    return set_max_nreg(reg_count, 0)


def _reg_budget(key, value):
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "the register annotation", loc)
    builder.reg_budget[key] = value


def annotate_producer_reg_dealloc(reg_count=24):
    """The register budget of the producer warpgroup tilers adds to a warp-specialized
    pipeline: ``T.annotate_producer_reg_dealloc(24)`` (default 24)."""
    _reg_budget("producer", reg_count)


def annotate_consumer_reg_alloc(reg_count=240):
    """The register budget of the consumer warpgroups of a warp-specialized pipeline:
    ``T.annotate_consumer_reg_alloc(240)`` (default 240)."""
    _reg_budget("consumer", reg_count)


def no_set_max_nreg():
    """No ``setmaxnreg`` in this kernel's warp-specialized pipeline: ``T.no_set_max_nreg()``."""
    _reg_budget("none", True)


disable_warp_group_reg_alloc = no_set_max_nreg


# ----------------------------------------------------------------------------------------
# scalar variables, thread indices, macros (TileLang's API, part 2)


class Var(_trace.Load):
    """A scalar register variable: ``x = T.alloc_var(T.float32, init=0)``; then ``x = x + v``
    (or ``x += v``) stores into it inside the kernel, and ``x`` reads it. Reading it before
    any value was written is an error at that line."""

    __slots__ = ("written",)

    def __init__(self, buffer, loc):
        super().__init__(buffer, (0,), loc)
        self.written = False

    def node(self) -> dict:
        if not self.written:
            raise _trace.user_error(
                f"T.alloc_var '{self.buffer.name}' is read before any value is written to it",
                help=f"give it a first value: {self.buffer.name} = T.alloc_var(dtype, init=0), "
                f"or assign {self.buffer.name} = ... before reading it",
            )
        return super().node()

    def set(self, value):
        """Store ``value`` (cast to the variable's dtype)."""
        self.buffer[0] = value
        self.written = True

    def _update(self, op, other):
        self.set(getattr(_trace.Expr, op)(self, other))
        return self

    def __iadd__(self, other):
        return self._update("__add__", other)

    def __isub__(self, other):
        return self._update("__sub__", other)

    def __imul__(self, other):
        return self._update("__mul__", other)

    def __itruediv__(self, other):
        return self._update("__truediv__", other)

    def __ifloordiv__(self, other):
        return self._update("__floordiv__", other)

    def __imod__(self, other):
        return self._update("__mod__", other)

    def __iand__(self, other):
        return self._update("__and__", other)

    def __ior__(self, other):
        return self._update("__or__", other)

    def __ixor__(self, other):
        return self._update("__xor__", other)

    def __ilshift__(self, other):
        return self._update("__lshift__", other)

    def __irshift__(self, other):
        return self._update("__rshift__", other)

    def __repr__(self):
        return f"<T.alloc_var {self.buffer.name}: {self.dtype}>"


def alloc_var(dtype, init=None, scope="local.var"):
    """A scalar register variable: ``k = T.alloc_var(T.int32, init=0)``; assigning
    ``k = k + 1`` inside the kernel stores into it (the rewrite of the kernel body)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.alloc_var", loc)
    name = _trace.assigned_name(loc) or f"var{len(builder.buffers)}"
    buffer = builder.new_buffer(name, "local", _trace.normalize_dtype(dtype), (1,), loc)
    var = Var(buffer, loc)
    if init is not None:
        var.set(init)
    return var


def get_thread_binding(dim=0):
    """The thread index: ``tx = T.get_thread_binding()`` (``threadIdx.x``), for conditions
    that select warp-role regions (``if tx < 128:`` is ``with T.ws(0):``) and code of each
    thread's own. With ``threads=(x, y, z)`` in T.Kernel, ``T.get_thread_binding(1)`` is
    ``threadIdx.y`` (and 2 ``threadIdx.z``)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.get_thread_binding", loc)
    return _thread_coordinate(builder, dim, "T.get_thread_binding", loc)


def _thread_coordinate(builder, dim, what, loc):
    dims = builder.thread_dims
    if not isinstance(dim, _builtins.int) or isinstance(dim, _builtins.bool) or not 0 <= dim < _builtins.len(dims):
        raise _trace.user_error(
            f"{what}({dim!r}): the block has {_builtins.len(dims)} thread dimension"
            f"{'s' if _builtins.len(dims) > 1 else ''} (threads={dims[0] if _builtins.len(dims) == 1 else dims})",
            loc=loc,
            help="use dimension 0, or give T.Kernel threads=(x, y[, z])",
        )
    tid = builder.thread_var()
    if _builtins.len(dims) == 1:
        return tid
    below = 1
    for d in dims[:dim]:
        below *= d
    coordinate = tid // below if below > 1 else tid
    return coordinate % dims[dim] if dim < _builtins.len(dims) - 1 else coordinate


def get_thread_extent(dim=0):
    """The block's threads along ``dim`` (a Python int): ``threads`` of T.Kernel, or its
    ``dim``-th entry for ``threads=(x, y, z)``: ``ny = T.get_thread_extent(1)``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.get_thread_extent", loc)
    dims = builder.thread_dims
    if not isinstance(dim, _builtins.int) or not 0 <= dim < 3:
        raise _trace.user_error(f"T.get_thread_extent({dim!r}): dimension 0, 1 or 2", loc=loc)
    return dims[dim] if dim < _builtins.len(dims) else 1


def get_block_binding(dim=0):
    """The block index along ``dim`` (``blockIdx.x`` for 0), what ``T.Kernel`` yields:
    ``by = T.get_block_binding(1)``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.get_block_binding", loc)
    indices = builder.block_vars
    if not isinstance(dim, _builtins.int) or not 0 <= dim < _builtins.len(indices):
        raise _trace.user_error(
            f"T.get_block_binding({dim!r}): the grid has {_builtins.len(indices)} dimension(s)", loc=loc
        )
    return indices[dim]


def get_lane_idx(warp_size=32):
    """The thread's lane in its warp: ``lane = T.get_lane_idx()`` is
    ``T.get_thread_binding() % 32``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.get_lane_idx", loc)
    return builder.thread_var() % (32 if warp_size is None else warp_size)


def get_warp_idx(warp_size=32):
    """The thread's warp in the block: ``w = T.get_warp_idx()`` is
    ``T.get_thread_binding() // 32``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.get_warp_idx", loc)
    return builder.thread_var() // (32 if warp_size is None else warp_size)


def get_warp_idx_sync(warp_size=32):
    """``w = T.get_warp_idx_sync()``: ``T.get_warp_idx()`` (every thread of a warp computes
    the same value)."""
    return get_warp_idx(warp_size)


def get_warp_group_idx(warp_size=32, warps_per_group=4):
    """The thread's warpgroup (128 threads by default): ``g = T.get_warp_group_idx()`` is
    ``tx // 128``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.get_warp_group_idx", loc)
    return builder.thread_var() // ((32 if warp_size is None else warp_size) * warps_per_group)


def thread_binding(start, stop=None, thread="threadIdx.x", annotations=None):
    """TileLang's ``tx = T.thread_binding(0, threads, thread="threadIdx.x")``: the thread
    index, as ``T.get_thread_binding()`` (``start`` 0 and ``stop`` the block's threads along
    that dimension; "threadIdx.y" / "threadIdx.z" with ``threads=(x, y, z)``)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.thread_binding", loc)
    lo, hi = (0, start) if stop is None else (start, stop)
    axes = {"threadIdx.x": 0, "threadIdx.y": 1, "threadIdx.z": 2}
    if thread not in axes:
        raise _trace.user_error(
            f"T.thread_binding(thread={thread!r}): expected \"threadIdx.x\", \"threadIdx.y\" or \"threadIdx.z\"",
            loc=loc,
            help="block indices come from T.Kernel",
        )
    dim = axes[thread]
    dims = builder.thread_dims
    if dim >= _builtins.len(dims):
        raise _trace.user_error(
            f"T.thread_binding(thread={thread!r}): the block is threads={dims[0] if _builtins.len(dims) == 1 else dims}",
            loc=loc,
            help=f"give T.Kernel threads=({', '.join(['x', 'y', 'z'][:dim + 1])})",
        )
    extent = dims[dim]
    if lo != 0 or (isinstance(hi, _builtins.int) and hi != extent):
        raise _trace.user_error(
            f"T.thread_binding({lo}, {hi}, thread={thread!r}) must span the block's threads along "
            f"that dimension (0 to {extent})",
            loc=loc,
            help=f"use T.thread_binding(0, {extent}, thread=\"{thread}\")",
        )
    return _thread_coordinate(builder, dim, "T.thread_binding", loc)


def macro(func):
    """A helper traced inline at each call: ``@T.macro def step(...): ...`` — its statements
    land where it is called, its errors point at its own lines (and the call)."""
    import functools

    from . import _rewrite

    code = _rewrite.prim_func_code(func, inside_kernel=True)
    if code is not None:
        import types

        cells = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
        closure = tuple(
            types.CellType(_rewrite.Flow) if n == _rewrite.HELPER else cells[n] for n in code.co_freevars
        )
        body = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__, closure or None)
        body.__kwdefaults__ = func.__kwdefaults__
    else:
        body = func

    @functools.wraps(func)
    def call(*args, **kwargs):
        return body(*args, **kwargs)

    return call


def Cast(dtype, value):
    """TileLang's spelling of ``T.cast(value, dtype)``: ``T.Cast(T.float16, x)``."""
    return cast(value, dtype)


def Serial(start, stop=None):
    """TileLang's spelling of ``T.serial``: ``for k in T.Serial(n):``."""
    return serial(start, stop)


def clamp(x, lo, hi):
    """``min(max(x, lo), hi)``: ``T.clamp(v, 0, 255)``."""
    return min(max(x, lo), hi)


def floordiv(a, b):
    """Integer division rounding down (Python's ``//``): ``T.floordiv(i, 4)``."""
    return a // b


def floormod(a, b):
    """The remainder of ``T.floordiv`` (Python's ``%``): ``T.floormod(i, 4)``."""
    return a % b


def sync_threads(barrier_id=None, arrive_count=None):
    """A barrier the kernel places itself: ``T.sync_threads()`` (every thread of the block,
    ``__syncthreads``) or ``T.sync_threads(3, 128)`` (named barrier 3 over 128 threads). tilers
    places the barriers tile operations need on its own; this one orders what it does not
    see (e.g. between warp-role regions)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.sync_threads", loc)
    if barrier_id is None:
        builder.emit({"op": "sync"}, loc)
        return
    count = arrive_count if arrive_count is not None else builder.kernel_threads
    if (not isinstance(barrier_id, _builtins.int) or not 0 <= barrier_id < 16
            or not isinstance(count, _builtins.int) or count <= 0 or count % 32):
        raise _trace.user_error(
            f"T.sync_threads({barrier_id!r}, {arrive_count!r}): a named barrier is an id from 0 to 15 "
            "over a positive multiple of 32 threads",
            loc=loc,
        )
    builder.emit({"op": "sync", "id": barrier_id, "threads": count}, loc)


def loop_break():
    """Leave the innermost ``T.serial`` loop: ``T.loop_break()``, which a Python ``break``
    under a traced condition in the kernel body is (``if l_new_topk <= 0: break``). The
    threads that run it leave the loop; the others go on (per-thread code), as in CUDA."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.loop_break", loc)
    for block in reversed(builder.blocks):
        if block.what in ("T.If", "T.Else", "T.ws"):
            continue
        if block.what in ("T.serial", "T.Serial"):
            builder.emit({"op": "break"}, loc)
            return
        where = "outside any loop" if block.what == "T.Kernel" else f"inside a {block.what} block"
        raise _trace.user_error(
            f"`break` leaves a T.serial loop; this one is {where}",
            loc=loc,
            help="loop with T.serial(...) to leave it early"
            if block.what != "T.Parallel" else "a T.Parallel loop's iterations cannot end it: guard them with a condition",
        )


class AccessPtr:
    """``T.access_ptr(A[i, j], "r", n)``: the address of an element of a buffer with the
    access it is taken for and how many elements from it are meant: what
    ``T.ptx_cp_async`` copies to and from. Not a value: it is handed to those calls."""

    __slots__ = ("buffer", "indices", "mode", "extent", "loc")

    def __init__(self, buffer, indices, mode, extent, loc):
        self.buffer = buffer
        self.indices = indices
        self.mode = mode
        self.extent = extent
        self.loc = loc

    def __repr__(self):
        return f"<T.access_ptr {self.buffer.name}[...] {self.mode!r} x{self.extent}>"

    def __bool__(self):
        raise _trace.user_error("a T.access_ptr address is not a value", loc=_trace.capture())


def access_ptr(base, access_type="r", *extents, offset=0, extent=None, ignore_last_ndim=0):
    """The address of ``base`` for ``T.ptx_cp_async``: ``T.access_ptr(S[i, j], "w", 8)``
    (an element; ``access_type`` "r", "w" or "rw", or the mask 1, 2, 3; ``extents`` or
    ``extent=`` the elements meant from it, default 1), ``T.access_ptr(S, "r")`` (a
    buffer's first element) or a region (its first element). ``offset=`` moves along the
    last dimension."""
    loc = _trace.capture()
    _trace.require_kernel(_trace.current_builder(), "T.access_ptr", loc)
    masks = {1: "r", 2: "w", 3: "rw", "r": "r", "w": "w", "rw": "rw"}
    if isinstance(access_type, _builtins.bool) or access_type not in masks:
        raise _trace.user_error(
            f"T.access_ptr: parameter 'access_type': expected 'r', 'w', 'rw' (or 1, 2, 3), got {access_type!r}",
            loc=loc,
        )
    if ignore_last_ndim:
        raise _trace.user_error("T.access_ptr(..., ignore_last_ndim=...) is not supported by tilers", loc=loc)
    if isinstance(base, _trace.Buffer) and not base.is_barrier:
        buffer, indices = base, tuple(0 for _ in base.shape)
    elif isinstance(base, _trace.Load) and not base.buffer.is_barrier:
        buffer = base.buffer
        indices = tuple(i.start if isinstance(i, slice) else i for i in base.indices)
        indices = tuple(0 if i is None else i for i in indices)
    else:
        raise _trace.user_error(
            f"T.access_ptr takes a buffer element (A[i, j]), a region or a buffer, got {type(base).__name__}",
            loc=loc,
        )
    if len(indices) != len(buffer.shape):
        _trace.element_indices(buffer, indices, loc)  # raises: one index per dimension
    if len(extents) == 1 and isinstance(extents[0], (list, tuple)):
        extents = tuple(extents[0])
    if extent is None:
        extent = 1
        for e in extents:
            extent = extent * e
    if not isinstance(extent, _builtins.int) or isinstance(extent, _builtins.bool) or extent < 1:
        raise _trace.user_error(
            f"T.access_ptr: the extent must be a positive Python int, got {extent!r}", loc=loc
        )
    if not (isinstance(offset, _builtins.int) and offset == 0):
        indices = indices[:-1] + (indices[-1] + offset,)
    return AccessPtr(buffer, indices, masks[access_type], extent, loc)


def address_of(elem):
    """TileLang's ``T.address_of(A[i, j])``: ``T.access_ptr(A[i, j], "rw")``."""
    return access_ptr(elem, "rw")


def ptx_cp_async(dst_access_ptr, src_access_ptr, num_elems, predicate=None):
    """One thread's asynchronous copy (``cp.async``) of ``num_elems`` elements (4, 8 or 16
    bytes) from a global tensor into shared memory, each thread that runs it its own:
    ``T.ptx_cp_async(T.access_ptr(S[r, c], "w", 8), T.access_ptr(G[i, c], "r", 8), 8)``.
    With ``predicate=`` false the destination gets zeros. The bytes land at the
    ``T.ptx_wait_group`` that completes the group ``T.ptx_commit_group`` closed, or at the
    thread's ``T.cp_async_barrier_noinc(bar)`` arrival; the destination and source
    addresses must be aligned to the copy's size."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.ptx_cp_async", loc)
    for what, p, scope, need in (("dst_access_ptr", dst_access_ptr, "shared", "w"),
                                 ("src_access_ptr", src_access_ptr, "global", "r")):
        if not isinstance(p, AccessPtr):
            raise _trace.user_error(
                f"T.ptx_cp_async: parameter '{what}': expected a T.access_ptr(...) address, got {type(p).__name__}",
                loc=loc,
                help="e.g. T.ptx_cp_async(T.access_ptr(S[i, j], 'w', 8), T.access_ptr(A[r, j], 'r', 8), 8)",
            )
        if p.buffer.scope != scope:
            raise _trace.user_error(
                f"T.ptx_cp_async: parameter '{what}': expected an address in {scope} memory, "
                f"got one of '{p.buffer.name}' ({p.buffer.scope})",
                loc=loc,
                help="cp.async copies from a global tensor into a T.alloc_shared buffer",
            )
        if need not in p.mode:
            raise _trace.user_error(
                f"T.ptx_cp_async: parameter '{what}': the address of '{p.buffer.name}' was taken for "
                f"access {p.mode!r}; the copy {'writes' if need == 'w' else 'reads'} it",
                loc=loc,
            )
    dst, src = dst_access_ptr, src_access_ptr
    if dst.buffer.dtype != src.buffer.dtype:
        raise _trace.user_error(
            f"T.ptx_cp_async copies between buffers of one dtype; '{dst.buffer.name}' is "
            f"{dst.buffer.dtype}, '{src.buffer.name}' {src.buffer.dtype}",
            loc=loc,
        )
    if not isinstance(num_elems, _builtins.int) or isinstance(num_elems, _builtins.bool):
        raise _trace.user_error(
            f"T.ptx_cp_async: parameter 'num_elems': expected a Python int, got {num_elems!r}", loc=loc
        )
    size = _trace.dtype_bytes(dst.buffer.dtype)
    nbytes = num_elems * size
    if nbytes not in (4, 8, 16):
        raise _trace.user_error(
            f"T.ptx_cp_async: parameter 'num_elems': {num_elems} elements of {dst.buffer.dtype} are "
            f"{nbytes} bytes; a cp.async copies 4, 8 or 16",
            loc=loc,
        )
    for what, p in (("dst_access_ptr", dst), ("src_access_ptr", src)):
        if p.extent != 1 and p.extent < num_elems:
            raise _trace.user_error(
                f"T.ptx_cp_async: parameter '{what}': the address covers {p.extent} elements, the copy {num_elems}",
                loc=loc,
            )
    if predicate is None:
        src_bytes = _trace.const(nbytes, "int32").node()
    else:
        cond = _trace.literal(predicate)
        src_bytes = if_then_else(cond, _trace.const(nbytes, "int32"), _trace.const(0, "int32")).node()
    builder.emit(
        {"op": "cp_async",
         "dst": dst.buffer.id, "dst_idx": _trace.element_indices(dst.buffer, dst.indices, loc),
         "src": src.buffer.id, "src_idx": _trace.element_indices(src.buffer, src.indices, loc),
         "bytes": nbytes, "src_bytes": src_bytes},
        loc,
    )


def ptx_commit_group():
    """``cp.async.commit_group``: close the group of this thread's ``T.ptx_cp_async`` copies
    (and of copies a ``T.Parallel`` loop issued asynchronously) issued since the last one."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.ptx_commit_group", loc)
    builder.emit({"op": "async_commit"}, loc)


def ptx_wait_group(num):
    """``cp.async.wait_group num``: wait until at most ``num`` (a Python int, 0 to 7) of
    this thread's committed groups are still in flight: ``T.ptx_wait_group(0)``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.ptx_wait_group", loc)
    if not isinstance(num, _builtins.int) or isinstance(num, _builtins.bool) or not 0 <= num <= 7:
        raise _trace.user_error(
            f"T.ptx_wait_group: parameter 'num': expected a Python int from 0 to 7, got {num!r}", loc=loc
        )
    builder.emit({"op": "async_wait", "pending": num}, loc)


def cp_async_barrier_noinc(barrier):
    """``cp.async.mbarrier.arrive.noinc``: every thread running it arrives at ``barrier``
    once all the ``T.ptx_cp_async`` copies it issued before have landed (the arrival is
    one of the barrier's counted ones): ``T.cp_async_barrier_noinc(bars[stage])``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.cp_async_barrier_noinc", loc)
    buffer, index = _barrier_ref(barrier, "T.cp_async_barrier_noinc", loc)
    builder.emit({"op": "cp_async_arrive", "bar": buffer.id, "idx": index}, loc)


def fence_proxy_async():
    """``fence.proxy.async.shared::cta``: this thread's ordinary shared-memory writes become
    visible to the asynchronous proxy (TMA stores, wgmma operands) that a barrier after it
    hands them to. tilers places the fences its own barriers need; this one is for barriers
    the kernel places itself (``T.barrier_arrive`` between warp roles)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.fence_proxy_async", loc)
    builder.emit({"op": "fence_proxy_async"}, loc)


def cluster_sync():
    """``T.cluster_sync()`` (TileLang's): every thread of every block of the thread-block
    cluster waits here for all of them (``barrier.cluster.arrive.release`` + ``wait.acquire``);
    what each wrote before it — into its own shared memory, or a peer's by
    ``T.copy_cluster`` — is visible to all after it. It stands in the kernel's body (every
    thread reaches it, not inside a loop or a branch). In a ``T.Kernel`` (no cluster) it is a
    barrier of the block."""
    loc = _trace.capture()
    builder = _cluster_barrier_at_top("T.cluster_sync", loc)
    if builder.cluster_arrived is not None:
        raise _trace.user_error(
            f"T.cluster_sync after a T.cluster_arrive (line {builder.cluster_arrived.line}) "
            "not yet waited for: a block arrives once per phase of the cluster barrier",
            loc=loc,
            help="call T.cluster_wait() before it",
        )
    builder.emit({"op": "cluster_sync"}, loc)


def _cluster_barrier_at_top(what: str, loc):
    """The builder, where a cluster barrier may stand: in a kernel's body, outside loops and
    branches (every thread of the cluster reaches it)."""
    builder = _trace.current_builder()
    _trace.require_kernel(builder, what, loc)
    inner = builder.blocks[-1].what
    if inner != "T.Kernel":
        raise _trace.user_error(
            f"{what} inside a {inner} block: every thread of the cluster must reach it",
            loc=loc,
            help="call it in the kernel's body, outside loops and branches",
        )
    return builder


def cluster_arrive():
    """``T.cluster_arrive()`` (TileLang's): the first half of ``T.cluster_sync``: the block's
    threads arrive at the cluster barrier (``barrier.cluster.arrive.release``: what each
    wrote before is visible to the blocks after their ``T.cluster_wait``) and go on without
    waiting. Work that touches no tile a peer reaches may stand between it and
    ``T.cluster_wait()``, which must follow before the next ``T.cluster_arrive``,
    ``T.cluster_sync`` or the kernel's end. In the kernel's body only, as ``T.cluster_sync``."""
    _cluster_arrive("T.cluster_arrive", _trace.capture())


def cluster_arrive_relaxed():
    """``T.cluster_arrive_relaxed()`` (TileLang's): ``T.cluster_arrive`` without ordering
    memory (``.relaxed``) in TileLang; tilers arrives with release order here (as
    ``T.cluster_arrive``): the same synchronization, never weaker."""
    _cluster_arrive("T.cluster_arrive_relaxed", _trace.capture())


def _cluster_arrive(what: str, loc):
    builder = _cluster_barrier_at_top(what, loc)
    if builder.cluster_arrived is not None:
        raise _trace.user_error(
            f"{what} after a T.cluster_arrive (line {builder.cluster_arrived.line}) with no "
            "T.cluster_wait between: a block arrives once per phase of the cluster barrier",
            loc=loc,
            help="call T.cluster_wait() between them",
        )
    builder.cluster_arrived = loc
    builder.emit({"op": "cluster_arrive"}, loc)


def cluster_wait():
    """``T.cluster_wait()`` (TileLang's): the second half of ``T.cluster_sync``: waits until
    every block of the cluster has arrived (``barrier.cluster.wait.acquire``); what they
    wrote before arriving is visible after it. It follows a ``T.cluster_arrive`` of the same
    block. In the kernel's body only."""
    loc = _trace.capture()
    builder = _cluster_barrier_at_top("T.cluster_wait", loc)
    if builder.cluster_arrived is None:
        raise _trace.user_error(
            "T.cluster_wait with no T.cluster_arrive before it: the block would wait for a "
            "phase it has not arrived at",
            loc=loc,
            help="call T.cluster_arrive() first (or T.cluster_sync() for both)",
        )
    builder.cluster_arrived = None
    builder.emit({"op": "cluster_wait"}, loc)


def block_rank_in_cluster():
    """``T.block_rank_in_cluster()`` (TileLang's): the block's rank in its thread-block cluster
    (``%cluster_ctarank``: ``bx % x + (by % y) * x`` for ``T.ClusterKernel(cluster_dims=(x,
    y))``); 0 in a ``T.Kernel``."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.block_rank_in_cluster", loc)
    x, y = builder.kernel_cluster or (1, 1)
    rank = cast(_trace.literal(0), "int32")
    if x > 1:
        rank = rank + builder.block_vars[0] % x
    if y > 1:
        rank = rank + builder.block_vars[1] % y * x
    return rank


def copy_cluster(src, dst, *, dst_block=None, cluster_mask=None, remote_barrier=None, eviction_policy=None,
                 coalesced_width=None, annotations=None, loop_layout=None):
    """``T.copy_cluster(src, dst, dst_block=r)`` (TileLang's SM-to-SM copy): ``src`` (a tile or
    region of this block) into the shared tile ``dst`` of block ``r`` of the thread-block
    cluster (distributed shared memory, sm_90+; a ``T.ClusterKernel`` of clusters along bx).
    The stores are the block's threads' own (``st.shared::cluster``); ``T.cluster_sync()``
    after the copy makes them visible to block ``r``. tilers syncs the cluster before the
    kernel's first statement and after its last, so no block is reached before it starts or
    after it exits. ``remote_barrier=`` (an mbarrier the copy completes on) and
    ``cluster_mask=`` (TMA multicast, which tilers makes itself for a TMA pipeline) are not
    supported; TileLang's hints ``eviction_policy``, ``coalesced_width``, ``annotations``,
    ``loop_layout`` are accepted and not used."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.copy_cluster", loc)
    if cluster_mask is not None:
        raise _trace.user_error(
            "T.copy_cluster(..., cluster_mask=...): a TMA multicast; tilers multicasts the producer copies "
            "of a TMA pipeline itself in a T.ClusterKernel",
            loc=loc,
            help="write the copy as T.copy(src, dst) in the pipelined loop of a T.ClusterKernel",
        )
    if remote_barrier is not None:
        raise _trace.user_error(
            "T.copy_cluster(..., remote_barrier=...) is not supported: the copy's stores are the threads' own",
            loc=loc,
            help="drop remote_barrier and call T.cluster_sync() after the copy; block dst_block reads "
            "dst after its own T.cluster_sync()",
        )
    if dst_block is None:
        raise _trace.user_error(
            "T.copy_cluster: parameter 'dst_block': expected the rank of the block whose tile is written, got None",
            loc=loc,
            help="e.g. T.copy_cluster(partial, gathered[rank, :], dst_block=0)",
        )
    x, y = builder.kernel_cluster or (1, 1)
    blocks = x * y
    if blocks == 1:
        raise _trace.user_error(
            "T.copy_cluster writes another block's shared memory, and this kernel has no thread-block cluster",
            loc=loc,
            help="launch the kernel in clusters: T.ClusterKernel(..., cluster_dims=n)",
        )
    if isinstance(dst_block, _builtins.bool) or not isinstance(dst_block, (_builtins.int, _trace.Expr)):
        raise _trace.user_error(
            f"T.copy_cluster: parameter 'dst_block': expected an int rank, got {type(dst_block).__name__}",
            loc=loc,
        )
    if isinstance(dst_block, _builtins.int) and not 0 <= dst_block < blocks:
        raise _trace.user_error(
            f"T.copy_cluster: parameter 'dst_block': expected a rank from 0 to {blocks - 1} "
            f"(a cluster of {blocks} blocks), got {dst_block}",
            loc=loc,
        )
    if isinstance(dst_block, _trace.Expr) and not _trace.is_int(dst_block.dtype):
        raise _trace.user_error(
            f"T.copy_cluster: parameter 'dst_block': expected an int rank, got {dst_block.dtype}",
            loc=loc,
        )
    dbuf, _ = _user_layout._operand(dst, loc)
    if dbuf.scope != "shared" or dbuf.view_root is not None or dbuf.alias_of is not None \
            or dbuf.user_layout is not None:
        raise _trace.user_error(
            f"T.copy_cluster: parameter 'dst': expected a T.alloc_shared tile (or a region of one), "
            f"got '{dbuf.name}' ({dbuf.scope}{', a view' if dbuf.view_root is not None or dbuf.alias_of is not None else ''})",
            loc=loc,
            help="copy into a shared tile of its own",
        )
    view = builder.cluster_views.get(dbuf._id)
    if view is None:
        view = builder.new_buffer(f"{dbuf.name}_cluster", "cluster", dbuf.dtype, (blocks,) + tuple(dbuf.shape), loc)
        view.alias_of = dbuf
        builder.cluster_views[dbuf._id] = view
    _user_layout.expand("T.copy_cluster", src, dst, loc, remote=(view, dst_block))


def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square,
               clear_accum=False):
    """TileLang's asynchronous ``wgmma`` gemm: ``T.wgmma_gemm(A_s, B_s, acc)`` is ``T.gemm``
    (wgmma on sm_90a, its completion waited for before the next use of ``acc``; the wait of
    ``T.wait_wgmma`` is already done)."""
    return gemm(A, B, C, transpose_A=transpose_A, transpose_B=transpose_B, policy=policy,
                clear_accum=clear_accum)


def wait_wgmma(pending=0):
    """TileLang's wait for ``T.wgmma_gemm`` groups: ``T.wait_wgmma(0)``. tilers' gemms
    complete before their accumulator is used, so there is nothing left to wait for."""
    if not isinstance(pending, _builtins.int) or pending < 0:
        raise _trace.user_error(f"T.wait_wgmma takes a non-negative count, got {pending!r}")


# ----------------------------------------------------------------------------------------
# the escape hatch to CUDA: T.import_source, T.call_extern, T.inline_ptx


def import_source(source=None):
    """CUDA C++ for this kernel's ``T.call_extern`` calls: ``T.import_source(code)`` inside the
    ``T.Kernel`` block puts ``code`` (device functions you write) before the kernel in the
    generated source, once however often it is imported. Its prototypes are what
    ``T.call_extern`` checks its operands against."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.import_source", loc)
    if source is None:
        return
    if not isinstance(source, str):
        raise _trace.user_error(
            f"T.import_source: parameter 'source': expected a str of CUDA source, got {type(source).__name__}",
            loc=loc,
        )
    sources = builder.extern_sources
    if source not in sources:
        sources.append(source)


_NO_RESULT = ("handle", "void", None)


def call_extern(*args, **kwargs):
    """Call a device function tilers does not know — one of ``T.import_source``'s, or a CUDA
    builtin — on every thread that runs the statement, as CUDA would:
    ``T.call_extern("handle", "decode", T.access_ptr(q, "r", 4), T.access_ptr(d, "w", 8))``
    or ``y = T.call_extern("float32", "my_fn", x)`` (a value of ``dtype``; "handle" or
    "void": none). Operands are values, ``T.access_ptr`` addresses (of local, shared or global
    buffers) and strings; they are checked against the imported prototype. The interpreter
    cannot run the call."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.call_extern", loc)
    # T.call_extern(dtype, name, *args), or TileLang's T.call_extern(name, *args, dtype=...)
    if "dtype" in kwargs:
        dtype = kwargs.pop("dtype")
    elif args:
        dtype, args = args[0], args[1:]
    else:
        raise _trace.user_error("T.call_extern(dtype, func_name, *args): the dtype is missing", loc=loc)
    func_name, args = (args[0], args[1:]) if args else (None, ())
    if kwargs:
        raise _trace.user_error(f"T.call_extern: unexpected keyword argument {next(iter(kwargs))!r}", loc=loc)
    if not isinstance(func_name, str) or not func_name.replace("_", "a").replace("::", "a").isalnum() \
            or func_name[0].isdigit():
        raise _trace.user_error(
            f"T.call_extern: parameter 'func_name': expected the name of a C function, got {func_name!r}",
            loc=loc,
            help='e.g. T.call_extern("float32", "my_function", x)',
        )
    result_dtype = None if dtype in _NO_RESULT else _trace.normalize_dtype(dtype)
    if any(b.what == "T.Parallel" for b in builder.blocks):
        raise _trace.user_error(
            f"T.call_extern('{func_name}') inside T.Parallel: the compiler decides which thread runs "
            "each iteration, so an extern call has no thread of its own there",
            loc=loc,
            help="call it in code that runs on each thread (T.get_thread_binding(), T.serial loops "
            "over T.alloc_local buffers), or write the element-wise part as tilers expressions",
        )
    return _extern_call(builder, func_name, args, result_dtype, loc)


def _extern_call(builder, func_name, args, result_dtype, loc, what="T.call_extern"):
    from . import _extern

    protos = _extern.prototypes(builder.extern_sources).get(func_name, [])
    proto = _pick_prototype(protos, len(args))
    if protos and proto is None:
        counts = sorted({len(p.params) for p in protos})
        raise _trace.user_error(
            f"{what}('{func_name}'): {len(args)} operands, but the imported '{func_name}' takes "
            f"{' or '.join(map(str, counts))}",
            loc=loc,
        )
    if proto is not None:
        returns_void = not proto.returns.pointer and proto.returns.text.split()[-1:] == ["void"]
        if result_dtype is not None and returns_void:
            raise _trace.user_error(
                f"{what}('{func_name}'): a {result_dtype} result was asked for, but the imported "
                f"'{func_name}' returns void",
                loc=loc,
                help=f'call it with dtype "handle": T.call_extern("handle", "{func_name}", ...)',
            )
    out = []
    for k, a in enumerate(args):
        param = proto.params[k] if proto is not None and k < len(proto.params) else None
        out.append(_extern_arg(func_name, k, a, param, loc, what))
    stmt = {"op": "call_extern", "name": func_name, "args": out}
    if result_dtype is None:
        builder.emit(stmt, loc)
        return None
    temp = builder.new_buffer(f"{func_name.strip('_')}_result", "local", result_dtype, (1,), loc)
    stmt["result"] = {"buf": temp.id, "idx": [_trace.const(0, "int32").node()]}
    builder.emit(stmt, loc)
    return temp[0]


def _pick_prototype(protos, n):
    for p in protos:
        if p.required <= n <= len(p.params) or (p.variadic and n >= p.required):
            return p
    return None


def _extern_arg(func_name, k, a, param, loc, what):
    where = f"{what}('{func_name}'): operand {k}"
    if isinstance(a, AccessPtr):
        b = a.buffer
        if b.scope == "fragment":
            raise _trace.user_error(
                f"{where}: '{b.name}' is a fragment, whose elements live on different threads; "
                "an extern function needs memory it can address",
                loc=loc,
                help="copy the values into a T.alloc_local buffer and pass its address",
            )
        if param is not None and not param.pointer:
            raise _trace.user_error(
                f"{where}: an address of '{b.name}', but '{func_name}' takes a value ({param.text}) here",
                loc=loc,
                help=f"pass a value such as {b.name}[...]",
            )
        # a char pointer reaches any bytes; other element types must be the buffer's
        if param is not None and param.dtype not in (None, "int8", "uint8") and param.dtype != b.dtype:
            raise _trace.user_error(
                f"{where}: '{b.name}' holds {b.dtype}, but '{func_name}' takes {param.text} here",
                loc=loc,
            )
        if param is not None and param.const and "w" in a.mode:
            raise _trace.user_error(
                f"{where}: the address of '{b.name}' was taken for writing ({a.mode!r}), but "
                f"'{func_name}' takes {param.text}, which it only reads",
                loc=loc,
            )
        node = {"kind": "ptr", "buf": b.id, "idx": _trace.element_indices(b, a.indices, loc),
                "elements": a.extent, "mode": a.mode}
        if param is not None and param.dtype is not None:
            node["ctype"] = param.text
        b.used = True
        return node
    if isinstance(a, str):
        if param is not None and not param.pointer:
            raise _trace.user_error(f"{where}: a string, but '{func_name}' takes {param.text} here", loc=loc)
        return {"kind": "str", "value": a}
    if isinstance(a, (_trace.Buffer,)):
        raise _trace.user_error(
            f"{where}: the buffer '{a.name}' itself; pass T.access_ptr({a.name}, 'r') for its address "
            f"or {a.name}[i] for a value",
            loc=loc,
        )
    like = param.dtype if param is not None and param.dtype is not None and not param.pointer else None
    if not isinstance(a, (_trace.Expr, _builtins.int, _builtins.float)):
        raise _trace.user_error(f"{where}: expected a value, a T.access_ptr address or a str, got {a!r}", loc=loc)
    value = _trace.literal(a, like)
    if param is not None and param.pointer:
        raise _trace.user_error(
            f"{where}: a {value.dtype} value, but '{func_name}' takes an address ({param.text}) here",
            loc=loc,
            help="pass T.access_ptr(buffer[i], 'r') for an address",
        )
    if param is not None and param.dtype is not None and _trace.is_float(param.dtype) != _trace.is_float(value.dtype):
        raise _trace.user_error(
            f"{where}: a {value.dtype} value, but '{func_name}' takes {param.text} here",
            loc=loc,
            help=f"convert it first: T.Cast(\"{param.dtype}\", x)",
        )
    return {"kind": "value", "value": value.node()}


def inline_ptx(template, outputs=(), inputs=(), memory=False):
    """Inline PTX: ``T.inline_ptx("add.u32 %0, %1, %2;", outputs=[c[0]], inputs=[a, b])``. Each
    operand ``%k`` is an output (an element of a T.alloc_local buffer or a T.alloc_var,
    written) then an input (a value), in order; their dtypes choose the PTX registers
    (int16/uint16 ``h``, 32-bit ints ``r``, 64-bit ``l``, float32 ``f``, float64 ``d``).
    ``memory=True`` tells the compiler the code touches memory. Runs on every thread that
    reaches it; the interpreter cannot run it."""
    from . import _extern

    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.inline_ptx", loc)
    if not isinstance(template, str):
        raise _trace.user_error(f"T.inline_ptx: parameter 'template': expected a str of PTX, got {template!r}", loc=loc)
    if any(b.what == "T.Parallel" for b in builder.blocks):
        raise _trace.user_error("T.inline_ptx inside T.Parallel: call it in code that runs on each thread", loc=loc)
    outputs, inputs = list(outputs), list(inputs)
    named = _extern.asm_operands(template)
    if named != len(outputs) + len(inputs):
        raise _trace.user_error(
            f"T.inline_ptx: the PTX names {named} operands (%0..%{named - 1}), but "
            f"{len(outputs)} outputs and {len(inputs)} inputs were given" if named else
            f"T.inline_ptx: the PTX names no operand (%0 ...), but {len(outputs)} outputs and "
            f"{len(inputs)} inputs were given",
            loc=loc,
        )
    out_dtypes, in_dtypes, args = [], [], []
    for k, o in enumerate(outputs):
        if isinstance(o, _trace.Buffer) and o.scope == "local" and _builtins.len(o.shape) == 1 and o.shape[0] == 1:
            o = o[0]
        if not (isinstance(o, _trace.Load) and o.buffer.scope == "local"):
            raise _trace.user_error(
                f"T.inline_ptx: output {k} must be an element of a T.alloc_local buffer or a T.alloc_var, "
                f"got {o!r}",
                loc=loc,
            )
        dt = o.buffer.dtype
        if dt not in _extern.ASM_CONSTRAINTS:
            raise _trace.user_error(
                f"T.inline_ptx: output {k} is {dt}; PTX operands are 16-, 32- or 64-bit integers, "
                "float32 or float64",
                loc=loc,
                help="hold 16-bit floats' bits in a uint16 buffer (T.reinterpret)",
            )
        out_dtypes.append(dt)
        args.append(AccessPtr(o.buffer, o.indices, "w", 1, loc))
    for k, x in enumerate(inputs):
        v = _trace.literal(x)
        if v.dtype not in _extern.ASM_CONSTRAINTS:
            raise _trace.user_error(
                f"T.inline_ptx: input {k} is {v.dtype}; PTX operands are 16-, 32- or 64-bit integers, "
                "float32 or float64",
                loc=loc,
                help="convert it first (T.Cast) or pass a 16-bit float's bits (T.reinterpret(x, 'uint16'))",
            )
        in_dtypes.append(v.dtype)
        args.append(v)
    # the same PTX with the same operand types is one function (named in program order, so
    # that kernels of one program never define one name twice)
    key = (template, tuple(out_dtypes), tuple(in_dtypes), _builtins.bool(memory))
    name = builder.inline_ptx.get(key)
    if name is None:
        name = builder.inline_ptx[key] = f"tl_inline_ptx_{len(builder.inline_ptx)}"
    source = _extern.asm_function(name, template, out_dtypes, in_dtypes, _builtins.bool(memory))
    if source not in builder.extern_sources:
        builder.extern_sources.append(source)
    _extern_call(builder, name, args, None, loc, what="T.inline_ptx")


# ----------------------------------------------------------------------------------------
# warp shuffles (CUDA's __shfl_*_sync, by their TileLang names)

_FULL_MASK = 0xFFFFFFFF


def _shuffle(what, cuda, value, lane, width, mask):
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, what, loc)
    v = given = _trace.literal(value)
    if v.dtype in ("bool", "int8", "uint8", "int16", "uint16"):
        v = cast(v, "int32" if v.dtype != "uint16" and v.dtype != "uint8" else "uint32")
    if any(b.what == "T.Parallel" for b in builder.blocks):
        raise _trace.user_error(
            f"{what} inside T.Parallel: the compiler decides which lane runs each iteration",
            loc=loc,
            help="shuffle in code that runs on each thread (over T.alloc_local values)",
        )
    if not (isinstance(width, _builtins.int) and 1 <= width <= 32 and width & (width - 1) == 0):
        raise _trace.user_error(f"{what}: parameter 'width': a power of 2 up to 32, got {width!r}", loc=loc)
    args = (cast(_trace.literal(mask, "uint32"), "uint32"), v, cast(_trace.literal(lane), "int32"),
            _trace.const(width, "int32"))
    out = _extern_call(builder, cuda, args, v.dtype, loc, what=what)
    return cast(out, given.dtype) if out.dtype != given.dtype else out


def shfl_sync(value, srcLane, width=32, mask=_FULL_MASK):
    """``value`` of lane ``srcLane`` of the thread's group of ``width`` lanes
    (``__shfl_sync``): ``v = T.shfl_sync(x[0], 0)`` broadcasts lane 0's ``x[0]``. Every lane
    of ``mask`` must run it. Runs on the GPU only."""
    return _shuffle("T.shfl_sync", "__shfl_sync", value, srcLane, width, mask)


def shfl_xor(value, delta, width=32, mask=_FULL_MASK):
    """``value`` of lane ``lane ^ delta`` (``__shfl_xor_sync``): ``s = s + T.shfl_xor(s, 16)``."""
    return _shuffle("T.shfl_xor", "__shfl_xor_sync", value, delta, width, mask)


def shfl_down(value, delta, width=32, mask=_FULL_MASK):
    """``value`` of lane ``lane + delta`` (``__shfl_down_sync``; the last lanes keep their
    own): ``s = s + T.shfl_down(s, 1)``."""
    return _shuffle("T.shfl_down", "__shfl_down_sync", value, delta, width, mask)


def shfl_up(value, delta, width=32, mask=_FULL_MASK):
    """``value`` of lane ``lane - delta`` (``__shfl_up_sync``; the first lanes keep their
    own): ``p = p + T.shfl_up(p, 1)``."""
    return _shuffle("T.shfl_up", "__shfl_up_sync", value, delta, width, mask)


def tvm_warp_shuffle(mask, value, warp_id, width=32, warp_size=32):
    """TVM's ``T.tvm_warp_shuffle(mask, value, src_lane, width, warp_size)``:
    ``T.shfl_sync(value, src_lane, width, mask)`` (``warp_size`` is 32 on NVIDIA GPUs):
    ``b = T.tvm_warp_shuffle(0xFFFFFFFF, x[0], tx ^ 1, 32, 32)``."""
    return _shuffle("T.tvm_warp_shuffle", "__shfl_sync", value, warp_id, width, mask)


# ----------------------------------------------------------------------------------------
# views of a buffer's elements, and the im2col gather


def reshape(src, shape):
    """A row-major view of ``src`` with another shape (no copy): ``flat = T.reshape(A, (M * N,))``;
    reads and writes go to ``src``'s elements at the same flat offset."""
    loc = _trace.capture()
    _trace.require_kernel(_trace.current_builder(), "T.reshape", loc)
    if not isinstance(src, _trace.Buffer):
        raise _trace.user_error(f"T.reshape takes a buffer, got {type(src).__name__}", loc=loc)
    return _trace.make_view(src, shape, src.dtype, loc, "T.reshape")


def view(src, shape=None, dtype=None):
    """``T.view(src, shape)``: ``T.reshape`` (``rows = T.view(S, shape=[64, 128])``);
    ``T.view(S, shape, dtype)`` of another dtype over a shared tile is a tile of that dtype
    over exactly its bytes (of another buffer, refused at your line)."""
    loc = _trace.capture()
    _trace.require_kernel(_trace.current_builder(), "T.view", loc)
    if not isinstance(src, _trace.Buffer):
        raise _trace.user_error(f"T.view takes a buffer, got {type(src).__name__}", loc=loc)
    dt = src.dtype if dtype is None else _trace.normalize_dtype(dtype)
    return _trace.make_view(src, src.shape if shape is None else shape, dt, loc, "T.view")


def im2col(img, col, nhw_step, c_step, kernel, stride=1, dilation=1, pad=0, eviction_policy=None):
    """The im2col gather of a convolution: ``T.im2col(data, data_shared, by, k_iter, K, S, D, P)``
    fills ``col`` [block_m, block_k] with rows ``nhw_step * block_m + i`` (output pixels
    n, oh, ow of the NHWC ``img``) and columns ``c_step * block_k + j`` ((kh * K + kw) * C +
    c): ``img[n, oh * S + kh * D - P, ow * S + kw * D - P, c]``, 0 in the padding (and past
    the image)."""
    loc = _trace.capture()
    _trace.require_kernel(_trace.current_builder(), "T.im2col", loc)
    for what, b in (("img", img), ("col", col)):
        if not isinstance(b, _trace.Buffer):
            raise _trace.user_error(f"T.im2col: parameter '{what}': expected a buffer, got {type(b).__name__}", loc=loc)
    if _builtins.len(img.shape) != 4:
        raise _trace.user_error(
            f"T.im2col: parameter 'img': an NHWC tensor of 4 dimensions, got '{img.name}' {list(img.shape)}", loc=loc
        )
    if _builtins.len(col.shape) < 2:
        raise _trace.user_error(f"T.im2col: parameter 'col': a [block_m, block_k] tile, got {list(col.shape)}", loc=loc)
    for what, v in (("kernel", kernel), ("stride", stride), ("dilation", dilation), ("pad", pad)):
        if not isinstance(v, _builtins.int) or isinstance(v, _builtins.bool) or v < (0 if what == "pad" else 1):
            raise _trace.user_error(f"T.im2col: parameter '{what}': expected a Python int, got {v!r}", loc=loc)
    n_img, h_img, w_img, c_img = img.shape
    oh = (h_img + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w_img + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    block_m, block_k = col.shape[-2], col.shape[-1]
    lead = tuple(0 for _ in col.shape[:-2])
    for i, j in Parallel(block_m, block_k):
        m = nhw_step * block_m + i
        k = c_step * block_k + j
        h = (m % (oh * ow)) // ow * stride + k // (kernel * c_img) * dilation - pad
        w = m % ow * stride + (k // c_img) % kernel * dilation - pad
        inside = (h >= 0) & (h < h_img) & (w >= 0) & (w < w_img) & (m < n_img * oh * ow) & (k < kernel * kernel * c_img)
        col[lead + (i, j)] = if_then_else(inside, img[m // (oh * ow), h, w, k % c_img], _trace.const(0, col.dtype))


# ----------------------------------------------------------------------------------------
# tensors over addresses the kernel reads: T.ptr tables and T.make_tensor

# TileLang's pointer element: a tensor of device addresses, as torch gives them
# (torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64))
ptr = _trace.DType("int64")


def make_tensor(ptr, shape, dtype="float32", strides=None):
    """A global tensor over the memory at a 64-bit address the kernel read:
    ``A = T.make_tensor(A_ptrs[g], (M, K), T.float16)`` (``A_ptrs: T.Tensor([G], T.ptr)``, a
    table of tensors' ``data_ptr()``s): row-major, every element access and tile copy of it
    bounds-checked against ``shape`` as a parameter's are. The address is read where this
    runs (each thread its own, as a C pointer); it must be 16-byte aligned (torch's are) and
    the memory on the kernel's device. Runs on the GPU only (no TMA: its copies use cp.async
    or vector loads)."""
    loc = _trace.capture()
    builder = _trace.current_builder()
    _trace.require_kernel(builder, "T.make_tensor", loc)
    if strides is not None:
        raise _trace.user_error(
            "T.make_tensor(..., strides=...): tilers makes row-major tensors only", loc=loc,
            help="drop strides= (a row-major tensor), or view the memory with the shape it has",
        )
    if any(b.what == "T.Parallel" for b in builder.blocks):
        raise _trace.user_error("T.make_tensor inside T.Parallel: make the tensor before the loop", loc=loc)
    address = _trace.literal(ptr)
    if address.dtype not in ("int64", "uint64"):
        raise _trace.user_error(
            f"T.make_tensor: parameter 'ptr': expected a 64-bit address (an element of a T.ptr "
            f"tensor, int64), got a {address.dtype} value",
            loc=loc,
            help="read the address from a T.Tensor([n], T.ptr) table: T.make_tensor(table[i], shape, dtype)",
        )
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for d in dims:
        if not (isinstance(d, _trace.Size) or (isinstance(d, _builtins.int) and not isinstance(d, _builtins.bool)
                                                and d > 0)):
            raise _trace.user_error(
                f"T.make_tensor: parameter 'shape': each dimension is a positive Python int or a "
                f"T.dynamic size, got {d!r}",
                loc=loc,
            )
    dt = _trace.normalize_dtype(dtype)
    name = _trace.assigned_name(loc) or f"tensor{len(builder.buffers)}"
    buffer = builder.new_buffer(name, "global", dt, dims, loc)
    builder.emit({"op": "bind_pointer", "buf": buffer.id, "addr": cast(address, "int64").node()}, loc)
    return buffer
