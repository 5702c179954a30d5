"""Tracing: runs a prim_func once on symbolic proxies and records the tile program of docs/format.md."""

from __future__ import annotations

import json
import linecache
import math
import re
import threading
import types
from collections import namedtuple

from ._source import _PACKAGE_DIRS, Loc, add_call_site, capture, line_text, user_error
from .errors import TileError

FORMAT_VERSION = 1

BOOL_HELP = "use T.if_then_else(cond, a, b) for values or `with T.If(cond):` for statements"


# ----------------------------------------------------------------------------------------
# dtypes

DTYPES = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)
_DTYPE_ALIASES = {
    "float": "float32", "half": "float16", "double": "float64", "int": "int32", "uint": "uint32",
    "short": "int16", "long": "int64",
}
_INT_BITS = {
    "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64,
    "uint64": 64,
}
_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
_DTYPE_BYTES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
}


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of a tilers dtype."""
    return _DTYPE_BYTES[dtype]


class DType(str):
    """A dtype: its name (a str, so ``T.float16 == "float16"``) that also converts values
    (``T.float32(1.0)``, ``T.int64(i)``) and knows its width (``.bits``, ``.bytes``) and its
    torch dtype (``.as_torch()``). ``T.dtype("float16")`` makes one from a name, a torch or
    numpy dtype; ``dtype: T.dtype = T.float16`` annotates a configuration parameter."""

    __slots__ = ()

    def __new__(cls, name="float32"):
        if isinstance(name, DType):
            return name
        return str.__new__(cls, normalize_dtype(name))

    def __call__(self, value):
        return cast(value, self)

    def __repr__(self):
        return f"T.{self}"

    @property
    def bits(self) -> int:
        return 8 * _DTYPE_BYTES[str(self)]

    @property
    def bytes(self) -> int:
        return _DTYPE_BYTES[str(self)]

    @property
    def name(self) -> str:
        return str(self)

    def as_torch(self):
        """The torch dtype of the same name (``torch.float16``); imports torch."""
        import torch

        return getattr(torch, "bool" if self == "bool" else str(self))

    def as_numpy(self):
        """The numpy dtype (bfloat16 through ml_dtypes)."""
        from .host import numpy_dtype

        return numpy_dtype(str(self))


# Names TileLang has that tilers reserves for the quantized GEMM work: using one is an error
# that says so (T.float8_e4m3fn exists, so an import or a default argument does not fail).
RESERVED_DTYPES = (
    "float8_e4m3", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "tfloat32", "int4",
    "uint4",
)


class ReservedDType(str):
    """A dtype name tilers does not implement yet (``T.float8_e4m3fn``): it can be named, as
    a default argument say, but any use in a kernel is an error that says so."""

    __slots__ = ()

    def __repr__(self):
        return f"T.{str(self)}"

    def __call__(self, value):
        raise user_error(*_reserved_message(self))


def _reserved_message(name) -> tuple:
    return (
        f"dtype {str(name)} is not supported by tilers yet (float8/float6/float4, int4 and "
        "tfloat32 come with the quantized GEMM work)",
    )


def is_reserved(dtype) -> bool:
    """Whether a dtype is one of the names reserved for the quantized GEMM work."""
    text = str(dtype).removeprefix("torch.")
    return text in RESERVED_DTYPES or text.startswith(("float8", "float6", "float4", "int4", "uint4"))


def normalize_dtype(dtype) -> str:
    """The canonical dtype name of a string, a DType, Python's int/float/bool, a torch or a
    numpy dtype."""
    if dtype is int:
        return "int32"
    if dtype is float:
        return "float32"
    if dtype is bool:
        return "bool"
    text = str(dtype)
    text = text.removeprefix("torch.")
    text = _DTYPE_ALIASES.get(text, text)
    if text not in DTYPES:
        if is_reserved(text):
            raise user_error(
                *_reserved_message(text),
                help="use float16 or bfloat16 operands (and a float32 accumulator) for now",
            )
        raise user_error(f"unknown dtype {dtype!r}", help="use one of: " + ", ".join(DTYPES))
    return text


def is_float(dtype: str) -> bool:
    return dtype in _FLOAT_RANK


def is_int(dtype: str) -> bool:
    """True for the integer dtypes (bool is not one)."""
    return dtype in _INT_BITS


def promote(a: str, b: str) -> str:
    """The dtype both operands of an arithmetic operator are cast to.

    bool counts as int32; int with float gives the float; float16 with bfloat16 gives
    float32; otherwise the wider type wins, and of a signed and an unsigned integer of one
    width the signed one wins (int32 with uint32 gives int32).
    """
    a = "int32" if a == "bool" else a
    b = "int32" if b == "bool" else b
    if a == b:
        return a
    if is_float(a) and is_float(b):
        if _FLOAT_RANK[a] == _FLOAT_RANK[b]:
            return "float32"
        return a if _FLOAT_RANK[a] > _FLOAT_RANK[b] else b
    if is_float(a):
        return a
    if is_float(b):
        return b
    if _INT_BITS[a] != _INT_BITS[b]:
        return a if _INT_BITS[a] > _INT_BITS[b] else b
    return a if not a.startswith("u") else b


# ----------------------------------------------------------------------------------------
# source locations and errors: tilers/_source.py (the runtime uses them too)

# ----------------------------------------------------------------------------------------
# expressions


def const(value, dtype: str) -> Expr:
    """A constant node; infinities and NaN are written as strings, as docs/format.md says."""
    if isinstance(value, float) and not math.isfinite(value):
        value = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    elif is_float(dtype) and not isinstance(value, str):
        value = float(value)
    elif not isinstance(value, str):
        value = int(value)
    return Expr({"op": "const", "dtype": dtype, "value": value})


class TileAnnotation:
    """What ``T.SharedBuffer(shape, dtype)`` (``FragmentBuffer``, ``LocalBuffer``) gives: the
    annotation of a ``T.macro`` helper's tile parameter, for the reader only."""

    __slots__ = ("kind", "shape", "dtype")

    def __init__(self, kind, shape, dtype):
        self.kind, self.shape, self.dtype = kind, shape, dtype

    def __repr__(self):
        return f"T.{self.kind}({list(self.shape) if isinstance(self.shape, (list, tuple)) else self.shape}, {self.dtype!r})"


def node(op: str, dtype: str, **fields) -> Expr:
    return Expr({"op": op, "dtype": dtype, **fields})


def literal(value, like: str | None = None) -> Expr:
    """``value`` as an expression; a Python number takes the dtype ``like`` where it fits.

    An int literal takes any int or float ``like``; a float literal takes a float ``like``
    and is float32 otherwise; alone, ints are int32 (int64 when they do not fit).
    """
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        if like is None or like == "bool":
            return const(int(value), "bool")
        value = int(value)
    if isinstance(value, int):
        if like is not None and is_float(like):
            return const(value, like)
        if like is not None and is_int(like) and _fits(value, like):
            return const(value, like)
        return const(value, "int32" if _fits(value, "int32") else "int64")
    if isinstance(value, float):
        return const(value, like if like is not None and is_float(like) else "float32")
    if isinstance(value, Buffer):
        raise user_error(
            f"buffer '{value.name}' cannot be used as a value",
            help=f"index it, e.g. {value.name}[i, j], or pass it to T.copy",
        )
    if hasattr(value, "__index__"):  # numpy integers
        return literal(value.__index__(), like)
    if hasattr(value, "__float__") and not isinstance(value, str):
        return literal(float(value), like)
    raise user_error(
        f"a {type(value).__name__} cannot be used in a kernel expression",
        help="use numbers, traced values, or buffer elements such as A[i, j]",
    )


def _fits(value: int, dtype: str) -> bool:
    bits = _INT_BITS[dtype]
    if dtype.startswith("u"):
        return 0 <= value < (1 << bits)
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


def cast(value, dtype) -> Expr:
    """``value`` converted to ``dtype``: ``T.cast(acc[i, j], "float16")``; constants of int or
    bool dtype fold."""
    dtype = normalize_dtype(dtype)
    expr = literal(value, dtype)
    if expr.dtype == dtype:
        return expr
    tree = expr.node()
    if tree["op"] == "const" and (not is_float(expr.dtype) or is_float(dtype)):
        if dtype == "bool":
            return const(int(tree["value"] != 0), "bool")
        if not is_int(dtype) or _fits(tree["value"], dtype):
            return const(tree["value"], dtype)
    return node("cast", dtype, a=tree)


_ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "max", "min")
_BIT_OPS = ("bitand", "bitor", "bitxor", "shl", "shr")
_COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
_BOOL_LOGIC = {"bitand": "and", "bitor": "or", "bitxor": "ne"}
_SYMBOLS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "floormod": "%",
    "bitand": "&",
    "bitor": "|",
    "bitxor": "^",
    "shl": "<<",
    "shr": ">>",
}


def _operands(a, b) -> tuple[Expr, Expr]:
    """Both operands as expressions; a Python number takes the other operand's dtype."""
    if isinstance(a, Expr) and isinstance(b, Expr):
        return a, b
    if isinstance(a, Expr):
        return a, literal(b, a.dtype)
    if isinstance(b, Expr):
        return literal(a, b.dtype), b
    return literal(a), literal(b)


def binary(op: str, a, b) -> Expr:
    """``a op b`` with both operands cast to one dtype (see ``promote``)."""
    a, b = _operands(a, b)
    if op in _BOOL_LOGIC and a.dtype == "bool" and b.dtype == "bool":
        return node(_BOOL_LOGIC[op], "bool", a=a.node(), b=b.node())
    if op in _COMPARE_OPS:
        dtype = a.dtype if a.dtype == b.dtype else promote(a.dtype, b.dtype)
        return node(op, "bool", a=cast(a, dtype).node(), b=cast(b, dtype).node())
    dtype = promote(a.dtype, b.dtype)
    if op == "div" and not is_float(dtype):
        raise user_error(
            f"`/` on integers ({a.dtype} / {b.dtype})",
            help='use // for integer division, or T.cast(x, "float32") for a floating-point result',
        )
    if op in _BIT_OPS and is_float(dtype):
        raise user_error(
            f"`{_SYMBOLS[op]}` needs integer operands, got {dtype}",
            help="cast the operands to an integer type with T.cast",
        )
    a, b = cast(a, dtype), cast(b, dtype)
    if is_float(dtype) and op == "floordiv":
        return unary("floor", binary("div", a, b))
    if is_float(dtype) and op == "floormod":
        return binary("sub", a, binary("mul", unary("floor", binary("div", a, b)), b))
    return node(op, dtype, a=a.node(), b=b.node())


_FLOAT_ONLY = (
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "sin",
    "cos",
)


def unary(op: str, value) -> Expr:
    """A one-operand math op; ints are converted to float32 for the float-only functions."""
    x = literal(value)
    if op in _FLOAT_ONLY and not is_float(x.dtype):
        x = cast(x, "float32")
    if op in ("floor", "ceil") and not is_float(x.dtype):
        return x
    if op == "abs" and x.dtype == "bool":
        x = cast(x, "int32")
    return node(op, x.dtype, a=x.node())


def negate(value) -> Expr:
    x = literal(value)
    if x.dtype == "bool":
        x = cast(x, "int32")
    tree = x.node()
    if tree["op"] == "const":  # fold, so that -T.infinity(...) stays a constant
        v = tree["value"]
        if isinstance(v, str):
            return const({"inf": "-inf", "-inf": "inf"}.get(v, v), x.dtype)
        if not is_int(x.dtype) or _fits(-v, x.dtype):
            return const(-v, x.dtype)
    return node("neg", x.dtype, a=tree)


def invert(value) -> Expr:
    x = literal(value)
    if x.dtype == "bool":
        return node("not", "bool", a=x.node())
    if is_float(x.dtype):
        raise user_error(
            f"`~` needs an integer or bool operand, got {x.dtype}",
            help="use -x to negate a float",
        )
    all_ones = (1 << _INT_BITS[x.dtype]) - 1 if x.dtype.startswith("u") else -1
    return node("bitxor", x.dtype, a=x.node(), b=const(all_ones, x.dtype).node())


def select(cond, a, b) -> Expr:
    c = literal(cond)
    if c.dtype != "bool":
        raise user_error(
            f"the condition has dtype {c.dtype}, not bool",
            help="use a comparison, e.g. T.if_then_else(x > 0, a, b)",
        )
    a, b = _operands(a, b)
    dtype = a.dtype if a.dtype == b.dtype else promote(a.dtype, b.dtype)
    return node("select", dtype, cond=c.node(), a=cast(a, dtype).node(), b=cast(b, dtype).node())


class Expr:
    """A traced scalar value: a JSON expression node (docs/format.md) and its dtype."""

    __slots__ = ("_node", "dtype")

    def __init__(self, tree: dict):
        self._node = tree
        self.dtype = tree["dtype"]

    def node(self) -> dict:
        return self._node

    # `==` builds an expression, so hashing is by identity.
    __hash__ = object.__hash__

    def __add__(self, other):
        return binary("add", self, other)

    def __radd__(self, other):
        return binary("add", other, self)

    def __sub__(self, other):
        return binary("sub", self, other)

    def __rsub__(self, other):
        return binary("sub", other, self)

    def __mul__(self, other):
        return binary("mul", self, other)

    def __rmul__(self, other):
        return binary("mul", other, self)

    def __truediv__(self, other):
        return binary("div", self, other)

    def __rtruediv__(self, other):
        return binary("div", other, self)

    def __floordiv__(self, other):
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return binary("floordiv", other, self)

    def __mod__(self, other):
        return binary("floormod", self, other)

    def __rmod__(self, other):
        return binary("floormod", other, self)

    def __and__(self, other):
        return binary("bitand", self, other)

    def __rand__(self, other):
        return binary("bitand", other, self)

    def __or__(self, other):
        return binary("bitor", self, other)

    def __ror__(self, other):
        return binary("bitor", other, self)

    def __xor__(self, other):
        return binary("bitxor", self, other)

    def __rxor__(self, other):
        return binary("bitxor", other, self)

    def __lshift__(self, other):
        return binary("shl", self, other)

    def __rlshift__(self, other):
        return binary("shl", other, self)

    def __rshift__(self, other):
        return binary("shr", self, other)

    def __rrshift__(self, other):
        return binary("shr", other, self)

    def __lt__(self, other):
        return binary("lt", self, other)

    def __le__(self, other):
        return binary("le", self, other)

    def __gt__(self, other):
        return binary("gt", self, other)

    def __ge__(self, other):
        return binary("ge", self, other)

    def __eq__(self, other):
        return binary("eq", self, other)

    def __ne__(self, other):
        return binary("ne", self, other)

    def __neg__(self):
        return negate(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return unary("abs", self)

    def __invert__(self):
        return invert(self)

    def __bool__(self):
        raise user_error(
            "a traced value cannot be used as a Python bool here (inside the kernel body, "
            "`if`, `and`, `or`, `not` and `x if c else y` on traced values are device control "
            "flow; this use is outside it, or in a helper function)",
            help=BOOL_HELP + "; make a helper a T.macro",
        )

    def astype(self, dtype):
        """``x.astype("float16")``: ``T.cast(x, dtype)``."""
        return cast(self, dtype)

    def __int__(self):
        raise user_error(
            "a traced value cannot be converted with int()",
            help='use T.cast(x, "int32") to convert inside the kernel',
        )

    def __float__(self):
        raise user_error(
            "a traced value cannot be converted with float()",
            help='use T.cast(x, "float32") to convert inside the kernel',
        )

    def __index__(self):
        raise user_error(
            "a traced value cannot be used as a Python int (in range(), or as a list index)",
            help="loop over a traced extent with `for k in T.serial(n):`",
        )

    def __len__(self):
        raise user_error("a traced value has no len()", help="use the buffer's shape: A.shape[0]")

    def __iter__(self):
        raise user_error(
            "a traced value cannot be iterated", help="loop with `for k in T.serial(n):`"
        )

    def __repr__(self):
        return f"<traced {self.dtype} {self._node['op']}>"


# ----------------------------------------------------------------------------------------
# symbolic sizes (T.dynamic)


class Size(Expr):
    """``T.dynamic("M")``: a tensor dimension that stays symbolic — one compiled kernel
    serves every value, which each call binds from the tensors it is given.

    Usable as a dimension of ``T.Tensor`` shapes and as an int32 (or int64) value in the
    kernel (grid, loop bounds, guards). Sizes with the same name in one kernel are the same
    size. ``multiple_of=16`` promises that every value is a multiple of 16: calls that break
    it are errors, and the compiler drops the bounds checks the promise makes redundant.
    """

    __slots__ = ("loc", "multiple_of", "name")

    def __init__(self, name: str, dtype: str = "int32", multiple_of: int = 1, loc=None):
        self.name = name
        self.dtype = dtype
        self.multiple_of = multiple_of
        self.loc = loc
        self._node = None

    def node(self) -> dict:
        if getattr(_state, "builder", None) is None:
            raise user_error(
                f"the T.dynamic size '{self.name}' is computed with outside a kernel",
                help="a tensor dimension is a size itself (declare another T.dynamic for it); "
                "compute with sizes inside the kernel, e.g. T.ceildiv(M, block_M)",
            )
        return current_builder().size_var(self).node()

    def __repr__(self):
        extra = f", multiple_of={self.multiple_of}" if self.multiple_of != 1 else ""
        dtype = f", {self.dtype!r}" if self.dtype != "int32" else ""
        return f"T.dynamic({self.name!r}{dtype}{extra})"


def make_sizes(name, dtype="int32", multiple_of=None):
    """T.dynamic / T.symbolic: one Size, or a tuple for "m, n" or "m n"."""
    loc = capture()
    if not isinstance(name, str) or not name.strip():
        raise user_error(
            f"T.dynamic needs a name, got {name!r}",
            loc=loc,
            help='e.g. M = T.dynamic("M")',
        )
    try:
        dtype = normalize_dtype(dtype)
    except TileError:
        dtype = str(dtype)
    if dtype not in ("int32", "int64"):
        raise user_error(
            f"T.dynamic({name!r}): a size is int32 or int64, got {dtype}",
            loc=loc,
            help='T.dynamic("M") is int32; T.dynamic("M", "int64") for sizes past 2^31 - 1',
        )
    if multiple_of is None:
        multiple_of = 1
    if (
        isinstance(multiple_of, bool)
        or not isinstance(multiple_of, int)
        or not 1 <= multiple_of <= (1 << 30)
    ):
        raise user_error(
            f"T.dynamic({name!r}): multiple_of must be a positive int, got {multiple_of!r}",
            loc=loc,
            help='e.g. T.dynamic("M", multiple_of=16)',
        )
    several = "," in name or " " in name.strip()
    names = [n for n in re.split(r"[\s,]+", name.strip()) if n]
    for n in names:
        if not n.isidentifier():
            raise user_error(
                f"T.dynamic: {n!r} is not a valid name for a size",
                loc=loc,
                help='name sizes like Python variables: T.dynamic("M"), T.dynamic("m, n")',
            )
    sizes = tuple(Size(n, dtype, multiple_of, loc) for n in names)
    return sizes if several else sizes[0]


def shape_text(shape) -> str:
    """(M, 64): a shape with its sizes by name."""
    parts = [d.name if isinstance(d, Size) else str(d) for d in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


# ----------------------------------------------------------------------------------------
# buffers


class Buffer:
    """A tile-program buffer: a tensor parameter (scope global) or a T.alloc_* allocation.

    ``A[i, j]`` reads an element (or names a region when it holds slices);
    ``A[i, j] = v`` records a store.
    """

    __slots__ = ("_id", "dtype", "is_barrier", "kernel", "loc", "name", "scope", "shape", "swizzle",
                 "used", "user_layout", "reducer_op", "view_root", "alias_of")

    def __init__(
        self, id: int, name: str, scope: str, dtype: str, shape: tuple, loc: Loc, kernel: int | None = None
    ):
        self.is_barrier = False  # T.alloc_barrier: mbarriers, not data
        self._id = id
        # the T.Kernel that allocated it (its number); None for the call's global memory
        # (tensor parameters, T.alloc_global scratch), which every kernel may use
        self.kernel = kernel
        self.name = name
        self.scope = scope
        self.dtype = dtype
        self.shape = shape
        self.loc = loc
        self.swizzle = False  # T.annotate_layout({buf: T.make_swizzled_layout(buf)})
        # T.annotate_layout({buf: T.Layout(...)}): element accesses go through it
        # (tilers/_user_layout.py); `used` says an access was traced before it
        self.user_layout = None
        self.used = False
        # T.alloc_reducer: the combining op ("sum", "max", "min"); updates of it inside a
        # T.Parallel loop that leave out loop variables are reductions (language.py)
        self.reducer_op = None
        # T.Tensor(shape, dtype, buf.data), T.reshape / T.view: a view of another buffer's
        # elements in row-major order; its accesses go to the root's elements
        self.view_root = None
        # T.view of another dtype over a shared tile: a buffer of its own over the tile's
        # bytes (the root Buffer); plan_shared_memory places it there
        self.alias_of = None

    @property
    def data(self) -> BufferData:
        """TileLang's ``buf.data``: the buffer's memory, for ``T.Tensor(shape, dtype, buf.data)``."""
        return BufferData(self)

    @property
    def id(self) -> int:
        """The buffer's number in the program; reading it records a use, so a buffer of
        another T.Kernel is refused here, at the line that uses it."""
        if self.kernel is not None:
            builder = getattr(_state, "builder", None)
            if builder is not None and builder.kernel_index != self.kernel:
                where = (
                    f"the T.Kernel block number {builder.kernel_index + 1}"
                    if builder.kernel_index is not None
                    else "no T.Kernel block"
                )
                raise user_error(
                    f"'{self.name}' belongs to T.Kernel block number {self.kernel + 1} of this "
                    f"prim_func, but is used in {where}",
                    loc=capture(),
                    help="shared and fragment buffers live in one kernel; to hand data to a "
                    "later kernel, write it to a tensor parameter or a T.alloc_global buffer "
                    "declared before the kernels",
                )
        return self._id

    def __getitem__(self, key) -> Load:
        return Load(self, key if isinstance(key, tuple) else (key,), capture())

    def __setitem__(self, key, value):
        loc = capture()
        indices = key if isinstance(key, tuple) else (key,)
        if any(isinstance(i, slice) for i in indices):
            raise user_error(
                f"cannot assign to a slice of '{self.name}'",
                loc=loc,
                help="use T.fill(region, value) or T.copy(src, region)",
            )
        if self.reducer_op is not None:
            from .language import _reducer_store

            if _reducer_store(self, indices, value, loc):
                return
        idx = element_indices(self, indices, loc)
        stored = cast(literal(value, self.dtype), self.dtype)
        builder = current_builder()
        builder.emit({"op": "store", "buf": self.id, "idx": idx, "value": stored.node()}, loc)

    def to_json(self, builder: Builder) -> dict:
        out = {
            "id": self._id,
            "name": self.name,
            "scope": self.scope,
            "dtype": self.dtype,
            "shape": [builder.size_var(d).node() if isinstance(d, Size) else d for d in self.shape],
            "loc": builder.json_loc(self.loc),
        }
        if self.swizzle:
            out["swizzle"] = True
        if self.alias_of is not None:
            out["alias_of"] = self.alias_of._id
        if self.kernel is not None and len(builder.kernels) > 1:
            out["kernel"] = self.kernel
        return out

    def __repr__(self):
        return f"<buffer {self.name}: {self.scope} {self.dtype}{shape_text(self.shape)}>"

    def _used_as_value(self, *other):
        literal(self)  # raises: a whole buffer is not a value

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _used_as_value
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _used_as_value
    __mod__ = __rmod__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _used_as_value


class Load(Expr):
    """``buf[...]``: an element read when used as a value, a region when given to T.copy."""

    __slots__ = ("buffer", "indices", "loc")

    def __init__(self, buffer: Buffer, indices: tuple, loc: Loc):
        self.buffer = buffer
        self.indices = indices
        self.loc = loc
        self.dtype = buffer.dtype
        self._node = None

    def has_slices(self) -> bool:
        return any(isinstance(i, slice) for i in self.indices)

    def node(self) -> dict:
        if self._node is None:
            if self.has_slices():
                raise user_error(
                    f"'{self.buffer.name}[...]' with a slice is a region, not a value",
                    loc=self.loc,
                    help="pass regions to T.copy or T.fill; index every "
                    "dimension to read one element",
                )
            idx = element_indices(self.buffer, self.indices, self.loc)
            self._node = {
                "op": "load",
                "dtype": self.dtype,
                "buf": self.buffer.id,
                "idx": idx,
                "loc": current_builder().json_loc(self.loc),
            }
        return self._node

    def __repr__(self):
        return f"<traced {self.dtype} {self.buffer.name}[...]>"


class BufferData:
    """``buf.data``: the memory of a buffer, which ``T.Tensor(shape, dtype, data)`` views."""

    __slots__ = ("buffer",)

    def __init__(self, buffer):
        self.buffer = buffer

    def __repr__(self):
        return f"<{self.buffer.name}.data>"


def make_view(root: Buffer, shape, dtype: str, loc: Loc, what: str) -> Buffer:
    """A buffer of ``shape`` over ``root``'s elements in row-major order (the same dtype):
    element ``i`` of the view is the root's element at the same flat offset."""
    from ._user_layout import Layout

    while root.view_root is not None:
        root = root.view_root
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if dtype != root.dtype and root.scope == "shared" and root.alias_of is None:
        return _retyped_view(root, dims, dtype, loc, what)
    if dtype != root.dtype:
        raise user_error(
            f"{what}: a view of '{root.name}' ({root.dtype}) as {dtype}: tilers views a buffer's "
            "elements in their own dtype only",
            loc=loc,
            help=f"view it as {root.dtype} and convert the values (T.Cast), or use a buffer of {dtype}",
        )
    if root.scope == "fragment":
        raise user_error(
            f"{what}: a view of the fragment '{root.name}': its elements live on different threads",
            loc=loc,
            help="view a tensor, a T.alloc_shared tile or a T.alloc_local buffer",
        )
    if all(isinstance(d, int) for d in dims + tuple(root.shape)) and math.prod(dims) > math.prod(root.shape):
        raise user_error(
            f"{what}: a view of shape {list(dims)} ({math.prod(dims)} elements) over '{root.name}' "
            f"{list(root.shape)} ({math.prod(root.shape)} elements)",
            loc=loc,
            help="a view may not hold more elements than the buffer it views",
        )
    view = Buffer(root._id, f"{root.name}_view", root.scope, root.dtype, dims, loc, root.kernel)
    view.view_root = root
    # accesses through the view, and its tile operations, are element accesses of the root
    # (tilers/_user_layout.py expands T.copy / T.fill on it into element loops)
    view.user_layout = Layout(dims, lambda *i: list(i))
    return view


def _retyped_view(root: Buffer, dims: tuple, dtype: str, loc: Loc, what: str) -> Buffer:
    """A shared tile of another dtype over ``root``'s bytes (TileLang's ``T.view(S, shape,
    dtype)``): as many bytes exactly; what one reads of bytes the other wrote follows the
    two tiles' layouts (row-major unless a T.gemm swizzles one)."""
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        raise user_error(f"{what}: a shape of positive Python ints, got {list(dims)}", loc=loc)
    n, m = math.prod(dims), math.prod(root.shape)
    if n * dtype_bytes(dtype) != m * dtype_bytes(root.dtype):
        raise user_error(
            f"{what}: a view of '{root.name}' {list(root.shape)} {root.dtype} ({m * dtype_bytes(root.dtype)} "
            f"bytes) as {list(dims)} {dtype} ({n * dtype_bytes(dtype)} bytes): a view of another dtype "
            "covers the tile's bytes exactly",
            loc=loc,
        )
    builder = current_builder()
    view = builder.new_buffer(f"{root.name}_as_{dtype}", "shared", dtype, dims, loc)
    view.alias_of = root
    return view


def _root_indices(view: Buffer, indices: tuple) -> tuple:
    flat = None
    for d, i in enumerate(indices):
        flat = i if flat is None else flat * view.shape[d] + i
    root = view.view_root
    out = []
    for d in reversed(root.shape[1:]):
        out.append(flat % d if not (isinstance(d, int) and d == 1) else 0)
        flat = flat // d
    out.append(flat)
    return tuple(reversed(out))


Bound = namedtuple("Bound", ["value", "name", "reads", "body", "loc"])


def _loads_of(node, out: set):
    """The buffer ids an expression node reads."""
    if isinstance(node, dict):
        if node.get("op") == "load":
            out.add(node["buf"])
        for v in node.values():
            _loads_of(v, out)
    elif isinstance(node, list):
        for v in node:
            _loads_of(v, out)


def written_buffers(stmt: dict) -> set:
    """The buffers a statement (with what it holds) writes."""
    out = set()

    def walk(st):
        if not isinstance(st, dict):
            return
        op = st.get("op")
        if op in ("store", "atomic_add", "atomic_max", "atomic_min") and "buf" in st:
            out.add(st["buf"])
            if st.get("prev") is not None:
                out.add(st["prev"])
        elif op in ("copy", "fill", "tma_copy", "cumsum") and isinstance(st.get("dst"), dict):
            out.add(st["dst"].get("buf"))
        elif op == "cumsum" and isinstance(st.get("dst"), int):
            out.add(st["dst"])
        elif op == "reduce":
            out.add(st.get("dst"))
        elif op == "gemm":
            c = st.get("c")
            out.add(c["buf"] if isinstance(c, dict) else c)
        elif op == "cp_async":
            out.add(st.get("dst"))
        elif op == "call_extern":
            for a in st.get("args", []):
                if a.get("kind") == "ptr" and "w" in a.get("mode", ""):
                    out.add(a["buf"])
            if st.get("result"):
                out.add(st["result"]["buf"])
        for key in ("body", "then", "else"):
            for inner in st.get(key) or []:
                walk(inner)

    walk(stmt)
    out.discard(None)
    return out


def element_indices(buffer: Buffer, indices: tuple, loc: Loc) -> list:
    """The index nodes of a one-element access; there must be one per dimension."""
    rank = len(buffer.shape)
    if len(indices) != rank:
        raise user_error(
            f"'{buffer.name}' has {rank} dimension{'s' if rank != 1 else ''} "
            f"but {len(indices)} index{'es' if len(indices) != 1 else ''} "
            "given",
            loc=loc,
            help=f"index every dimension of '{buffer.name}', "
            f"e.g. {buffer.name}[{', '.join('ijkl'[:rank])}]",
        )
    buffer.used = True
    if buffer.user_layout is not None:
        from ._user_layout import storage_indices

        indices = tuple(
            i + buffer.shape[d] if isinstance(i, int) and i < 0 and isinstance(buffer.shape[d], int) else i
            for d, i in enumerate(indices)
        )
        indices = storage_indices(buffer, indices)
    if buffer.view_root is not None:
        buffer.view_root.used = True
        indices = _root_indices(buffer, indices)
        buffer = buffer.view_root
    return [index_node(i, buffer.shape[d], loc) for d, i in enumerate(indices)]


def index_node(value, extent: int | None, loc: Loc) -> dict:
    """An int32/int64 index node; a negative Python int counts from the end as in Python."""
    if value is Ellipsis or value is None:
        raise user_error(
            "`...` and `None` are not supported in buffer subscripts",
            loc=loc,
            help="index or slice every dimension, e.g. A[i, 0:64]",
        )
    if isinstance(value, int) and not isinstance(value, bool) and value < 0 and extent is not None:
        # from the end, as in Python (a symbolic extent: an expression of the size)
        value = value + extent if isinstance(extent, int) else extent + value
    expr = literal(value)
    if is_float(expr.dtype):
        raise user_error(
            f"an index must be an integer, got {expr.dtype}",
            loc=loc,
            help='convert it with T.cast(x, "int32")',
        )
    if expr.dtype in ("uint32", "int64", "uint64"):
        return cast(expr, "int64").node()
    return cast(expr, "int32").node()


def region(operand, other, loc: Loc) -> dict:
    """A copy/fill operand as a region (docs/format.md, "Regions").

    Slices give ``{"start", "stop"}``; plain indices next to slices give ``{"index"}``; a
    subscript of plain indices only (``A[by * bM, k * bK]``) is an origin ``{"start"}``
    whose extents come from ``other`` — unless ``other`` is such a subscript too, in which
    case both select single elements.
    """
    if isinstance(operand, Buffer):
        refuse_user_layout(operand, loc)
        operand.used = True
        return {"buf": operand.id, "dims": [], "loc": current_builder().json_loc(loc)}
    if not isinstance(operand, Load):
        raise user_error(
            f"expected a buffer or a subscript such as A[i, 0:64], got {type(operand).__name__}",
            loc=loc,
            help="pass a buffer or a region of one to T.copy and T.fill",
        )
    buffer = operand.buffer
    refuse_user_layout(buffer, operand.loc)
    buffer.used = True
    if len(operand.indices) > len(buffer.shape):
        raise user_error(
            f"'{buffer.name}' has {len(buffer.shape)} dimensions but "
            f"{len(operand.indices)} indices were given",
            loc=operand.loc,
            help=f"give at most one index or slice per dimension of '{buffer.name}'",
        )
    other_is_point = isinstance(other, Load) and not other.has_slices()
    origin = not operand.has_slices() and other is not None and not other_is_point
    dims = []
    for d, i in enumerate(operand.indices):
        extent = buffer.shape[d]
        if isinstance(i, slice):
            if i.step is not None:
                raise user_error(
                    "slices with a step are not supported",
                    loc=operand.loc,
                    help="copy a contiguous region and pick elements in a T.Parallel loop",
                )
            start = 0 if i.start is None else i.start
            stop = extent if i.stop is None else i.stop
            dims.append(
                {
                    "start": index_node(start, extent, operand.loc),
                    "stop": index_node(stop, extent, operand.loc),
                }
            )
        elif origin:
            dims.append({"start": index_node(i, extent, operand.loc)})
        else:
            dims.append({"index": index_node(i, extent, operand.loc)})
    return {"buf": buffer.id, "dims": dims, "loc": current_builder().json_loc(operand.loc)}


def refuse_user_layout(buffer: Buffer, loc: Loc, what: str = "this operation") -> None:
    """A tile operation that reads a buffer in its own layout cannot take one with a
    T.Layout (T.copy, T.fill and tile atomics expand into element accesses first)."""
    layout = buffer.user_layout
    if layout is None:
        return
    where = f" at {layout.loc.file}:{layout.loc.line}" if layout.loc else ""
    raise user_error(
        f"{what} cannot take '{buffer.name}': it has a user layout (the T.Layout made{where}), "
        "and only element accesses, T.copy, T.fill and tile atomics follow one",
        loc=loc,
        help=f"copy '{buffer.name}' into a tile without a user layout first",
    )


class TensorType:
    """The annotation ``T.Tensor(shape, dtype)`` of a tensor parameter (checked when traced)."""

    def __init__(self, shape, dtype="float32"):
        self.shape = shape
        self.dtype = dtype

    def __repr__(self):
        return f"T.Tensor({self.shape!r}, {self.dtype!r})"


class PrimFunc:
    """A ``@T.prim_func``: keeps the Python function; tracing happens when it is compiled."""

    def __init__(self, func):
        self.func = func
        self.__name__ = func.__name__
        self.__qualname__ = getattr(func, "__qualname__", func.__name__)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self.compiled = {}  # tilers.compile's memo, keyed by (params, out_idx, target, lineinfo)

    def __call__(self, *args, **kwargs):
        raise user_error(
            f"prim_func '{self.__name__}' is compiled, not called",
            help=f"use kernel = tilers.compile({self.__name__}, ...) and call kernel",
        )

    def __repr__(self):
        return f"<prim_func {self.__name__}>"


# ----------------------------------------------------------------------------------------
# the program being recorded

# An open statement list: the body being recorded, what opened it ("T.Parallel"), where.
Block = namedtuple("Block", ["body", "what", "loc"])


class Builder:
    """The state of one trace: tables of the program and the stack of open statement lists."""

    def __init__(self, name: str):
        self.name = name
        self.sources: list[dict] = []
        self.source_index: dict[str, int] = {}
        self.params: list[dict] = []
        self.buffers: list[Buffer] = []
        self.buffer_names: set[str] = set()
        self.vars: list[dict] = []
        self.blocks: list[Block] = []
        # the T.Kernel blocks recorded so far, in order (a prim_func may hold several,
        # launched one after the other by each call), and the number of the one open
        self.kernels: list[dict] = []
        self.kernel_index: int | None = None
        self.var_kernel: list[int | None] = []  # per variable, the kernel that made it
        self.raster: dict | None = None  # T.use_swizzle
        self.sizes: dict[str, tuple[Size, Expr]] = {}  # T.dynamic sizes by name
        self.kernel_threads = 0  # T.Kernel's threads, once opened
        self.extern_sources: list[str] = []
        self.bound: list = []  # names bound to values read from buffers (Builder.bind)
        self.thread_dims: tuple = (0,)
        self.block_vars: list = []
        self.kernel_cluster = None  # T.ClusterKernel's [x, y]
        self.cluster_views: dict = {}  # T.copy_cluster: shared tile id -> its cluster view
        self.cluster_arrived: Loc | None = None  # a T.cluster_arrive not yet waited for
        self.inline_ptx: dict = {}  # (template, operand dtypes, memory) -> function name
        self.open_threads = False  # inside a T.ws region
        self.reg_budget: dict = {}  # T.annotate_*_reg_* / T.no_set_max_nreg
        self.scratch: list[Buffer] = []  # T.alloc_global, in declaration order
        # T.alloc_global outside a T.Kernel: name -> (kernels closed before it, where)
        self.scratch_declared: dict[str, tuple[int, Loc]] = {}
        self._thread_var: Expr | None = None

    def open_kernel(self) -> None:
        """Start recording the next T.Kernel block: what belongs to one kernel starts afresh."""
        self.kernel_index = len(self.kernels)
        self._thread_var = None
        self.raster = None
        self.reg_budget = {}
        self.open_threads = False
        self.extern_sources = []  # T.import_source / T.inline_ptx code of this kernel
        self.bound = []
        self.thread_dims = (0,)  # T.Kernel's threads=(x, y, z)
        self.block_vars = []
        self.kernel_cluster = None
        self.cluster_views = {}
        self.cluster_arrived = None

    def close_kernel(self, kernel: dict) -> None:
        """Record the T.Kernel block just left, after checking that it reads no variable of
        another kernel (a block index or loop variable kept in a Python name)."""
        if self.cluster_arrived is not None:
            raise user_error(
                "T.cluster_arrive with no T.cluster_wait after it in the kernel",
                loc=self.cluster_arrived,
                help="call T.cluster_wait() before the kernel ends (or T.cluster_sync() for both)",
            )
        foreign = self._foreign_var(kernel)
        if foreign is not None:
            var, loc = foreign
            owner = self.var_kernel[var]
            raise user_error(
                f"'{self.vars[var]['name']}' is a variable of T.Kernel block number {owner + 1}, "
                f"used in block number {self.kernel_index + 1}",
                loc=loc,
                help="block indices, thread indices and loop variables exist in their own "
                "kernel; compute the value again in this kernel",
            )
        self.kernels.append(kernel)
        self.kernel_index = None

    def _foreign_var(self, kernel: dict):
        """The first variable the kernel's grid or body reads that another kernel made, with
        the location of the statement reading it (None if there is none). Iterative: bodies
        may nest deeply."""
        stack = [(kernel, kernel.get("loc"))]
        while stack:
            value, loc = stack.pop()
            if isinstance(value, dict):
                loc = value.get("loc", loc) if isinstance(value.get("loc"), list) else loc
                if value.get("op") == "var":
                    owner = self.var_kernel[value["id"]]
                    if owner is not None and owner != self.kernel_index:
                        file = self.sources[loc[0]]["file"] if loc else "<unknown>"
                        return value["id"], Loc(file, loc[1], loc[2]) if loc else None
                stack.extend((v, loc) for v in value.values() if isinstance(v, (dict, list)))
            elif isinstance(value, list):
                stack.extend((v, loc) for v in value if isinstance(v, (dict, list)))
        return None

    def finish(self, what: str, func) -> None:
        """Check the recorded function once it has returned: it closed every block, holds a
        kernel, and declares no T.alloc_global after its last kernel."""
        if self.blocks:  # a T.Kernel left by an exception is unwound by __exit__
            raise user_error("the function ended inside an open block", loc=self.blocks[-1].loc)
        if not self.kernels:
            raise user_error(
                f"{what} '{self.name}' has no `with T.Kernel(...)` block",
                loc=def_loc(func),
                help="write the kernel's statements in `with T.Kernel(grid, threads=128) as bx:`",
            )
        for before, loc in self.scratch_declared.values():
            if before == len(self.kernels):
                raise user_error(
                    "T.alloc_global after the last T.Kernel block: no kernel uses it",
                    loc=loc,
                    help="declare the scratch buffer before the `with T.Kernel(...)` blocks "
                    "that use it, or inside one",
                )

    def thread_var(self) -> Expr:
        """The thread index (``threadIdx.x``) of this kernel, declared on first use."""
        if self._thread_var is None:
            self._thread_var = self.new_var("tid", "thread_idx")
        return self._thread_var

    def size_var(self, size: Size) -> Expr:
        """The variable of a T.dynamic size in this kernel (one per name)."""
        known = self.sizes.get(size.name)
        if known is None:
            var = self.new_var(size.name, "size", size.dtype)
            if size.multiple_of != 1:
                self.vars[-1]["multiple_of"] = size.multiple_of
            self.sizes[size.name] = (size, var)
            return var
        first, var = known
        if (first.dtype, first.multiple_of) != (size.dtype, size.multiple_of):
            raise user_error(
                f"two T.dynamic sizes named '{size.name}' disagree: {first!r} and {size!r}",
                loc=size.loc,
                help="sizes with the same name are the same size; declare it once and reuse it",
            )
        return var

    def json_loc(self, loc: Loc) -> list:
        index = self.source_index.get(loc.file)
        if index is None:
            index = self.source_index[loc.file] = len(self.sources)
            self.sources.append({"file": loc.file, "lines": {}})
        if loc.line:
            lines = self.sources[index]["lines"]
            key = str(loc.line)
            if key not in lines:
                lines[key] = linecache.getline(loc.file, loc.line).rstrip("\r\n")
        return [index, loc.line, loc.column]

    def new_var(self, name: str, kind: str, dtype: str = "int32", axis: int | None = None):
        var = {"id": len(self.vars), "name": name, "kind": kind}
        if axis is not None:
            var["axis"] = axis
        var["dtype"] = dtype
        self.vars.append(var)
        # parameters and sizes are the call's; the rest belong to the kernel being recorded
        self.var_kernel.append(None if kind in ("param", "size") else self.kernel_index)
        return Expr({"op": "var", "dtype": dtype, "id": var["id"]})

    def new_buffer(self, name: str, scope: str, dtype: str, shape: tuple, loc: Loc) -> Buffer:
        unique = name
        suffix = 1
        while unique in self.buffer_names:
            unique = f"{name}_{suffix}"
            suffix += 1
        self.buffer_names.add(unique)
        kernel = None if scope == "global" else self.kernel_index
        buffer = Buffer(len(self.buffers), unique, scope, dtype, shape, loc, kernel)
        self.buffers.append(buffer)
        return buffer

    def open_block(self, what: str, loc: Loc) -> list:
        body: list = []
        self.blocks.append(Block(body, what, loc))
        return body

    def close_block(self, body: list):
        top = self.blocks[-1]
        if top.body is not body:
            raise user_error(
                f"the {top.what} loop was left early (by break or return)",
                loc=top.loc,
                help="tile loops run every iteration; guard the body with "
                "`with T.If(cond):` instead",
            )
        self.blocks.pop()
        # names bound in the block are out of its scope now (TileLang's Let ends there)
        self.bound = [b for b in self.bound if b.body is not body]

    def emit(self, stmt: dict, loc: Loc) -> dict:
        if not self.blocks:
            raise user_error(
                f"`{stmt['op']}` outside `with T.Kernel(...)`",
                loc=loc,
                help="put the kernel's statements inside the T.Kernel block",
            )
        stmt["loc"] = self.json_loc(loc)
        if self.bound:
            self.keep_bound_values(written_buffers(stmt), loc)
        self.blocks[-1].body.append(stmt)
        return stmt

    def bind(self, name: str, value, loc: Loc):
        """``name = value`` in the kernel body, outside T.Parallel: TileLang binds the value
        there (a Let); a traced expression is read where it is used. Remember it, so that
        a later write to a buffer it reads first copies it (``keep_bound_values``)."""
        if any(b.what == "T.Parallel" for b in self.blocks) or self.kernel_index is None:
            return
        if not isinstance(value, Expr) or (isinstance(value, Load) and value.has_slices()):
            return
        try:
            node = value.node()
        except TileError:
            return
        reads = set()
        _loads_of(node, reads)
        # a fragment element read outside T.Parallel would make every thread hold the whole
        # fragment (which a T.gemm's layout forbids): such a name stays the read itself
        if reads and not any(self.buffers[b].scope == "fragment" for b in reads):
            self.bound.append(Bound(value, name, frozenset(reads), self.blocks[-1].body, loc))

    def keep_bound_values(self, written: set, loc: Loc):
        """Before a statement writes ``written``, copy each bound value that reads them into
        a register variable where its block is, and read it from there: the value the name
        was bound to, as TileLang's Let has it."""
        if not written:
            return
        keep, self.bound = [b for b in self.bound if b.reads & written], [
            b for b in self.bound if not b.reads & written
        ]
        for b in keep:
            value = b.value
            temp = self.new_buffer(f"{b.name}_value", "local", value.dtype, (1,), b.loc)
            store = {"op": "store", "buf": temp.id, "idx": [const(0, "int32").node()],
                     "value": value.node(), "loc": self.json_loc(b.loc)}
            # at the end of the name's block, or just before the open statement (a loop, an
            # `if`) inside which this write is
            body = b.body
            at = len(body)
            depth = next((k for k, blk in enumerate(self.blocks) if blk.body is b.body), None)
            if depth is not None and depth + 1 < len(self.blocks) and body:
                inner = self.blocks[depth + 1].body
                last = body[-1]
                if isinstance(last, dict) and any(v is inner for v in last.values()):
                    at = len(body) - 1
            body.insert(at, store)
            value._node = Load(temp, (0,), b.loc).node()

    def program(self) -> dict:
        buffers = [b.to_json(self) for b in self.buffers]  # registers their lines first
        for source in self.sources:
            source["lines"] = dict(sorted(source["lines"].items(), key=lambda kv: int(kv[0])))
        program = {
            "version": FORMAT_VERSION,
            "name": self.name,
            "sources": self.sources,
            "params": self.params,
            "buffers": buffers,
            "vars": self.vars,
        }
        if len(self.kernels) == 1:
            program["kernel"] = self.kernels[0]
        else:
            program["kernels"] = self.kernels
            program["vars"] = [
                var if owner is None else {**var, "kernel": owner}
                for var, owner in zip(self.vars, self.var_kernel)
            ]
        if self.scratch:
            program["scratch"] = [b.id for b in self.scratch]
        return program


_state = threading.local()


def current_builder() -> Builder:
    builder = getattr(_state, "builder", None)
    if builder is None:
        raise user_error(
            "tile statements can only run while a @T.prim_func is compiled",
            help="compile the function: tilers.compile(func, ...)",
        )
    return builder


def require_kernel(builder: Builder, what: str, loc: Loc):
    if not builder.blocks:
        raise user_error(
            f"{what} must be used inside `with T.Kernel(...)`",
            loc=loc,
            help="put it inside the kernel's `with T.Kernel(...) as bx:` block",
        )


_ASSIGNED_NAME = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")
_FOR_TARGETS = re.compile(r"^\s*for\s+\(?([\w\s,]+?)\)?\s+in\b")
_WITH_TARGETS = re.compile(r"\bas\s+\(?([\w\s,]+?)\)?\s*:")


_NAME_BEFORE_CALL = re.compile(r"(?:^|[;:]|\bin\b)\s*([A-Za-z_]\w*)\s*(?::[^=;]*)?=\s*$")


def assigned_name(loc: Loc) -> str | None:
    """``acc`` from a source line ``acc = T.alloc_fragment(...)``: the name assigned the
    call at ``loc``'s column (``s = ...; frag = T.alloc_fragment(...)`` names ``frag``), else
    the line's first assignment."""
    text = line_text(loc)
    column = getattr(loc, "column", 0) or 0
    if column > 1:
        match = _NAME_BEFORE_CALL.search(text[: column - 1])
        if match:
            return match.group(1)
    match = _ASSIGNED_NAME.match(text)
    return match.group(1) if match else None


def target_names(loc: Loc, pattern: re.Pattern, count: int) -> list | None:
    """The names a ``for``/``with ... as`` line binds, if there are ``count`` of them."""
    match = pattern.search(line_text(loc))
    if not match:
        return None
    names = [n.strip() for n in match.group(1).split(",") if n.strip()]
    return names if len(names) == count else None


# ----------------------------------------------------------------------------------------
# entry point: binding the compile parameters, then running the function


def trace(prim_func: PrimFunc, params: dict | None = None) -> dict:
    """Trace ``prim_func`` with its free names rebound to ``params``; the program as a dict."""
    if not isinstance(prim_func, PrimFunc):
        raise TileError(f"expected a @T.prim_func, got {type(prim_func).__name__}")
    params = dict(params or {})
    func, annotations = bind(prim_func, params)
    builder = Builder(prim_func.__name__)
    previous = getattr(_state, "builder", None)
    _state.builder = builder
    try:
        args = declare_params(builder, func, annotations)
        try:
            func(*args)
        except NameError as error:
            how = f"tilers.compile({prim_func.__name__}, {{name}}=...)"
            raise unbound_name_error(error, how) from None
        builder.finish("prim_func", func)
    finally:
        _state.builder = previous
    return builder.program()


def unbound_name_error(error: NameError, how: str) -> Exception:
    """A NameError raised by a kernel's own line as a TileError there: the name it reads
    that nothing binds, and the keyword that would bind it (``how`` names the call)."""
    import traceback

    name = getattr(error, "name", None)
    frames = traceback.extract_tb(error.__traceback__)
    user = [f for f in frames if not f.filename.startswith(_PACKAGE_DIRS)]
    if name is None or not user:
        return error
    frame = user[-1]
    loc = Loc(frame.filename, frame.lineno, (frame.colno or 0) + 1 if frame.colno is not None else 0)
    return user_error(
        f"name '{name}' is not defined: the kernel reads it, but nothing binds it",
        loc=loc,
        help=f"pass its value when compiling: {how.format(name=name)}, or define it "
        "before the kernel",
    )


def bind(prim_func: PrimFunc, params: dict) -> tuple:
    """A copy of the function whose free names read ``params``, and its parameter annotations.

    Annotations that name a rebound value are re-evaluated from their source text.
    """
    func = prim_func.func
    code = func.__code__
    annotations = {k: v for k, v in func.__annotations__.items() if k != "return"}
    # the kernel body with Python control flow on traced values rewritten (tilers/_rewrite.py)
    from . import _rewrite

    rewritten = _rewrite.prim_func_code(func)
    # A plain str annotation comes from `from __future__ import annotations` (a DType is a
    # str subclass and is already evaluated).
    if not params and not any(type(v) is str for v in annotations.values()) and rewritten is None:
        return func, annotations

    syntax = function_syntax(func)
    annotation_names: dict[str, set] = {}
    if syntax is not None:
        import ast

        source, definition = syntax
        args = definition.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            if arg.annotation is not None:
                names = {n.id for n in ast.walk(arg.annotation) if isinstance(n, ast.Name)}
                text = ast.get_source_segment(source, arg.annotation)
                annotation_names[arg.arg] = (names, text)

    if params and syntax is not None:
        read = code_names(code)
        for names, _ in annotation_names.values():
            read |= names
        for name in params:
            if name not in read:
                shown = sorted((n for n in read if _is_plain_value(n, func)), key=str.lower)
                error = TileError(
                    f"compile() got parameter '{name}' which {func.__name__} "
                    f"does not use; it reads: {', '.join(shown) or 'nothing'}"
                )
                raise add_call_site(
                    error, "pass only names the function reads (a misspelled name?)"
                )

    namespace = dict(func.__globals__, **params) if params else func.__globals__
    cells = dict(zip(code.co_freevars, func.__closure__ or ()))
    run_code = rewritten if rewritten is not None else code
    closure = tuple(
        types.CellType(_rewrite.Flow) if n == _rewrite.HELPER
        else types.CellType(params[n]) if n in params else cells[n]
        for n in run_code.co_freevars
    )
    bound = types.FunctionType(run_code, namespace, func.__name__, func.__defaults__, closure or None)
    bound.__kwdefaults__ = func.__kwdefaults__
    local_values = {}
    for name, cell in cells.items():
        if name in params:
            local_values[name] = params[name]
            continue
        try:
            local_values[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass

    for arg, value in list(annotations.items()):
        text = value if type(value) is str else None
        if text is None and arg in annotation_names:
            names, segment = annotation_names[arg]
            if names & params.keys():
                text = segment
        if text is None:
            continue
        try:
            annotations[arg] = eval(text, namespace, local_values)
        except Exception as err:  # noqa: BLE001 - any failure of user code is reported
            raise user_error(
                f"the annotation of parameter '{arg}' could not be evaluated: {err}",
                loc=param_loc(func, arg),
                help="pass the names it uses to tilers.compile",
            ) from None
    return bound, annotations


def function_syntax(func):
    """(source, ast.FunctionDef) of ``func``, or None when its source is not available."""
    import ast
    import inspect
    import textwrap

    try:
        source = textwrap.dedent(inspect.getsource(func))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    for item in ast.walk(tree):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == func.__name__:
            return source, item
    return None


def code_names(code) -> set:
    """The global and closure names a code object (and the code nested in it) reads."""
    import dis

    names = set(code.co_freevars)
    pending = [code]
    while pending:
        current = pending.pop()
        for instruction in dis.get_instructions(current):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names.add(instruction.argval)
        pending.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return names


def _is_plain_value(name: str, func) -> bool:
    """Whether ``name`` looks like a compile parameter (a value, not a module or function)."""
    if name in func.__code__.co_freevars:
        index = func.__code__.co_freevars.index(name)
        try:
            value = func.__closure__[index].cell_contents
        except ValueError:
            return True
    elif name in func.__globals__:
        value = func.__globals__[name]
    else:
        import builtins

        return not hasattr(builtins, name)
    return not (isinstance(value, (types.ModuleType, type, PrimFunc)) or callable(value))


def def_loc(func) -> Loc:
    """The location of the ``def`` line (co_firstlineno is the first decorator's line)."""
    code = func.__code__
    pattern = re.compile(r"^(\s*)(?:async\s+)?def\s+" + re.escape(func.__name__) + r"\b")
    for line in range(code.co_firstlineno, code.co_firstlineno + 50):
        text = linecache.getline(code.co_filename, line)
        match = pattern.match(text)
        if match:
            return Loc(code.co_filename, line, len(match.group(1)) + 1)
        if not text:
            break
    return Loc(code.co_filename, code.co_firstlineno, 0)


def param_loc(func, name: str) -> Loc:
    """The location of parameter ``name`` in the def header (the def line if not found)."""
    start = def_loc(func)
    pattern = re.compile(r"\b" + re.escape(name) + r"\s*(?::(?!:)|[,)=])")
    for line in range(start.line, start.line + 30):
        text = linecache.getline(start.file, line)
        match = pattern.search(text, start.column if line == start.line else 0)
        if match:
            return Loc(start.file, line, match.start() + 1)
        if not text or text.rstrip().endswith(":"):
            break
    return start


def declare_params(builder: Builder, func, annotations: dict) -> list:
    """A buffer per tensor parameter and a variable per scalar one; the proxies to call with."""
    code = func.__code__
    if code.co_flags & (0x04 | 0x08):  # *args, **kwargs
        raise user_error(
            "a prim_func cannot take *args or **kwargs",
            loc=def_loc(func),
            help="list every tensor and scalar parameter by name",
        )
    names = code.co_varnames[: code.co_argcount]
    if code.co_kwonlyargcount:
        raise user_error(
            "a prim_func cannot have keyword-only parameters",
            loc=def_loc(func),
            help="make them ordinary parameters (remove the `*`)",
        )
    args = []
    for name in names:
        loc = param_loc(func, name)
        annotation = annotations.get(name)
        if isinstance(annotation, TensorType):
            shape = _tensor_shape(name, annotation.shape, loc)
            for d in shape:
                if isinstance(d, Size):
                    builder.size_var(d)  # sizes are numbered in the order parameters carry them
            try:
                dtype = normalize_dtype(annotation.dtype)
            except TileError:
                raise user_error(
                    f"parameter '{name}' has unknown dtype {annotation.dtype!r}"
                    if not is_reserved(annotation.dtype) else
                    f"parameter '{name}': " + _reserved_message(annotation.dtype)[0],
                    loc=loc,
                    help="use one of: " + ", ".join(DTYPES),
                ) from None
            buffer = builder.new_buffer(name, "global", dtype, shape, loc)
            builder.params.append({"kind": "tensor", "name": name, "buffer": buffer.id})
            args.append(buffer)
        elif annotation is not None and _is_dtype(annotation):
            var = builder.new_var(name, "param", normalize_dtype(annotation))
            builder.params.append({"kind": "scalar", "name": name, "var": var.node()["id"]})
            args.append(var)
        elif isinstance(annotation, TileAnnotation):
            raise user_error(
                f"parameter '{name}': T.{annotation.kind} annotates a T.macro helper's tile; a kernel's "
                "parameters are global tensors or scalars",
                loc=loc,
                help=f'use `{name}: T.Tensor(shape, dtype)` and copy it into a tile inside the kernel',
            )
        else:
            raise user_error(
                f"parameter '{name}' needs an annotation",
                loc=loc,
                help=f'annotate it: `{name}: T.Tensor((M, N), "float16")` for '
                f"a tensor or `{name}: T.int32` for a scalar",
            )
    return args


def _is_dtype(annotation) -> bool:
    if annotation in (int, float, bool):
        return True
    text = str(annotation)
    text = text.removeprefix("torch.")
    return _DTYPE_ALIASES.get(text, text) in DTYPES


def _tensor_shape(name: str, shape, loc: Loc) -> tuple:
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    for d in dims:
        if isinstance(d, Expr) and not isinstance(d, Size):
            raise user_error(
                f"dimension {list(dims).index(d)} of parameter '{name}' is an expression of "
                "kernel values; a tensor dimension is an int or a T.dynamic size",
                loc=loc,
                help='declare the dimension itself as a size: M2 = T.dynamic("M2"), and '
                "use M2 where the kernel needs it",
            )
    ok = all(
        isinstance(d, Size)
        or (hasattr(d, "__index__") and not isinstance(d, bool) and d.__index__() > 0)
        for d in dims
    )
    if not ok or not dims:
        raise user_error(
            f"the shape of parameter '{name}' must be positive integers or T.dynamic sizes "
            f"after binding, got {tuple(dims)!r}",
            loc=loc,
            help="pass the sizes to tilers.compile, e.g. tilers.compile(func, M=1024, N=1024), "
            'or declare a symbolic one: M = T.dynamic("M")',
        )
    return tuple(d if isinstance(d, Size) else d.__index__() for d in dims)


# ---------------------------------------------------------------------------------------
# serialization
# ---------------------------------------------------------------------------------------


def program_json(program: dict) -> str:
    """The program as compact JSON (docs/format.md), however deeply it nests.

    ``json.dumps`` recurses once per level and stops at Python's recursion limit, which an
    unrolled sum of a few thousand terms or a few hundred nested ``T.If`` reach; then the
    same text is written without recursion (the output is identical, so caches agree)."""
    try:
        return json.dumps(program, separators=(",", ":"))
    except RecursionError:
        return _deep_json(program)


def _deep_json(value) -> str:
    """`json.dumps(value, separators=(",", ":"))` with an explicit stack instead of recursion."""
    out = []
    # each frame: (iterator over items, is_dict); a finished container pops its frame
    stack = []

    def open_value(v):
        if isinstance(v, dict):
            out.append("{")
            stack.append((iter(v.items()), True, [True]))
        elif isinstance(v, (list, tuple)):
            out.append("[")
            stack.append((iter(v), False, [True]))
        else:
            out.append(json.dumps(v))

    open_value(value)
    while stack:
        items, is_dict, first = stack[-1]
        item = next(items, _END)
        if item is _END:
            stack.pop()
            out.append("}" if is_dict else "]")
            continue
        if not first[0]:
            out.append(",")
        first[0] = False
        if is_dict:
            key, item = item
            out.append(json.dumps(str(key)) + ":")
        open_value(item)
    return "".join(out)


_END = object()
