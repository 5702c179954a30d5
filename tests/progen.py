"""The random tile-program generator: small valid tilers kernels with float64 numpy references.

``generate(seed, size)`` returns a :class:`Case`: the kernel as Python source text (written to
a file and imported, so tracing records real file/line locations), input makers, and a
reference that mirrors the semantics of docs/architecture.md ("Semantics as implemented").

Program families (chosen by the seed):

* ``elementwise`` — random expression trees (depth <= 4) over 1–3 inputs of random dtypes
  (float16, bfloat16, float32, int8, int32, uint8; full, row- or column-broadcast,
  transposed, shifted), written as a ``T.Parallel`` loop on global memory or through
  fragment/shared tiles (``T.copy`` with offsets, slices and pads), optionally inside a
  ``T.serial``/``T.unroll``/``T.Pipelined`` loop over column tiles, with ``T.fill`` +
  ``+=`` accumulation or ``T.If``/``T.Else`` stores.
* ``copy`` — offset copies with ragged edges and ``pad=`` values through chains of shared and
  fragment buffers (every copy converts dtypes), patches of a filled shared tile, and
  row/column copies with index dimensions.
* ``reduce`` — ``T.reduce_{sum,max,min,absmax}`` over dim 0 or 1 of a fragment loaded from a
  ragged tensor with neutral pads, ``clear=True`` on one tile or ``clear=False``
  accumulating over a loop of tiles, then copied out or post-processed element-wise
  (optionally with the 2-D tile normalized by the reduced values).

The reference computes every value in float64/int64, rounding through the storage dtype at
every typed step exactly as the kernel does (fp16/bf16 ops computed in float32 and rounded
after each op; integers wrap; float -> int truncates and saturates, NaN -> 0). Alongside each
value it carries a per-element bound on how far a correct kernel may be from it: zero for
everything emulated exactly (all integer programs, + - * / sqrt, casts, max/min, copies),
a few float32 ulps for the math functions (exp, tanh, ...) and summation order, propagated
through later operations (conditions that may flip inside the bound widen the bound; the
rare element whose bound becomes infinite is skipped and counted). With ``gpu=True`` the
bound also allows the float32 multiply-add contraction NVRTC performs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import math
import os
import random
import sys
import tempfile

import ml_dtypes
import numpy as np

# ----------------------------------------------------------------------------------------
# dtypes

BF16 = np.dtype(ml_dtypes.bfloat16)
NP_DTYPES = {
    "float16": np.dtype(np.float16),
    "bfloat16": BF16,
    "float32": np.dtype(np.float32),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
FLOATS = ("float16", "bfloat16", "float32")
INTS = ("int8", "int32", "uint8")
DTYPES = FLOATS + INTS
INT_BITS = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32, "uint32": 32, "int64": 64}
INT_RANGE = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
MANTISSA = {"float16": 10, "bfloat16": 7, "float32": 23}
TINY = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149}
FMAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}
SHORT = {
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "int8": "i8",
    "int32": "i32",
    "uint8": "u8",
    "bool": "bool",
}

# the static range every generated value stays within (so that nothing overflows by accident:
# int32 arithmetic is C arithmetic, float16 overflows at 65504)
INT_LIMIT = 2**24
FLOAT_LIMIT = 30000.0
# the error of a float32 math function (exp, tanh, ...) of CUDA or of the interpreter, as a
# relative part of the result plus an absolute part
FN_REL = 2.0**-19
FN_ABS = 2.0**-21
U32 = 2.0**-24  # float32 unit roundoff


def is_float(dt):
    return dt in FLOAT_RANK


def is_int(dt):
    return dt in INT_BITS


def fits(value, dt):
    lo, hi = INT_RANGE[dt]
    return lo <= value <= hi


def promote(a, b):
    """The frontend's promotion rule (tilers/_trace.py `promote`, restated from its docstring)."""
    a = "int32" if a == "bool" else a
    b = "int32" if b == "bool" else b
    if a == b:
        return a
    if is_float(a) and is_float(b):
        if FLOAT_RANK[a] == FLOAT_RANK[b]:
            return "float32"
        return a if FLOAT_RANK[a] > FLOAT_RANK[b] else b
    if is_float(a):
        return a
    if is_float(b):
        return b
    if INT_BITS[a] != INT_BITS[b]:
        return a if INT_BITS[a] > INT_BITS[b] else b
    return a if not a.startswith("u") else b


def literal_dtype(value, like):
    """The dtype a Python number takes next to an operand of dtype `like` (tilers `literal`)."""
    if isinstance(value, int):
        if like is not None and is_float(like):
            return like
        if like is not None and is_int(like) and fits(value, like):
            return like
        return "int32" if fits(value, "int32") else "int64"
    return like if like is not None and is_float(like) else "float32"


# ----------------------------------------------------------------------------------------
# emulated arithmetic on (value, bound) pairs


class Val:
    """Values of one dtype (float64 array for floats, int64 for ints, bool for bool) and a
    float64 array bounding |kernel - value| (for bool: True where the value may flip)."""

    __slots__ = ("v", "e", "dt")

    def __init__(self, v, e, dt):
        self.v, self.e, self.dt = v, e, dt


def rnd(x, dt):
    """Round float64 values to a float dtype the way the kernel does (float32 first)."""
    with np.errstate(all="ignore"):
        f = np.asarray(x, dtype=np.float64).astype(np.float32)
        if dt == "float16":
            f = f.astype(np.float16)
        elif dt == "bfloat16":
            f = f.astype(BF16)
        return f.astype(np.float64)


def wrap(x, dt):
    """Integers wrapped to dt (two's complement)."""
    return np.asarray(x, dtype=np.int64).astype(NP_DTYPES[dt]).astype(np.int64)


def ulp(mag, dt):
    """A bound on the spacing of dt near magnitude `mag` (0 for integers)."""
    if not is_float(dt):
        return np.zeros_like(np.asarray(mag, dtype=np.float64))
    return 2.0 ** -MANTISSA[dt] * np.abs(mag) + TINY[dt]


def finish(v, e, dt):
    """Normalize a bound: NaN or a non-finite value with any slack means 'unknown'."""
    if dt == "bool":
        return Val(v, e, dt)
    e = np.where(np.isnan(e), np.inf, e)
    if is_float(dt):
        with np.errstate(invalid="ignore"):
            unknown = (e > 0) & (~np.isfinite(v) | (np.abs(v) + e > FMAX[dt]))
        e = np.where(unknown, np.inf, e)
    return Val(v, e, dt)


def const_val(value, dt, shape):
    if is_float(dt):
        v = rnd(np.full(shape, float(value)), dt)
    else:
        # T.fill(u8_buf, -3) converts at run time: integers wrap
        v = wrap(np.full(shape, int(value), dtype=np.int64), dt)
    return Val(v, np.zeros(shape), dt)


def cast_val(x: Val, dt):
    """T.cast(x, dt) / the implicit casts of promotion, stores and copies."""
    src = x.dt
    if src == dt:
        return x
    if src == "bool":
        v = x.v.astype(np.int64)
        e = x.e.astype(np.float64)
        if is_float(dt):
            return finish(v.astype(np.float64), e, dt)
        return finish(v, e, dt)
    if is_float(src) and is_float(dt):
        v = rnd(x.v, dt)
        e = np.where(x.e > 0, x.e + ulp(np.abs(x.v) + x.e, dt), 0.0)
        return finish(v, e, dt)
    if is_int(src) and is_float(dt):
        v = rnd(x.v.astype(np.float64), dt)
        e = np.where(x.e > 0, x.e + ulp(np.abs(x.v) + x.e, dt), 0.0)
        return finish(v, e, dt)
    if is_float(src) and is_int(dt):
        lo, hi = INT_RANGE[dt]

        def conv(f):
            with np.errstate(invalid="ignore"):
                t = np.trunc(f)
                t = np.where(np.isnan(t), 0.0, t)
                return np.clip(t, lo, hi).astype(np.int64)

        v = conv(x.v)
        with np.errstate(invalid="ignore"):
            e = np.maximum(
                np.abs(conv(x.v + x.e) - v).astype(np.float64),
                np.abs(conv(x.v - x.e) - v).astype(np.float64),
            )
        e = np.where(x.e > 0, e, 0.0)
        e = np.where(np.isinf(x.e) | (np.isnan(x.v) & (x.e > 0)), np.inf, e)
        return finish(v, e, dt)
    # int -> int
    return finish(wrap(x.v, dt), int_slack(x.v, x.e, dt), dt)


class Ctx:
    """Evaluation options: `gpu` widens float32 bounds for FMA contraction."""

    def __init__(self, gpu=False):
        self.gpu = gpu


def arith(op, a: Val, b: Val, dt, ctx: Ctx):
    """`a op b` with both operands already of dtype dt."""
    if is_float(dt):
        va, vb, ea, eb = a.v, b.v, a.e, b.e
        with np.errstate(all="ignore"):
            if op == "add":
                exact, e0 = va + vb, ea + eb
            elif op == "sub":
                exact, e0 = va - vb, ea + eb
            elif op == "mul":
                exact, e0 = va * vb, np.abs(va) * eb + np.abs(vb) * ea + ea * eb
            elif op == "div":
                exact = va / vb
                margin = np.abs(vb) - eb
                e0 = np.where(
                    (eb > 0) | (ea > 0),
                    np.where(margin > 0, (ea + np.abs(exact) * eb) / margin, np.inf),
                    0.0,
                )
            elif op in ("max", "min"):
                f = np.fmax if op == "max" else np.fmin
                return finish(f(va, vb), np.maximum(ea, eb), dt)
            else:
                raise ValueError(op)
            v = rnd(exact, dt)
            e = np.where(e0 > 0, e0 + ulp(np.abs(exact) + e0, dt), 0.0)
            if ctx.gpu and dt == "float32" and op in ("add", "sub"):
                # x * y + z may be contracted into one fma: the product is not rounded
                e = e + U32 * (np.abs(va) + np.abs(vb)) + ulp(np.abs(exact), dt)
        return finish(v, e, dt)
    # integers
    va, vb = a.v, b.v
    if op == "add":
        raw = va + vb
    elif op == "sub":
        raw = va - vb
    elif op == "mul":
        raw = va * vb
    elif op == "max":
        raw = np.maximum(va, vb)
    elif op == "min":
        raw = np.minimum(va, vb)
    elif op == "floordiv":
        raw = np.floor_divide(va, vb)
    elif op == "floormod":
        raw = np.mod(va, vb)
    elif op == "bitand":
        raw = va & vb
    elif op == "bitor":
        raw = va | vb
    elif op == "bitxor":
        raw = va ^ vb
    else:
        raise ValueError(op)
    v = wrap(raw, dt)
    noisy = (a.e > 0) | (b.e > 0)
    if op in ("max", "min"):
        e = np.maximum(a.e, b.e)
    elif op in ("add", "sub"):
        e = int_slack(raw, a.e + b.e, dt)
    elif op == "mul":
        e = int_slack(raw, np.abs(va) * b.e + np.abs(vb) * a.e + a.e * b.e, dt)
    else:
        e = np.where(noisy, np.inf, 0.0)
    return finish(v, e, dt)


def int_slack(raw, e, dt):
    """The bound of an integer result: unknown where a nearby value could wrap."""
    lo, hi = INT_RANGE[dt]
    with np.errstate(invalid="ignore"):
        safe = (raw - e >= lo) & (raw + e <= hi)
    return np.where(e > 0, np.where(safe, e, np.inf), 0.0)


def compare(op, a: Val, b: Val):
    va, vb = a.v, b.v
    with np.errstate(invalid="ignore"):
        v = {
            "lt": np.less,
            "le": np.less_equal,
            "gt": np.greater,
            "ge": np.greater_equal,
            "eq": np.equal,
            "ne": np.not_equal,
        }[op](va, vb)
        slack = a.e + b.e
        unsure = (slack > 0) & ~(np.abs(va.astype(np.float64) - vb.astype(np.float64)) > slack)
    return Val(v, unsure, "bool")


def select(c: Val, a: Val, b: Val, dt):
    v = np.where(c.v, a.v, b.v)
    e = np.where(c.v, a.e, b.e)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a.v.astype(np.float64) - b.v.astype(np.float64))
        alt = np.maximum(np.where(c.v, a.e, b.e), np.where(c.v, b.e, a.e) + diff)
    e = np.where(c.e, alt, e)
    return finish(v, e, dt)


# math functions: (numpy function, Lipschitz bound of the function near v given slack e)
def _lip_exp(v, e):
    return np.exp(np.minimum(v + e, 700.0))


MATH = {
    "exp": (np.exp, _lip_exp),
    "exp2": (np.exp2, lambda v, e: math.log(2) * np.exp2(np.minimum(v + e, 1000.0))),
    "log": (np.log, lambda v, e: 1.0 / np.maximum(v - e, 1e-300)),
    "log2": (np.log2, lambda v, e: 1.0 / math.log(2) / np.maximum(v - e, 1e-300)),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), lambda v, e: 0.5 * np.maximum(v - e, 1e-300) ** -1.5),
    "tanh": (np.tanh, lambda v, e: 1.0),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), lambda v, e: 0.25),
    "erf": (None, lambda v, e: 1.1284),
    "sin": (np.sin, lambda v, e: 1.0),
    "cos": (np.cos, lambda v, e: 1.0),
}


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def unary(op, a: Val, dt):
    """A one-operand op computed in dt (the operand already has dtype dt)."""
    va, ea = a.v, a.e
    if op == "neg":
        if is_float(dt):
            return finish(-va, ea, dt)
        return finish(wrap(-va, dt), int_slack(-va, ea, dt), dt)
    if op == "abs":
        if is_float(dt):
            return finish(np.abs(va), ea, dt)
        return finish(wrap(np.abs(va), dt), int_slack(np.abs(va), ea, dt), dt)
    if op in ("floor", "ceil"):
        f = np.floor if op == "floor" else np.ceil
        with np.errstate(invalid="ignore"):
            v = f(va)
            e = np.where(ea > 0, np.maximum(np.abs(f(va + ea) - v), np.abs(f(va - ea) - v)), 0.0)
        return finish(v, e, dt)
    if op == "sqrt":
        with np.errstate(all="ignore"):
            exact = np.sqrt(va)
            v = rnd(exact, dt)
            prop = np.minimum(np.sqrt(ea), ea / (2.0 * np.sqrt(np.maximum(va - ea, 0.0))))
            e = np.where(ea > 0, prop + ulp(exact + prop, dt), 0.0)
        return finish(v, e, dt)
    fn, lip = MATH[op]
    with np.errstate(all="ignore"):
        exact = _erf(va) if op == "erf" else fn(va)
        v = rnd(exact, dt)
        prop = np.where(ea > 0, lip(va, ea) * ea, 0.0)
        err = prop + FN_REL * np.abs(exact) + FN_ABS * (np.abs(exact) + prop + 1e-30 > 0)
        if op in ("tanh", "erf", "sigmoid", "exp", "exp2"):
            err = prop + FN_REL * np.abs(exact) + TINY["float32"]
        e = err + ulp(np.abs(exact) + err, dt)
    return finish(v, e, dt)


# ----------------------------------------------------------------------------------------
# expression trees

ARITH = (
    "add",
    "sub",
    "mul",
    "div",
    "max",
    "min",
    "floordiv",
    "floormod",
    "bitand",
    "bitor",
    "bitxor",
)
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
SYMBOL = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "floormod": "%",
    "bitand": "&",
    "bitor": "|",
    "bitxor": "^",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
}
FLOAT_ONLY = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos")


class Node:
    """A typed expression; `lo`/`hi` bound its values (static range analysis)."""

    __slots__ = ("op", "dt", "kids", "value", "text", "key", "lo", "hi", "style")

    def __init__(
        self, op, dt, kids=(), value=None, text=None, key=None, lo=0.0, hi=0.0, style=None
    ):
        self.op, self.dt, self.kids = op, dt, list(kids)
        self.value, self.text, self.key = value, text, key
        self.lo, self.hi, self.style = lo, hi, style

    # -- rendering -----------------------------------------------------------------------
    def render(self) -> str:
        op, k = self.op, self.kids
        if op in ("leaf",):
            return self.text
        if op == "const":
            return repr(self.value)
        if op == "cast":
            if self.style == "implicit":
                return k[0].render()
            if self.style == "ctor":
                return f"T.{self.dt}({k[0].render()})"
            return f'T.cast({k[0].render()}, "{self.dt}")'
        if op in ("max", "min"):
            return f"T.{op}({k[0].render()}, {k[1].render()})"
        if op in SYMBOL:
            return f"({k[0].render()} {SYMBOL[op]} {k[1].render()})"
        if op == "select":
            return f"T.if_then_else({k[0].render()}, {k[1].render()}, {k[2].render()})"
        if op == "neg":
            return f"(-{k[0].render()})"
        if op == "abs" and self.style == "builtin":
            return f"abs({k[0].render()})"
        return f"T.{op}({k[0].render()})"

    def size(self):
        return 1 + sum(c.size() for c in self.kids)

    # -- evaluation ----------------------------------------------------------------------
    def eval(self, env, ctx, shape) -> Val:
        op = self.op
        if op == "leaf":
            return env[self.key]
        if op == "const":
            return const_val(self.value, self.dt, shape)
        if op == "cast":
            return cast_val(self.kids[0].eval(env, ctx, shape), self.dt)
        if op in ARITH:
            a, b = (kid.eval(env, ctx, shape) for kid in self.kids)
            return arith(op, cast_val(a, self.dt), cast_val(b, self.dt), self.dt, ctx)
        if op in COMPARE:
            a, b = (kid.eval(env, ctx, shape) for kid in self.kids)
            p = a.dt if a.dt == b.dt else promote(a.dt, b.dt)
            return compare(op, cast_val(a, p), cast_val(b, p))
        if op == "select":
            c, a, b = (kid.eval(env, ctx, shape) for kid in self.kids)
            return select(c, cast_val(a, self.dt), cast_val(b, self.dt), self.dt)
        a = self.kids[0].eval(env, ctx, shape)
        return unary(op, cast_val(a, self.dt), self.dt)


def leaf(key, dt, text, lo, hi):
    return Node("leaf", dt, key=key, text=text, lo=lo, hi=hi)


def clamp_range(lo, hi, dt):
    """The range after storing into dt (integers wrap to their whole range when they leave it)."""
    if is_int(dt):
        rlo, rhi = INT_RANGE[dt]
        if lo < rlo or hi > rhi:
            return float(rlo), float(rhi)
    return lo, hi


def cast_range(lo, hi, src, dt):
    if src == "bool":
        return 0.0, 1.0
    if is_float(src) and is_int(dt):
        rlo, rhi = INT_RANGE[dt]
        return float(max(rlo, min(rhi, math.trunc(lo)))), float(max(rlo, min(rhi, math.trunc(hi))))
    return clamp_range(lo, hi, dt)


def in_limits(lo, hi, dt):
    if dt == "bool":
        return True
    if any(math.isnan(x) or math.isinf(x) for x in (lo, hi)):
        return False
    limit = FLOAT_LIMIT if is_float(dt) else INT_LIMIT
    return -limit <= lo and hi <= limit


def mk_cast(x: Node, dt, style="explicit"):
    if x.dt == dt and style == "implicit":
        return x
    lo, hi = cast_range(x.lo, x.hi, x.dt, dt)
    return Node("cast", dt, [x], lo=lo, hi=hi, style=style)


def mk_const(value, like):
    dt = literal_dtype(value, like)
    return Node("const", dt, value=value, lo=float(value), hi=float(value))


def mk_binary(op, a: Node, b: Node):
    """`a op b` typed as the frontend types it; None when invalid or out of range."""
    if a.op == "const" and b.op == "const":
        return None
    if a.op == "const":
        a = mk_const(a.value, b.dt)
    if b.op == "const":
        b = mk_const(b.value, a.dt)
    if op in COMPARE:
        return Node(op, "bool", [a, b], lo=0.0, hi=1.0)
    dt = promote(a.dt, b.dt)
    if op == "div" and not is_float(dt):
        return None
    if op in ("bitand", "bitor", "bitxor") and not is_int(dt):
        return None
    if op in ("floordiv", "floormod") and (not is_int(dt) or b.op != "const" or b.value == 0):
        return None
    alo, ahi = cast_range(a.lo, a.hi, a.dt, dt)
    blo, bhi = cast_range(b.lo, b.hi, b.dt, dt)
    if op == "add":
        lo, hi = alo + blo, ahi + bhi
    elif op == "sub":
        lo, hi = alo - bhi, ahi - blo
    elif op == "mul":
        c = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        lo, hi = min(c), max(c)
    elif op == "div":
        m = max(abs(alo), abs(ahi)) / max(min(abs(blo), abs(bhi)) if blo * bhi > 0 else 1.0, 1.0)
        if not (blo >= 1.0 or bhi <= -1.0):
            return None
        lo, hi = -m, m
    elif op == "max":
        lo, hi = max(alo, blo), max(ahi, bhi)
    elif op == "min":
        lo, hi = min(alo, blo), min(ahi, bhi)
    elif op == "floordiv":
        c = (alo // b.value, ahi // b.value)
        lo, hi = float(min(c)), float(max(c))
    elif op == "floormod":
        lo, hi = (0.0, abs(b.value) - 1.0) if b.value > 0 else (-abs(b.value) + 1.0, 0.0)
    else:  # bit ops
        m = max(abs(alo), abs(ahi), abs(blo), abs(bhi), 1.0)
        bits = math.ceil(math.log2(m + 1)) + 1
        lo, hi = (0.0, 2.0**bits) if min(alo, blo) >= 0 else (-(2.0**bits), 2.0**bits)
    lo, hi = clamp_range(lo, hi, dt)
    if not in_limits(lo, hi, dt):
        return None
    return Node(op, dt, [a, b], lo=lo, hi=hi)


def mk_unary(op, a: Node, style=None):
    x = a
    if op in FLOAT_ONLY and not is_float(x.dt):
        x = mk_cast(x, "float32", style="implicit")
        x.style = "implicit"
    if op in ("floor", "ceil") and not is_float(x.dt):
        return a  # the frontend returns integers unchanged
    if x.dt == "bool":
        return None
    dt = x.dt
    lo, hi = x.lo, x.hi
    if op == "neg":
        lo, hi = -hi, -lo
    elif op == "abs":
        lo, hi = (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    elif op in ("floor", "ceil"):
        lo, hi = math.floor(lo), math.ceil(hi)
    elif op == "exp":
        lo, hi = math.exp(min(lo, 80)), math.exp(min(hi, 80))
    elif op == "exp2":
        lo, hi = 2.0 ** min(lo, 120), 2.0 ** min(hi, 120)
    elif op in ("log", "log2"):
        if lo < 1.0:
            return None
        f = math.log if op == "log" else math.log2
        lo, hi = f(lo), f(hi)
    elif op == "sqrt":
        if lo < 0:
            return None
        lo, hi = math.sqrt(lo), math.sqrt(hi)
    elif op == "rsqrt":
        if lo < 1.0:
            return None
        lo, hi = 1.0 / math.sqrt(hi), 1.0 / math.sqrt(lo)
    elif op in ("tanh", "erf", "sin", "cos"):
        lo, hi = -1.0, 1.0
    elif op == "sigmoid":
        lo, hi = 0.0, 1.0
    lo, hi = clamp_range(lo, hi, dt)
    if not in_limits(lo, hi, dt):
        return None
    return Node(op, dt, [x], lo=lo, hi=hi, style=style)


def mk_select(c: Node, a: Node, b: Node):
    if a.op == "const" and b.op == "const":
        return None
    if a.op == "const":
        a = mk_const(a.value, b.dt)
    if b.op == "const":
        b = mk_const(b.value, a.dt)
    dt = a.dt if a.dt == b.dt else promote(a.dt, b.dt)
    alo, ahi = cast_range(a.lo, a.hi, a.dt, dt)
    blo, bhi = cast_range(b.lo, b.hi, b.dt, dt)
    return Node("select", dt, [c, a, b], lo=min(alo, blo), hi=max(ahi, bhi))


class ExprGen:
    """Random well-typed expressions over a list of leaves."""

    def __init__(self, r: random.Random, leaves, max_depth=4):
        self.r = r
        self.leaves = leaves
        self.max_depth = max_depth

    def const_for(self, like):
        r = self.r
        if is_float(like) and r.random() < 0.8:
            return r.choice([0.5, 1.5, 2.0, -1.0, 0.25, -0.75, 3.0, 0.125, -2.5, 1.0, 4.0])
        return r.choice([1, 2, 3, -1, -3, 5, 7, 100, -100, 0])

    def leaf(self):
        # index leaves (row/col numbers) are picked less often than the inputs
        weights = [1 if n.key in ("row", "col") else 4 for n in self.leaves]
        return self.r.choices(self.leaves, weights=weights)[0]

    def gen(self, depth):
        r = self.r
        if depth <= 0 or r.random() < 0.2:
            return self.leaf()
        for _ in range(6):
            node = self.try_gen(depth)
            if node is not None:
                return node
        return self.leaf()

    def operand(self, depth, other=None):
        if other is not None and self.r.random() < 0.3:
            return mk_const(self.const_for(other.dt), other.dt)
        return self.gen(depth - 1)

    def try_gen(self, depth):
        r = self.r
        kind = r.choices(
            ["arith", "math", "minmax", "select", "cast", "negabs", "intop", "cmpcast"],
            weights=[30, 16, 10, 10, 10, 6, 6, 3],
        )[0]
        if kind == "arith":
            a = self.gen(depth - 1)
            op = r.choice(["add", "sub", "mul", "add", "sub", "mul", "div"])
            if op == "div":
                den = self.gen(depth - 2) if depth >= 2 else self.leaf()
                absd = mk_unary("abs", den, style=r.choice([None, "builtin"]))
                if absd is None:
                    return None
                one = mk_binary("add", absd, mk_const(1.0, absd.dt))
                if one is None:
                    return None
                return mk_binary("div", a, one)
            b = self.operand(depth, a)
            return mk_binary(op, a, b) if r.random() < 0.7 else mk_binary(op, b, a)
        if kind == "minmax":
            a = self.gen(depth - 1)
            b = self.operand(depth, a)
            return mk_binary(r.choice(["max", "min"]), a, b)
        if kind == "math":
            a = self.gen(depth - 1)
            fn = r.choice(
                [
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
                    "floor",
                    "ceil",
                    "exp",
                    "log",
                    "sqrt",
                    "tanh",
                    "sigmoid",
                ]
            )
            if fn in ("exp", "exp2"):
                x = mk_binary("min", a, mk_const(r.choice([4.0, 10.0, 2.5]), a.dt))
                if x is None:
                    return None
                return mk_unary(fn, x)
            if fn in ("log", "log2", "rsqrt"):
                x = mk_unary("abs", a)
                if x is None:
                    return None
                x = mk_binary("add", x, mk_const(1.0, x.dt))
                return None if x is None else mk_unary(fn, x)
            if fn == "sqrt":
                x = mk_unary("abs", a)
                return None if x is None else mk_unary(fn, x)
            if fn in ("sin", "cos") and max(abs(a.lo), abs(a.hi)) > 1000:
                return None
            return mk_unary(fn, a)
        if kind == "select":
            x = self.gen(depth - 1)
            y = self.operand(depth, x)
            c = self.condition(depth)
            if c is None:
                return None
            return mk_select(c, x, y) if r.random() < 0.5 else mk_select(c, y, x)
        if kind == "cast":
            a = self.gen(depth - 1)
            dt = r.choice(DTYPES)
            if dt == a.dt:
                return None
            node = mk_cast(a, dt, style="ctor" if r.random() < 0.15 else "explicit")
            return node if in_limits(node.lo, node.hi, dt) else None
        if kind == "negabs":
            a = self.gen(depth - 1)
            if r.random() < 0.5:
                return mk_unary("neg", a)
            return mk_unary("abs", a, style=r.choice([None, "builtin"]))
        if kind == "intop":
            a = self.gen(depth - 1)
            if not is_int(a.dt):
                return None
            op = r.choice(["floordiv", "floormod", "bitand", "bitor", "bitxor"])
            if op in ("floordiv", "floormod"):
                return mk_binary(op, a, mk_const(r.choice([2, 3, 4, 7, -2, -3, 16]), a.dt))
            b = (
                self.gen(depth - 1)
                if r.random() < 0.5
                else mk_const(r.choice([1, 3, 15, 85, -8]), a.dt)
            )
            return mk_binary(op, a, b)
        if kind == "cmpcast":
            c = self.condition(depth)
            if c is None:
                return None
            return mk_cast(c, r.choice(DTYPES))
        return None

    def condition(self, depth):
        r = self.r
        a = self.gen(depth - 2) if depth >= 2 else self.leaf()
        b = (
            self.gen(depth - 2)
            if depth >= 2 and r.random() < 0.5
            else mk_const(self.const_for(a.dt), a.dt)
        )
        op = r.choice(["lt", "le", "gt", "ge", "eq", "ne", "lt", "gt"])
        return mk_binary(op, a, b) if r.random() < 0.8 else mk_binary(op, b, a)


# ----------------------------------------------------------------------------------------
# inputs


@dataclasses.dataclass
class Param:
    name: str
    shape: tuple
    dtype: str
    output: bool = False
    inout: bool = False  # an output the caller passes in (initialized by make_inputs)
    lo: float = 0.0
    hi: float = 0.0
    style: str = "uniform"  # uniform | grid

    @property
    def scalar(self):
        return self.shape is None

    def make(self, rng: np.random.Generator):
        dt = self.dtype
        if self.scalar:
            if is_int(dt):
                return int(rng.integers(int(self.lo), int(self.hi) + 1))
            return float(rng.integers(int(self.lo * 4), int(self.hi * 4) + 1)) / 4.0
        if is_int(dt):
            lo, hi = int(self.lo), int(self.hi)
            return rng.integers(lo, hi + 1, size=self.shape).astype(NP_DTYPES[dt])
        if self.style == "grid":
            x = rng.integers(int(self.lo * 2), int(self.hi * 2) + 1, size=self.shape) / 2.0
        else:
            x = rng.uniform(self.lo, self.hi, size=self.shape)
        return x.astype(np.float32).astype(NP_DTYPES[dt])


def float_input(r: random.Random, name, shape, dt, wide_ok=True):
    if is_int(dt):
        if dt == "int8":
            lo, hi = -128, 127
        elif dt == "uint8":
            lo, hi = 0, 255
        else:
            lo, hi = (-1000, 1000) if r.random() < 0.7 else (-8, 8)
        return Param(name, shape, dt, lo=lo, hi=hi)
    style = "grid" if r.random() < 0.25 else "uniform"
    bound = 300.0 if wide_ok and r.random() < 0.08 else 4.0
    return Param(name, shape, dt, lo=-bound, hi=bound, style=style)


def as_val(array, dt):
    """An input array as exact values of its dtype."""
    if is_float(dt):
        v = np.asarray(array).astype(np.float64)
    else:
        v = np.asarray(array).astype(np.int64)
    return Val(v, np.zeros(v.shape), dt)


def gather(array, idx, pad):
    """array[idx...] with every index outside the array reading `pad`."""
    shape = array.shape
    ok = np.ones(np.broadcast(*idx).shape, dtype=bool)
    clipped = []
    for d, ix in enumerate(idx):
        ix = np.broadcast_to(ix, ok.shape)
        ok &= (ix >= 0) & (ix < shape[d])
        clipped.append(np.clip(ix, 0, shape[d] - 1))
    values = array[tuple(clipped)]
    return np.where(ok, values, pad)


def pad_value(value, dt):
    """The pad as the source dtype stores it (T.copy casts pad to the source dtype)."""
    if is_float(dt):
        return rnd(np.float64(value), dt)
    if isinstance(value, float):
        lo, hi = INT_RANGE[dt]
        return (
            np.int64(max(lo, min(hi, math.trunc(value))))
            if math.isfinite(value)
            else (np.int64(lo if value < 0 else hi))
        )
    return wrap(np.int64(value), dt)


def pad_text(value, dt):
    if isinstance(value, float) and math.isinf(value):
        return f'{"-" if value < 0 else ""}T.infinity("{dt}")'
    return repr(value)


# ----------------------------------------------------------------------------------------
# the case


@dataclasses.dataclass
class Case:
    """One generated program: its source, inputs, and reference."""

    seed: int
    size: str
    family: str
    source: str
    prim_func_name: str
    params: list
    summary: str
    ref: object  # callable(list of Val for inputs, Ctx) -> list of Val for outputs
    out_idx: list = dataclasses.field(default_factory=list)
    tolerances: dict = dataclasses.field(default_factory=dict)

    @property
    def inputs(self):
        """The parameters the caller passes: inputs and in-place outputs, in call order."""
        return [p for p in self.params if not p.output or p.inout]

    @property
    def outputs(self):
        return [p for p in self.params if p.output]

    def describe(self) -> str:
        return f"seed {self.seed} ({self.size}): {self.summary}"

    def make_inputs(self, rng=None):
        """Input arrays (numpy, of the parameters' dtypes) in call order."""
        if rng is None:
            rng = np.random.default_rng(self.seed)
        return [p.make(rng) for p in self.inputs]

    def run(self, kernel, inputs):
        """Call `kernel` on copies of `inputs`; the outputs in `self.outputs` order."""
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
        return self.collect(args, kernel(*args))

    def collect(self, args, returned):
        """The outputs of a call: in-place ones from `args`, the others from `returned`."""
        if returned is None:
            returned = []
        elif not isinstance(returned, (list, tuple)):
            returned = [returned]
        returned = list(returned)
        position = {id(p): n for n, p in enumerate(self.inputs)}
        outs = []
        for p in self.outputs:
            outs.append(args[position[id(p)]] if p.inout else returned.pop(0))
        return outs

    def reference_bounds(self, inputs, gpu=False):
        """[(expected float64/int64 values, bound on |kernel - expected|)] per output."""
        vals = [as_val(a, p.dtype) for a, p in zip(inputs, self.inputs)]
        out = self.ref(vals, Ctx(gpu=gpu))
        return [(o.v, o.e) for o in out]

    def reference(self, inputs):
        """The expected outputs, as arrays of the output dtypes."""
        return [
            np.asarray(v).astype(NP_DTYPES[p.dtype])
            for (v, _), p in zip(self.reference_bounds(inputs), self.outputs)
        ]

    def check(self, inputs, outputs, gpu=False):
        """Compare kernel outputs with the reference: (ok, message, checked, skipped)."""
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        messages = []
        checked = skipped = 0
        bounds = self.reference_bounds(inputs, gpu=gpu)
        if len(outputs) != len(bounds):
            return (False, f"{len(outputs)} outputs, expected {len(bounds)}", 0, 0)
        for (v, e), got, p in zip(bounds, outputs, self.outputs):
            got = np.asarray(got)
            if tuple(got.shape) != tuple(p.shape):
                messages.append(f"{p.name}: shape {got.shape}, expected {p.shape}")
                continue
            g = got.astype(np.float64) if is_float(p.dtype) else got.astype(np.int64)
            known = np.isfinite(e)
            with np.errstate(invalid="ignore"):
                good = (g == v) | (np.isnan(g) & np.isnan(v)) | (np.abs(g - v) <= e)
            bad = known & ~good
            checked += int(known.sum())
            skipped += int((~known).sum())
            if bad.any():
                where = np.argwhere(bad)
                first = tuple(int(x) for x in where[0])
                messages.append(
                    f"{p.name} ({p.dtype}): {int(bad.sum())} of {bad.size} elements differ; "
                    f"first at {first}: got {g[first]!r}, expected {v[first]!r} "
                    f"(bound {e[first]:.3g})"
                )
        return (not messages, "; ".join(messages), checked, skipped)

    # -- loading and compiling -----------------------------------------------------------
    def path(self) -> str:
        digest = hashlib.sha1(self.source.encode()).hexdigest()[:10]
        directory = os.path.join(tempfile.gettempdir(), f"tilers-progen-{os.getuid()}")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"progen_{self.seed}_{digest}.py")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(self.source)
            os.replace(tmp, path)
        return path

    def load(self):
        """The @T.prim_func, imported from the source written to a file."""
        path = self.path()
        name = os.path.splitext(os.path.basename(path))[0]
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
        return getattr(module, self.prim_func_name)

    def compile(self, target="interp"):
        import tilers

        return tilers.compile(self.load(), out_idx=self.out_idx, target=target)


# ----------------------------------------------------------------------------------------
# source text


class Src:
    def __init__(self):
        self.lines = []
        self.depth = 0

    def __call__(self, line):
        self.lines.append("    " * self.depth + line)

    def indent(self):
        self.depth += 1

    def dedent(self):
        self.depth -= 1


SIZES = {
    # max extent of a dimension, max elements of a tensor
    "small": (300, 24000),
    "medium": (1200, 400000),
    "large": (4000, 4000000),
}


def rand_dim(r: random.Random, size, block=None):
    top, _ = SIZES[size]
    roll = r.random()
    if roll < 0.1:
        return r.randint(1, 8)
    if roll < 0.2 and block:
        return block * r.randint(1, max(1, top // block))  # an exact multiple
    return r.randint(1, top)


def rand_shape2(r, size, bM=None, bN=None):
    _, cap = SIZES[size]
    while True:
        M, N = rand_dim(r, size, bM), rand_dim(r, size, bN)
        if M * N <= cap:
            return M, N


def rand_block_n(r):
    return r.choice([16, 32, 64, 128, 256, 16, 32, 64, 128, 24, 48, 96, 100, 40])


def rand_block_m(r):
    return r.choice([1, 2, 4, 8, 16, 32, 64, 3, 5, 12])


def rand_tile(r, threads, max_elems=4096):
    """A (bM, bN) tile of at most 64 elements per thread (NVRTC time grows with the unrolling)."""
    while True:
        bM, bN = rand_block_m(r), rand_block_n(r)
        if bM * bN <= min(max_elems, 64 * threads):
            return bM, bN


def rand_threads(r):
    return r.choices([32, 64, 128, 256, 96, 192], weights=[6, 6, 6, 6, 1, 1])[0]


def plus(base, off):
    if off == 0:
        return base
    return f"{base} + {off}" if off > 0 else f"{base} - {-off}"


def loop_header(r: random.Random, var, count):
    kind = r.choices(["serial", "unroll", "pipelined"], weights=[6, 2, 2])[0]
    if kind == "serial":
        return f"for {var} in T.serial({count}):"
    if kind == "unroll":
        return f"for {var} in T.unroll({count}):"
    # num_stages=0 (the default) is refused by the core: see the progen report
    return f"for {var} in T.Pipelined({count}, num_stages={r.randint(1, 3)}):"


def header(src: Src, name, params, seed, size, family):
    src(f"# generated by tests/progen.py: seed {seed}, size {size}, family {family}")
    src("import tilers.language as T")
    src("")
    src("")
    src("@T.prim_func")
    args = ", ".join(
        f"{p.name}: T.{p.dtype}"
        if p.scalar
        else f'{p.name}: T.Tensor({tuple(p.shape)!r}, "{p.dtype}")'
        for p in params
    )
    src(f"def {name}({args}):")
    src.indent()


# ----------------------------------------------------------------------------------------
# family 1: element-wise expressions


def gen_elementwise(r: random.Random, seed, size):
    rank = 2 if r.random() < 0.7 else 1
    threads = rand_threads(r)
    if rank == 2:
        bM, bN = rand_tile(r, threads)
        M, N = rand_shape2(r, size, bM, bN)
    else:
        bM, bN = 1, r.choice([16, 32, 64, 128, 256, 512, 1024, 48, 100])
        M, N = 1, rand_dim(r, size, bN) * (r.randint(1, 40) if size != "small" else 1)
        N = min(N, SIZES[size][1])
    nk = 1 if r.random() < 0.7 else r.randint(2, 3)
    mode = "tile" if r.random() < 0.55 else "global"
    n_in = r.choice([1, 2, 2, 3])
    n_out = 1 if r.random() < 0.8 else 2

    names_in = ["A", "B", "D"][:n_in]
    names_out = ["C", "E"][:n_out]
    inputs = []  # (param, kind, storage, store_dtype, shift, pad, form)
    for nm in names_in:
        dt = r.choice(DTYPES)
        kinds = ["full"] if rank == 1 else ["full", "full", "row", "col", "trans"]
        kind = r.choice(kinds)
        shape = {"full": (M, N) if rank == 2 else (N,), "row": (N,), "col": (M,), "trans": (N, M)}[
            kind
        ]
        p = float_input(r, nm, shape, dt)
        shift = (0, 0)
        if r.random() < 0.2:
            # negative shifts read before the start: the pad value, as past the end
            shift = (r.randint(-3, 3) if rank == 2 else 0, r.randint(-5, 5))
        storage = "global"
        sdt = dt
        if mode == "tile":
            storage = r.choice(["fragment", "shared", "global", "fragment"])
            if kind == "trans" and storage == "fragment":
                storage = "shared"
            if r.random() < 0.3 and storage != "global":
                sdt = r.choice(DTYPES)
        pad = None
        if storage != "global" and r.random() < 0.4:
            pad = (
                r.choice([0, 1, 2, -1, 0.5, -3.5, 100])
                if is_float(dt)
                else r.choice([0, 1, 7, -5, 100])
            )
            if isinstance(pad, float) and is_int(dt):
                pad = int(pad)
            if is_int(dt) and not fits(pad, dt):
                pad = 1
        form = r.choice(["origin", "slice", "slice2"])
        inputs.append(
            dict(p=p, kind=kind, storage=storage, sdt=sdt, shift=shift, pad=pad, form=form)
        )

    scalar = None
    if r.random() < 0.15:
        sdt = r.choice(["float32", "int32"])
        scalar = Param(
            "s", None, sdt, lo=-4 if sdt == "float32" else -5, hi=4 if sdt == "float32" else 5
        )

    outs = []
    for nm in names_out:
        dt = r.choice(DTYPES)
        storage = (
            "global" if mode == "global" else r.choice(["fragment", "shared", "global", "fragment"])
        )
        odt = r.choice(DTYPES) if r.random() < 0.4 else dt
        style = r.choices(["plain", "accumulate", "ifelse", "local"], weights=[7, 2, 2, 2])[0]
        if style == "local" and (nk > 1 or bM * bN > 1024):
            style = "plain"  # the interpreter runs such a loop an iteration at a time
        if style == "accumulate" and storage == "global":
            style = "plain"
        outs.append(
            dict(
                p=Param(nm, (M, N) if rank == 2 else (N,), dt, output=True),
                storage=storage,
                odt=odt,
                style=style,
                form=r.choice(["origin", "slice"]),
            )
        )
    has_frag2 = any(o["storage"] == "fragment" for o in outs) or any(
        i["storage"] == "fragment" and i["kind"] == "full" for i in inputs
    )
    if rank == 2 and not has_frag2:
        for i in inputs:
            if i["storage"] == "fragment":
                i["storage"] = "shared"

    R = f"by * {bM}" if rank == 2 else None
    Cb = f"bx * {bN}" if nk == 1 else f"(bx * {nk} + k) * {bN}"

    # leaves
    leaves = []
    in_text = {}
    for n, i in enumerate(inputs):
        p, kind, storage, shift = i["p"], i["kind"], i["storage"], i["shift"]
        dr, dc = shift
        if storage == "global":
            if rank == 1:
                text = f"{p.name}[{plus(Cb + ' + j', dc)}]"
            else:
                rr, cc = plus(f"{R} + i", dr), plus(f"{Cb} + j", dc)
                text = {
                    "full": f"{p.name}[{rr}, {cc}]",
                    "row": f"{p.name}[{cc}]",
                    "col": f"{p.name}[{rr}]",
                    "trans": f"{p.name}[{cc}, {rr}]",
                }[kind]
        else:
            b = p.name.lower() + ("_s" if storage == "shared" else "_f")
            i["buf"] = b
            if rank == 1:
                text = f"{b}[j]"
            else:
                text = {
                    "full": f"{b}[i, j]",
                    "row": f"{b}[j]",
                    "col": f"{b}[i]",
                    "trans": f"{b}[j, i]",
                }[kind]
        in_text[p.name] = text
        lo, hi = cast_range(p.lo, p.hi, p.dtype, i["sdt"])
        if i["pad"] is not None:
            pv = float(pad_value(i["pad"], p.dtype))
            plo, phi = cast_range(pv, pv, p.dtype, i["sdt"])
            lo, hi = min(lo, plo), max(hi, phi)
        lo, hi = min(lo, 0.0), max(hi, 0.0)  # zero pads at shifted edges
        leaves.append(leaf(f"in{n}", i["sdt"], text, lo, hi))
    if r.random() < 0.3:
        if rank == 2 and r.random() < 0.5:
            leaves.append(leaf("row", "int32", f"({R} + i)", 0.0, float(M + bM)))
        else:
            leaves.append(leaf("col", "int32", f"({Cb} + j)", 0.0, float(N + bN * nk)))
    if scalar is not None:
        leaves.append(leaf("scalar", scalar.dtype, "s", float(scalar.lo), float(scalar.hi)))

    gen = ExprGen(r, leaves, max_depth=4 if size == "small" else 4)
    depth = r.randint(1, 4)
    for o in outs:
        o["expr"] = gen.gen(depth)
        if o["style"] == "ifelse":
            o["expr2"] = gen.gen(max(1, depth - 1))
            o["cond"] = gen.condition(max(2, depth))
            if o["cond"] is None:
                o["style"] = "plain"
        if o["style"] == "accumulate":
            odt = o["odt"]
            o["init"] = r.choice([0, 1, 2, -3]) if is_int(odt) else r.choice([0.0, 1.5, -2.0, 0.25])
            base = leaf("acc", odt, "", float(o["init"]), float(o["init"]))
            acc = mk_binary("add", base, o["expr"])
            if acc is None:
                o["style"] = "plain"
            else:
                o["acc"] = acc
        if o["style"] == "local":
            # a per-thread temporary updated by a serial loop inside the parallel loop
            ldt = r.choice(DTYPES)
            nt = r.randint(1, 4)
            o["ldt"], o["nt"] = ldt, nt
            o["lbuf"] = o["p"].name.lower() + "_l"
            t_leaf = leaf("t", "int32", "t", 0.0, float(nt - 1))
            body = ExprGen(r, leaves + [t_leaf, t_leaf]).gen(max(1, depth - 1))
            op = r.choice(["add", "max", "min", "sub"])
            init = o["expr"]
            ilo, ihi = cast_range(init.lo, init.hi, init.dt, ldt)
            span = max(abs(body.lo), abs(body.hi)) * nt
            lo, hi = (
                (ilo - span, ihi + span)
                if op in ("add", "sub")
                else (min(ilo, body.lo), max(ihi, body.hi))
            )
            lo, hi = clamp_range(lo, hi, ldt)
            l_leaf = leaf("local", ldt, f"{o['lbuf']}[0]", lo, hi)
            step = mk_binary(op, l_leaf, body)
            if step is None or not in_limits(lo, hi, ldt):
                o["style"] = "plain"
            else:
                o["step"] = step

    # A 1-D fragment read in a 2-D loop takes its layout from a 2-D fragment the loop
    # indexes (the compiler refuses it otherwise): make the first output such a fragment.
    if rank == 2:
        text = " ".join(
            o["expr"].render()
            + (o["cond"].render() + o["expr2"].render() if o["style"] == "ifelse" else "")
            + (o["step"].render() if o["style"] == "local" else "")
            for o in outs
        )
        used_1d = any(
            i["storage"] == "fragment"
            and i["kind"] in ("row", "col")
            and in_text[i["p"].name] in text
            for i in inputs
        )
        used_2d = any(
            i["storage"] == "fragment" and i["kind"] == "full" and in_text[i["p"].name] in text
            for i in inputs
        )
        if used_1d and not used_2d and not any(o["storage"] == "fragment" for o in outs):
            outs[0]["storage"] = "fragment"

    name = f"progen_{seed}"
    params = [i["p"] for i in inputs] + [o["p"] for o in outs] + ([scalar] if scalar else [])
    src = Src()
    header(src, name, params, seed, size, "elementwise")
    if rank == 2:
        src(
            f"with T.Kernel(T.ceildiv({N}, {bN * nk}), T.ceildiv({M}, {bM}), "
            f"threads={threads}) as (bx, by):"
        )
    else:
        src(f"with T.Kernel(T.ceildiv({N}, {bN * nk}), threads={threads}) as bx:")
    src.indent()

    def allocs():
        for i in inputs:
            if i["storage"] == "global":
                continue
            kind = i["kind"]
            shp = {
                "full": (bM, bN) if rank == 2 else (bN,),
                "row": (bN,),
                "col": (bM,),
                "trans": (bN, bM),
            }[kind]
            fn = "alloc_shared" if i["storage"] == "shared" else "alloc_fragment"
            src(f'{i["buf"]} = T.{fn}({shp!r}, "{i["sdt"]}")')
        for o in outs:
            if o["style"] == "local":
                src(f'{o["lbuf"]} = T.alloc_local((1,), "{o["ldt"]}")')
            if o["storage"] == "global":
                continue
            o["buf"] = o["p"].name.lower() + ("_s" if o["storage"] == "shared" else "_f")
            fn = "alloc_shared" if o["storage"] == "shared" else "alloc_fragment"
            shp = (bM, bN) if rank == 2 else (bN,)
            src(f'{o["buf"]} = T.{fn}({shp!r}, "{o["odt"]}")')

    alloc_inside = nk > 1 and r.random() < 0.3
    if not alloc_inside:
        allocs()
    if nk > 1:
        src(loop_header(r, "k", nk))
        src.indent()
        if alloc_inside:
            allocs()

    for i in inputs:
        if i["storage"] == "global":
            continue
        p, kind, (dr, dc), form = i["p"], i["kind"], i["shift"], i["form"]
        pad = "" if i["pad"] is None else f", pad={pad_text(i['pad'], p.dtype)}"
        if rank == 1:
            starts, exts = [plus(Cb, dc)], [bN]
        else:
            starts, exts = {
                "full": ([plus(R, dr), plus(Cb, dc)], [bM, bN]),
                "row": ([plus(Cb, dc)], [bN]),
                "col": ([plus(R, dr)], [bM]),
                "trans": ([plus(Cb, dc), plus(R, dr)], [bN, bM]),
            }[kind]
        src(f"T.copy({region(p.name, starts, exts, form)}, {i['buf']}{pad})")
    for o in outs:
        if o["style"] == "accumulate":
            if o["init"] == 0 and r.random() < 0.5:
                src(f"T.clear({o['buf']})")
            else:
                src(f"T.fill({o['buf']}, {o['init']!r})")
    if rank == 2:
        src(f"for i, j in T.Parallel({bM}, {bN}):")
    else:
        src(f"for j in T.Parallel({bN}):")
    src.indent()
    for o in outs:
        if o["storage"] == "global":
            target = (
                f"{o['p'].name}[{R} + i, {Cb} + j]" if rank == 2 else f"{o['p'].name}[{Cb} + j]"
            )
        else:
            target = f"{o['buf']}[i, j]" if rank == 2 else f"{o['buf']}[j]"
        if o["style"] == "plain":
            src(f"{target} = {o['expr'].render()}")
        elif o["style"] == "accumulate":
            src(f"{target} += {o['expr'].render()}")
        elif o["style"] == "local":
            lb = o["lbuf"]
            src(f"{lb}[0] = {o['expr'].render()}")
            src(f"for t in T.{r.choice(['serial', 'unroll'])}({o['nt']}):")
            src.indent()
            src(f"{lb}[0] = {o['step'].render()}")
            src.dedent()
            src(f"{target} = {lb}[0]")
        else:
            src(f"with T.If({o['cond'].render()}):")
            src.indent()
            src(f"{target} = {o['expr'].render()}")
            src.dedent()
            src("with T.Else():")
            src.indent()
            src(f"{target} = {o['expr2'].render()}")
            src.dedent()
    src.dedent()
    for o in outs:
        if o["storage"] == "global":
            continue
        starts = [R, Cb] if rank == 2 else [Cb]
        exts = [bM, bN] if rank == 2 else [bN]
        src(f"T.copy({o['buf']}, {region(o['p'].name, starts, exts, o['form'])})")
    source = "\n".join(src.lines) + "\n"

    shape = (M, N) if rank == 2 else (N,)

    def ref(vals, ctx):
        env = {}
        if rank == 2:
            P, Q = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
        else:
            Q = np.arange(N)
            P = None
        for n, i in enumerate(inputs):
            p, (dr, dc) = i["p"], i["shift"]
            a = vals[n].v
            pad = pad_value(i["pad"] if i["pad"] is not None else 0, p.dtype)
            if rank == 1:
                g = gather(a, [Q + dc], pad)
            else:
                g = gather(
                    a,
                    {
                        "full": [P + dr, Q + dc],
                        "row": [Q + dc],
                        "col": [P + dr],
                        "trans": [Q + dc, P + dr],
                    }[i["kind"]],
                    pad,
                )
            env[f"in{n}"] = cast_val(Val(g, np.zeros(shape), p.dtype), i["sdt"])
        if scalar is not None:
            sv = vals[len(inputs)]
            env["scalar"] = Val(np.broadcast_to(sv.v, shape), np.zeros(shape), scalar.dtype)
        if P is not None:
            env["row"] = Val(P.astype(np.int64), np.zeros(shape), "int32")
        env["col"] = Val(np.broadcast_to(Q, shape).astype(np.int64), np.zeros(shape), "int32")
        results = []
        for o in outs:
            dC, odt = o["p"].dtype, o["odt"] if o["storage"] != "global" else o["p"].dtype
            if o["style"] == "accumulate":
                env["acc"] = const_val(o["init"], odt, shape)
                val = cast_val(o["acc"].eval(env, ctx, shape), odt)
            elif o["style"] == "local":
                env["local"] = cast_val(o["expr"].eval(env, ctx, shape), o["ldt"])
                for t in range(o["nt"]):
                    env["t"] = const_val(t, "int32", shape)
                    env["local"] = cast_val(o["step"].eval(env, ctx, shape), o["ldt"])
                val = cast_val(env["local"], odt)
            elif o["style"] == "ifelse":
                c = o["cond"].eval(env, ctx, shape)
                a = cast_val(o["expr"].eval(env, ctx, shape), odt)
                b = cast_val(o["expr2"].eval(env, ctx, shape), odt)
                val = select(c, a, b, odt)
            else:
                val = cast_val(o["expr"].eval(env, ctx, shape), odt)
            results.append(cast_val(val, dC))
        return results

    desc = (
        f"elementwise {rank}-D {'x'.join(map(str, shape))} {mode} tile {bM}x{bN}"
        f"{f' x{nk} tiles' if nk > 1 else ''} threads {threads}; in "
        + ", ".join(
            f"{i['p'].name}:{SHORT[i['p'].dtype]}/{i['kind']}/{i['storage']}" for i in inputs
        )
        + "; out "
        + ", ".join(
            f"{o['p'].name}:{SHORT[o['p'].dtype]}/{o['storage']}/{o['style']}" for o in outs
        )
    )
    return name, params, source, ref, desc


def region(name, starts, exts, form):
    """`A[s0, s1]` (origin), `A[s0 : s0 + e0, ...]` or `A[s0 : (…) + e0]` (slices)."""
    if form == "origin":
        return f"{name}[{', '.join(starts)}]"
    parts = []
    for s, e in zip(starts, exts):
        parts.append(f"{s} : {s} + {e}")
    return f"{name}[{', '.join(parts)}]"


# ----------------------------------------------------------------------------------------
# family 2: copies


def gen_copy(r: random.Random, seed, size):
    variant = r.choices(
        ["chain", "patch", "rows", "cols", "chain1d", "batch"], weights=[5, 3, 2, 1, 2, 2]
    )[0]
    threads = rand_threads(r)
    dA = r.choice(DTYPES)
    A = float_input(r, "A", None, dA)
    r0, c0 = (r.randint(-3, 6), r.randint(-4, 9)) if r.random() < 0.7 else (0, 0)
    if variant == "chain1d":
        r0 = 0
    pad = None
    if r.random() < 0.6:
        pad = (
            r.choice([1.5, -2.0, 7.0, 0.0, float("-inf")])
            if is_float(dA)
            else r.choice([3, -7, 0, 9, 100])
        )
        if is_int(dA) and not fits(pad, dA):
            pad = 5
    padv = pad_value(pad if pad is not None else 0, dA)

    # the chain of on-chip buffers the data goes through
    n_stages = r.choice([1, 1, 2, 3])
    stages = []
    for s in range(n_stages):
        scope = r.choice(["shared", "fragment"])
        dt = r.choice(DTYPES) if r.random() < 0.5 else dA
        if stages and stages[-1][0] == "fragment" and scope == "fragment":
            # fragment to fragment: the same layout only when the element sizes agree
            if NP_DTYPES[stages[-1][1]].itemsize != NP_DTYPES[dt].itemsize:
                scope = "shared"
        stages.append((scope, dt))
    dC = r.choice(DTYPES) if r.random() < 0.5 else stages[-1][1]

    nk = 1 if r.random() < 0.75 else r.randint(2, 3)
    patch = None
    b0 = 0
    if variant in ("chain", "patch", "batch"):
        bM, bN = rand_tile(r, threads)
        M, N = rand_shape2(r, size, bM, bN)
        P, Q = (M, N) if r.random() < 0.5 else rand_shape2(r, size, bM, bN)
        A.shape = (M, N)
        tile = (bM, bN)
        if variant == "patch":
            stages[0] = ("shared", stages[0][1])
            a = r.randint(0, bM - 1)
            b = r.randint(a + 1, bM)
            c = r.randint(0, bN - 1)
            d = r.randint(c + 1, bN)
            fill = r.choice([0, 1, -2, 3]) if is_int(stages[0][1]) else r.choice([0.0, -1.5, 2.0])
            patch = (a, b, c, d, fill)
        grid = f"T.ceildiv({Q}, {bN * nk}), T.ceildiv({P}, {bM})"
        R = f"by * {bM}"
        if variant == "batch":
            batch = r.randint(1, 4)
            b0 = r.choice([0, 0, 1])
            A.shape = (batch, M, N)
            grid += f", {batch}"
    elif variant == "rows":
        bM, bN = 1, rand_block_n(r)
        M, N = rand_shape2(r, size, None, bN)
        P, Q = (M, N) if r.random() < 0.5 else rand_shape2(r, size, None, bN)
        A.shape = (M, N)
        tile = (bN,)
        grid = f"T.ceildiv({Q}, {bN * nk}), {P}"
        R = "by"
    elif variant == "cols":
        bM, bN = r.choice([16, 32, 64, 128, 24]), 1
        nk = 1
        M, N = rand_shape2(r, size, bM, None)
        P, Q = (M, N) if r.random() < 0.5 else rand_shape2(r, size, bM, None)
        A.shape = (M, N)
        tile = (bM,)
        grid = f"{Q}, T.ceildiv({P}, {bM})"
        R = f"by * {bM}"
    else:  # chain1d
        bM, bN = 1, r.choice([16, 32, 64, 128, 256, 512, 100])
        M, N = 1, rand_dim(r, size, bN)
        P, Q = 1, (N if r.random() < 0.5 else rand_dim(r, size, bN))
        A.shape = (N,)
        tile = (bN,)
        grid = f"T.ceildiv({Q}, {bN * nk})"
        R = None
    Cb = (f"bx * {bN}" if nk == 1 else f"(bx * {nk} + k) * {bN}") if variant != "cols" else "bx"
    C = Param("C", (P, Q) if variant != "chain1d" else (Q,), dC, output=True)
    if variant == "batch":
        C.shape = (A.shape[0], P, Q)
    params = [A, C]
    name = f"progen_{seed}"
    src = Src()
    header(src, name, params, seed, size, "copy")
    targets = {"chain1d": "bx", "batch": "(bx, by, bz)"}.get(variant, "(bx, by)")
    src(f"with T.Kernel({grid}, threads={threads}) as {targets}:")
    src.indent()
    bufs = []
    for n, (scope, dt) in enumerate(stages):
        b = f"t{n}"
        fn = "alloc_shared" if scope == "shared" else "alloc_fragment"
        bufs.append(b)
        src(f'{b} = T.{fn}({tile!r}, "{dt}")')
    if nk > 1:
        src(loop_header(r, "k", nk))
        src.indent()
    form = r.choice(["origin", "slice"])
    padtxt = "" if pad is None else f", pad={pad_text(pad, dA)}"
    if variant in ("chain", "patch"):
        if patch:
            a, b, c, d, fill = patch
            src(f"T.fill({bufs[0]}, {fill!r})")
            dst = f"{bufs[0]}[{a}:{b}, {c}:{d}]"
            src(f"T.copy(A[{plus(R, r0)}, {plus(Cb, c0)}], {dst}{padtxt})")
        else:
            src(
                f"T.copy({region('A', [plus(R, r0), plus(Cb, c0)], [bM, bN], form)}, "
                f"{bufs[0]}{padtxt})"
            )
        out_region = region("C", [R, Cb], [bM, bN], r.choice(["origin", "slice"]))
    elif variant == "batch":
        rs, cs = plus(R, r0), plus(Cb, c0)
        src(
            f"T.copy(A[{plus('bz', b0)}, {rs} : {rs} + {bM}, {cs} : {cs} + {bN}], "
            f"{bufs[0]}{padtxt})"
        )
        out_region = f"C[bz, {R} : {R} + {bM}, {Cb} : {Cb} + {bN}]"
    elif variant == "rows":
        s = plus(Cb, c0)
        src(f"T.copy(A[{plus('by', r0)}, {s} : {s} + {bN}], {bufs[0]}{padtxt})")
        out_region = f"C[by, {Cb} : {Cb} + {bN}]"
    elif variant == "cols":
        s = plus(R, r0)
        src(f"T.copy(A[{s} : {s} + {bM}, {plus('bx', c0)}], {bufs[0]}{padtxt})")
        out_region = f"C[{R} : {R} + {bM}, bx]"
    else:
        src(f"T.copy({region('A', [plus(Cb, c0)], [bN], form)}, {bufs[0]}{padtxt})")
        out_region = region("C", [Cb], [bN], r.choice(["origin", "slice"]))
    for x, y in zip(bufs, bufs[1:]):
        src(f"T.copy({x}, {y})")
    src(f"T.copy({bufs[-1]}, {out_region})")
    source = "\n".join(src.lines) + "\n"

    def ref(vals, ctx):
        a = vals[0].v
        if variant == "chain1d":
            q = np.arange(Q)
            g = gather(a, [q + c0], padv)
            shape = (Q,)
            v = Val(g, np.zeros(shape), dA)
        elif variant == "batch":
            z, p, q = np.meshgrid(np.arange(A.shape[0]), np.arange(P), np.arange(Q), indexing="ij")
            shape = C.shape
            g = gather(a, [z + b0, p + r0, q + c0], padv)
            v = Val(g, np.zeros(shape), dA)
        else:
            p, q = np.meshgrid(np.arange(P), np.arange(Q), indexing="ij")
            shape = (P, Q)
            if patch:
                pa, pb, pc, pd, fill = patch
                i, j = p % bM, q % bN
                inside = (i >= pa) & (i < pb) & (j >= pc) & (j < pd)
                g = gather(a, [p - i + r0 + (i - pa), q - j + c0 + (j - pc)], padv)
                gv = cast_val(Val(g, np.zeros(shape), dA), stages[0][1])
                fv = const_val(fill, stages[0][1], shape)
                v = Val(np.where(inside, gv.v, fv.v), np.zeros(shape), stages[0][1])
            else:
                g = gather(a, [p + r0, q + c0], padv)
                v = Val(g, np.zeros(shape), dA)
        for _, dt in stages:
            v = cast_val(v, dt)
        return [cast_val(v, dC)]

    desc = (
        f"copy/{variant} {SHORT[dA]}{list(A.shape)} -> {SHORT[dC]}{list(C.shape)} offset "
        f"({b0},{r0},{c0}) pad {pad} via "
        + " -> ".join(f"{s[0]}:{SHORT[s[1]]}" for s in stages)
        + f" tile {tile} x{nk} threads {threads}"
    )
    return name, params, source, ref, desc


# ----------------------------------------------------------------------------------------
# family 3: reductions


def gen_reduce(r: random.Random, seed, size):
    if r.random() < 0.2:
        return gen_reduce_vector(r, seed, size)
    kind = r.choice(["sum", "max", "min", "absmax"])
    dim = r.choice([0, 1])
    threads = rand_threads(r)
    dA = r.choice(DTYPES)
    dX = dA if r.random() < 0.6 else r.choice(DTYPES)
    if is_int(dA) and is_int(dX) and not (dX == "int32" or dA == dX):
        # a wrapping conversion would make the pad value not neutral
        dX = dA
    if is_int(dX):
        dD = dX
    else:
        dD = r.choice(FLOATS) if r.random() < 0.5 else dX
    A = float_input(r, "A", None, dA, wide_ok=False)
    if dA == "int8" and kind == "absmax":
        A.lo = -127
    if kind == "sum" and dA == "int32":
        A.lo, A.hi = (-1000, 1000)
    single = r.random() < 0.35
    if single:
        # one tile covers the reduced dimension: clear=True
        if dim == 1:
            N = rand_dim(r, size)
            bN = r.choice([b for b in (16, 32, 64, 128, 256, 512, 1024) if b >= N] + [N])
            bM = r.choice(
                [m for m in (1, 2, 4, 8, 16, 3) if m * bN <= min(4096, 64 * threads)] or [1]
            )
            M = rand_dim(r, size, bM)
            while M * N > SIZES[size][1]:
                M = max(1, M // 2)
        else:
            M = rand_dim(r, size)
            bM = r.choice([b for b in (16, 32, 64, 128, 256) if b >= M] + [M])
            bN = r.choice(
                [n for n in (16, 32, 64, 8, 4) if n * bM <= min(4096, 64 * threads)] or [1]
            )
            N = rand_dim(r, size, bN)
            while M * N > SIZES[size][1]:
                N = max(1, N // 2)
        nk = 1
    else:
        bM, bN = rand_tile(r, threads)
        M, N = rand_shape2(r, size, bM, bN)
        nk = -(-N // bN) if dim == 1 else -(-M // bM)
    A.shape = (M, N)
    if kind == "sum":
        pad = r.choice([None, 0])
    elif kind == "absmax":
        pad = r.choice([None, 0])
    elif kind == "max":
        pad = float("-inf") if is_float(dA) else INT_RANGE[dA][0]
    else:
        pad = float("inf") if is_float(dA) else INT_RANGE[dA][1]
    init = None
    # clear=True inside the loop of tiles: the result is the last tile's alone
    clear_each = not single and r.random() < 0.12
    if (not single and not clear_each) or r.random() < 0.2:
        init = {"sum": 0, "absmax": 0, "max": None, "min": None}[kind]
        if kind in ("max", "min"):
            if is_float(dD):
                init = float("-inf") if kind == "max" else float("inf")
            else:
                init = INT_RANGE[dD][0] if kind == "max" else INT_RANGE[dD][1]
        if kind == "sum" and r.random() < 0.4:
            init = r.choice([1, -3]) if is_int(dD) else r.choice([1.5, -0.25])
        if kind in ("max", "min") and r.random() < 0.3:
            init = r.choice([0, 2, -1]) if is_int(dD) else r.choice([0.5, -1.0])
    normalize = single and dim == 1 and r.random() < 0.4
    post = r.random() < 0.4
    dS = r.choice(DTYPES) if r.random() < 0.4 else dD
    S = Param("S", (M,) if dim == 1 else (N,), dS, output=True)
    params = [A, S]
    Y = None
    if normalize:
        Y = Param("Y", (M, N), r.choice(DTYPES), output=True)
        params.append(Y)

    # the value ranges, for the post-processing expressions
    xlo, xhi = cast_range(A.lo, A.hi, dA, dX)
    n_red = N if dim == 1 else M
    if kind == "sum":
        alo, ahi = xlo * n_red, xhi * n_red
        if init is not None:
            alo, ahi = alo + min(init, 0), ahi + max(init, 0)
    elif kind == "absmax":
        alo, ahi = 0.0, max(abs(xlo), abs(xhi))
    else:
        alo, ahi = xlo, xhi
        if init is not None and math.isfinite(init):
            alo, ahi = min(alo, init), max(ahi, init)
    alo, ahi = clamp_range(alo, ahi, dD)
    acc_text = "acc[i]" if dim == 1 else "acc[j]"
    acc_leaf = leaf("acc", dD, acc_text, alo, ahi)
    post_expr = None
    if post and in_limits(alo, ahi, dD):
        post_expr = ExprGen(r, [acc_leaf], max_depth=3).gen(r.randint(1, 3))
    norm_expr = None
    if normalize:
        x_leaf = leaf("x", dX, "x[i, j]", min(xlo, 0.0), max(xhi, 0.0))
        gen = ExprGen(r, [x_leaf, acc_leaf] if in_limits(alo, ahi, dD) else [x_leaf])
        norm_expr = mk_binary("sub", x_leaf, acc_leaf) if r.random() < 0.5 else None
        if norm_expr is None:
            # the loop must index the 2-D tile x (its layout decides the loop's)
            norm_expr = gen.gen(r.randint(1, 3))
            if "x[i, j]" not in norm_expr.render():
                norm_expr = mk_binary(r.choice(["add", "sub", "mul", "max"]), x_leaf, norm_expr)
            if norm_expr is None:
                norm_expr = mk_binary("sub", x_leaf, acc_leaf) or x_leaf
        norm_store = r.choice(["global", "fragment"])

    name = f"progen_{seed}"
    src = Src()
    header(src, name, params, seed, size, "reduce")
    grid = f"T.ceildiv({M}, {bM})" if dim == 1 else f"T.ceildiv({N}, {bN})"
    src(f"with T.Kernel({grid}, threads={threads}) as bx:")
    src.indent()
    src(f'x = T.alloc_fragment(({bM}, {bN}), "{dX}")')
    src(f'acc = T.alloc_fragment(({bM if dim == 1 else bN},), "{dD}")')
    if normalize and norm_store == "fragment":
        src(f'y = T.alloc_fragment(({bM}, {bN}), "{Y.dtype}")')
    if init is not None:
        if init == 0 and r.random() < 0.5:
            src("T.clear(acc)")
        else:
            src(f"T.fill(acc, {pad_text(init, dD)})")
    padtxt = "" if pad is None else f", pad={pad_text(pad, dA)}"
    clear = init is None or clear_each
    cleartxt = "" if clear and r.random() < 0.5 else f", clear={clear}"
    if nk > 1 or (not single):
        src(loop_header(r, "k", nk))
        src.indent()
        origin = f"A[bx * {bM}, k * {bN}]" if dim == 1 else f"A[k * {bM}, bx * {bN}]"
    else:
        origin = f"A[bx * {bM}, 0]" if dim == 1 else f"A[0, bx * {bN}]"
    src(f"T.copy({origin}, x{padtxt})")
    src(f"T.reduce_{kind}(x, acc, dim={dim}{cleartxt})")
    if nk > 1 or (not single):
        src.dedent()
    if post_expr is not None:
        if dim == 1:
            src(f"for i in T.Parallel({bM}):")
            src.indent()
            src(f"S[bx * {bM} + i] = {post_expr.render()}")
        else:
            src(f"for j in T.Parallel({bN}):")
            src.indent()
            src(f"S[bx * {bN} + j] = {post_expr.render()}")
        src.dedent()
    else:
        src(f"T.copy(acc, S[bx * {bM if dim == 1 else bN}])")
    if normalize:
        src(f"for i, j in T.Parallel({bM}, {bN}):")
        src.indent()
        if norm_store == "fragment":
            src(f"y[i, j] = {norm_expr.render()}")
        else:
            src(f"Y[bx * {bM} + i, j] = {norm_expr.render()}")
        src.dedent()
        if norm_store == "fragment":
            src(f"T.copy(y, Y[bx * {bM}, 0])")
    source = "\n".join(src.lines) + "\n"

    acc_dt = "float32" if is_float(dX) else dX

    def ref(vals, ctx):
        a = vals[0]
        x = cast_val(a, dX)
        xv = x.v
        if kind == "absmax":
            xv = np.abs(xv) if is_float(dX) else wrap(np.abs(xv), dX)
        out_len = M if dim == 1 else N
        shape = (out_len,)
        if init is None:
            cur = None
        else:
            cur = const_val(init, dD, shape)
        step = bN if dim == 1 else bM
        extent = N if dim == 1 else M
        for k in range(nk if not single else 1):
            lo_, hi_ = k * step, min(extent, (k + 1) * step)
            part = xv[:, lo_:hi_] if dim == 1 else xv[lo_:hi_, :]
            ax = 1 if dim == 1 else 0
            if kind == "sum":
                if is_float(dX):
                    pv = part.sum(axis=ax)
                    pe = (step + 1) * U32 * np.abs(part).sum(axis=ax)
                    pe = np.where(pe > 0, pe + TINY["float32"], 0.0)
                else:
                    pv = wrap(part.sum(axis=ax), acc_dt)
                    pe = np.zeros(shape)
            elif kind in ("max", "absmax"):
                pv = part.max(axis=ax)
                if kind == "absmax":
                    pv = np.maximum(pv, 0)
                pe = np.zeros(shape)
            else:
                pv = part.min(axis=ax)
                pe = np.zeros(shape)
            partial = finish(pv, pe, acc_dt)
            if cur is None or clear_each:
                cur = cast_val(partial, dD)
            else:
                old = cast_val(cur, acc_dt)
                op = {"sum": "add", "max": "max", "absmax": "max", "min": "min"}[kind]
                cur = cast_val(arith(op, old, partial, acc_dt, ctx), dD)
        results = []
        if post_expr is not None:
            results.append(cast_val(post_expr.eval({"acc": cur}, ctx, shape), dS))
        else:
            results.append(cast_val(cur, dS))
        if normalize:
            shp = (M, N)
            env = {
                "x": x,
                "acc": Val(
                    np.broadcast_to(cur.v[:, None], shp), np.broadcast_to(cur.e[:, None], shp), dD
                ),
            }
            v = norm_expr.eval(env, ctx, shp)
            if norm_store == "fragment":
                v = cast_val(v, Y.dtype)
            results.append(cast_val(v, Y.dtype))
        return results

    desc = (
        f"reduce_{kind} dim {dim} of {SHORT[dA]}{[M, N]} via x:{SHORT[dX]} "
        f"acc:{SHORT[dD]} -> {SHORT[dS]}; tile {bM}x{bN}, {nk} tile(s), "
        f"{'clear' if clear else f'init {init}'}, threads {threads}"
        f"{', post-expr' if post_expr is not None else ''}"
        f"{', normalize' if normalize else ''}"
    )
    return name, params, source, ref, desc


def gen_reduce_vector(r: random.Random, seed, size):
    """A 1-D tensor reduced chunk by chunk into a (1,)-shaped fragment: S[bx] = op(chunk)."""
    kind = r.choice(["sum", "max", "min", "absmax"])
    threads = rand_threads(r)
    dA = r.choice(DTYPES)
    dX = dA if r.random() < 0.7 or is_int(dA) else r.choice(FLOATS)
    dD = dX if is_int(dX) or r.random() < 0.5 else r.choice(FLOATS)
    A = float_input(r, "A", None, dA, wide_ok=False)
    if dA == "int8" and kind == "absmax":
        A.lo = -127
    bN = r.choice([16, 32, 64, 128, 256, 512, 100, 48])
    nk = r.randint(1, 4)
    N = rand_dim(r, size, bN)
    A.shape = (N,)
    G = -(-N // (bN * nk))
    dS = r.choice(DTYPES) if r.random() < 0.3 else dD
    S = Param("S", (G,), dS, output=True)
    pad = {
        "sum": 0,
        "absmax": 0,
        "max": float("-inf") if is_float(dA) else INT_RANGE[dA][0],
        "min": float("inf") if is_float(dA) else INT_RANGE[dA][1],
    }[kind]
    if is_int(dD):
        init = {"sum": 0, "absmax": 0, "max": INT_RANGE[dD][0], "min": INT_RANGE[dD][1]}[kind]
    else:
        init = {"sum": 0.0, "absmax": 0.0, "max": float("-inf"), "min": float("inf")}[kind]
    post = r.random() < 0.4
    name = f"progen_{seed}"
    src = Src()
    header(src, name, [A, S], seed, size, "reduce")
    src(f"with T.Kernel({G}, threads={threads}) as bx:")
    src.indent()
    src(f'x = T.alloc_fragment(({bN},), "{dX}")')
    src(f'acc = T.alloc_fragment((1,), "{dD}")')
    # The first tile clears: a T.fill(acc) before the first reduction gives the (1,)
    # accumulator a layout of its own, which the reduction then refuses (see the report).
    src(f"T.copy(A[bx * {nk * bN}], x, pad={pad_text(pad, dA)})")
    src(f"T.reduce_{kind}(x, acc, dim=0)")
    if nk > 1:
        src(f"for k in T.serial(1, {nk}):")
        src.indent()
        src(f"T.copy(A[(bx * {nk} + k) * {bN}], x, pad={pad_text(pad, dA)})")
        src(f"T.reduce_{kind}(x, acc, dim=0, clear=False)")
        src.dedent()
    xlo, xhi = cast_range(A.lo, A.hi, dA, dX)
    if kind == "sum":
        alo, ahi = xlo * bN * nk, xhi * bN * nk
    elif kind == "absmax":
        alo, ahi = 0.0, max(abs(xlo), abs(xhi))
    else:
        alo, ahi = xlo, xhi
    alo, ahi = clamp_range(alo, ahi, dD)
    post_expr = None
    if post and in_limits(alo, ahi, dD):
        post_expr = ExprGen(r, [leaf("acc", dD, "acc[i]", alo, ahi)]).gen(r.randint(1, 3))
    if post_expr is not None:
        src("for i in T.Parallel(1):")
        src.indent()
        src(f"S[bx + i] = {post_expr.render()}")
        src.dedent()
    else:
        src("T.copy(acc, S[bx])")
    source = "\n".join(src.lines) + "\n"
    acc_dt = "float32" if is_float(dX) else dX

    def ref(vals, ctx):
        x = cast_val(vals[0], dX)
        xv = x.v
        if kind == "absmax":
            xv = np.abs(xv) if is_float(dX) else wrap(np.abs(xv), dX)
        cur = const_val(init, dD, (G,))
        op = {"sum": "add", "max": "max", "absmax": "max", "min": "min"}[kind]
        for k in range(nk):
            pv, pe = [], []
            for b in range(G):
                part = xv[(b * nk + k) * bN : (b * nk + k + 1) * bN]
                if kind == "sum":
                    pv.append(part.sum() if part.size else 0)
                    pe.append((bN + 1) * U32 * np.abs(part).sum() if is_float(dX) else 0.0)
                elif kind == "min":
                    pv.append(part.min() if part.size else INT_RANGE.get(acc_dt, (0, np.inf))[1])
                    pe.append(0.0)
                else:
                    pv.append(
                        max(part.max(), 0)
                        if kind == "absmax" and part.size
                        else (part.max() if part.size else INT_RANGE.get(acc_dt, (-np.inf, 0))[0])
                    )
                    pe.append(0.0)
            pv = np.array(pv, dtype=np.float64 if is_float(acc_dt) else np.int64)
            if not is_float(acc_dt):
                pv = wrap(pv, acc_dt)
            pe = np.array(pe, dtype=np.float64)
            partial = finish(pv, np.where(pe > 0, pe + TINY["float32"], 0.0), acc_dt)
            if k == 0:
                cur = cast_val(partial, dD)
            else:
                cur = cast_val(arith(op, cast_val(cur, acc_dt), partial, acc_dt, ctx), dD)
        if post_expr is not None:
            return [cast_val(post_expr.eval({"acc": cur}, ctx, (G,)), dS)]
        return [cast_val(cur, dS)]

    desc = (
        f"reduce_{kind} vector {SHORT[dA]}[{N}] via x:{SHORT[dX]}[{bN}] acc:{SHORT[dD]}[1] "
        f"x{nk} -> {SHORT[dS]}[{G}], threads {threads}"
        f"{', post-expr' if post_expr is not None else ''}"
    )
    return name, [A, S], source, ref, desc


# ----------------------------------------------------------------------------------------
# family 4: per-block statements (outside T.Parallel), atomics, global fills and copies


def gen_block(r: random.Random, seed, size):
    """Statements a block runs once (thread 0 stores): an in-place output F[by, bx] computed
    from block-indexed reads, updated by a serial loop and T.If/T.Else; optionally a
    histogram H of atomics under a bounds condition, and a global row G filled with
    T.fill and partly overwritten by a global-to-global T.copy."""
    threads = rand_threads(r)
    Gx, Gy = r.randint(1, 12), r.randint(1, 12)
    dA = r.choice(DTYPES)
    M, N = rand_shape2(r, size)
    A = float_input(r, "A", (M, N), dA)
    sM, sN = r.randint(1, 40), r.randint(1, 40)
    dF = r.choice(DTYPES)
    F = float_input(r, "F", (Gy, Gx), dF)
    F.output = F.inout = True
    params = [A, F]

    leaves = []
    offsets = []
    for n in range(r.randint(1, 3)):
        dr, dc = r.randint(-2, 3), r.randint(-2, 3)
        offsets.append((dr, dc))
        text = f"A[{plus(f'by * {sM}', dr)}, {plus(f'bx * {sN}', dc)}]".replace("+ -", "- ")
        leaves.append(leaf(f"a{n}", dA, text, min(A.lo, 0.0), max(A.hi, 0.0)))
    leaves.append(leaf("bx", "int32", "bx", 0.0, float(Gx - 1)))
    leaves.append(leaf("by", "int32", "by", 0.0, float(Gy - 1)))
    gen = ExprGen(r, leaves)
    e0 = gen.gen(r.randint(1, 3))
    nk = r.choice([0, 0, 1, 2, 3])
    step = None
    if nk:
        k_leaf = leaf("k", "int32", "k", 0.0, float(nk - 1))
        body = ExprGen(r, leaves + [k_leaf]).gen(r.randint(1, 2))
        op = r.choice(["add", "max", "min", "sub"])
        ilo, ihi = cast_range(e0.lo, e0.hi, e0.dt, dF)
        span = max(abs(body.lo), abs(body.hi)) * nk
        lo, hi = (
            (ilo - span, ihi + span)
            if op in ("add", "sub")
            else (min(ilo, body.lo), max(ihi, body.hi))
        )
        lo, hi = clamp_range(lo, hi, dF)
        f_leaf = leaf("F", dF, "F[by, bx]", lo, hi)
        step = mk_binary(op, f_leaf, body)
        if step is None or not in_limits(lo, hi, dF):
            nk, step = 0, None
    cond = then = other = None
    if r.random() < 0.5:
        cond = ExprGen(r, leaves).condition(r.randint(1, 3))
        if cond is not None:
            then = gen.gen(r.randint(1, 2))
            other = gen.gen(r.randint(1, 2)) if r.random() < 0.5 else None

    hist = None
    if r.random() < 0.5:
        nb = r.choice([1, 3, 8, 16, 100])
        dH = r.choice(["int32", "float32"])
        H = Param("H", (nb,), dH, output=True, inout=True, lo=0, hi=10, style="grid")
        params.append(H)
        bM, bN = rand_tile(r, threads, 1024)
        val = r.choice([1, 2, "(j % 3)", "(i + 1)"] + ([0.5] if dH == "float32" else []))
        hist = dict(H=H, nb=nb, bM=bM, bN=bN, val=val)
    grow = None
    if r.random() < 0.4:
        w = r.choice([8, 16, 24, 32, 64])
        w2 = r.randint(1, w)
        a = r.randint(0, w - w2)
        dG = r.choice(DTYPES)
        G = float_input(r, "G", (Gy, Gx * w), dG)
        G.output = G.inout = True
        params.append(G)
        v = r.choice([0, 1, -2, 3]) if is_int(dG) else r.choice([0.0, -1.5, 2.25])
        dr, dc = r.randint(-1, 2), r.randint(-2, 4)
        grow = dict(G=G, w=w, w2=w2, a=a, v=v, dr=dr, dc=dc, copy=r.random() < 0.7)

    name = f"progen_{seed}"
    src = Src()
    header(src, name, params, seed, size, "block")
    src(f"with T.Kernel({Gx}, {Gy}, threads={threads}) as (bx, by):")
    src.indent()
    src(f"F[by, bx] = {e0.render()}")
    if nk:
        src(loop_header(r, "k", nk))
        src.indent()
        src(f"F[by, bx] = {step.render()}")
        src.dedent()
    if cond is not None:
        src(f"with T.If({cond.render()}):")
        src.indent()
        src(f"F[by, bx] = {then.render()}")
        src.dedent()
        if other is not None:
            src("with T.Else():")
            src.indent()
            src(f"F[by, bx] = {other.render()}")
            src.dedent()
    if hist:
        bM, bN, nb = hist["bM"], hist["bN"], hist["nb"]
        x = f"A[by * {bM} + i, bx * {bN} + j]"
        idx = f"{x} % {nb}" if is_int(dA) else f'T.cast({x}, "int32") % {nb}'
        src(f"for i, j in T.Parallel({bM}, {bN}):")
        src.indent()
        src(f"with T.If((by * {bM} + i < {M}) & (bx * {bN} + j < {N})):")
        src.indent()
        src(f"T.atomic_add(H[{idx}], {hist['val']})")
        src.dedent()
        src.dedent()
    if grow:
        w, w2, a = grow["w"], grow["w2"], grow["a"]
        src(f"T.fill(G[by, bx * {w} : bx * {w} + {w}], {grow['v']!r})")
        if grow["copy"]:
            rs = plus("by", grow["dr"]).replace("+ -", "- ")
            cs = plus(f"bx * {sN}", grow["dc"]).replace("+ -", "- ")
            src(f"T.copy(A[{rs}, {cs} : {cs} + {w2}], G[by, bx * {w} + {a} : bx * {w} + {a + w2}])")
    source = "\n".join(src.lines) + "\n"

    def ref(vals, ctx):
        a = vals[0].v
        shape = (Gy, Gx)
        by_, bx_ = np.meshgrid(np.arange(Gy), np.arange(Gx), indexing="ij")
        env = {
            "bx": Val(bx_.astype(np.int64), np.zeros(shape), "int32"),
            "by": Val(by_.astype(np.int64), np.zeros(shape), "int32"),
        }
        zero = pad_value(0, dA)
        for n, (dr, dc) in enumerate(offsets):
            g = gather(a, [by_ * sM + dr, bx_ * sN + dc], zero)
            env[f"a{n}"] = Val(g, np.zeros(shape), dA)
        f = cast_val(e0.eval(env, ctx, shape), dF)
        for k in range(nk):
            env["k"] = const_val(k, "int32", shape)
            env["F"] = f
            f = cast_val(step.eval(env, ctx, shape), dF)
        if cond is not None:
            c = cond.eval(env, ctx, shape)
            t = cast_val(then.eval(env, ctx, shape), dF)
            o = cast_val(other.eval(env, ctx, shape), dF) if other is not None else f
            f = select(c, t, o, dF)
        results = [f]
        position = 2
        if hist:
            h0 = vals[position]
            position += 1
            bM, bN, nb = hist["bM"], hist["bN"], hist["nb"]
            rows, cols = min(M, Gy * bM), min(N, Gx * bN)
            x = (
                cast_val(Val(a[:rows, :cols], np.zeros((rows, cols)), dA), "int32")
                if is_float(dA)
                else Val(a[:rows, :cols], np.zeros((rows, cols)), dA)
            )
            idx = np.mod(x.v, nb)
            i, j = np.meshgrid(np.arange(rows) % bM, np.arange(cols) % bN, indexing="ij")
            val = hist["val"]
            add = (
                {"(j % 3)": j % 3, "(i + 1)": i + 1}.get(val)
                if isinstance(val, str)
                else np.full((rows, cols), val)
            )
            h = h0.v.astype(np.float64).copy()
            np.add.at(h, idx.reshape(-1), np.asarray(add, dtype=np.float64).reshape(-1))
            dH = hist["H"].dtype
            h = wrap(h.astype(np.int64), dH) if is_int(dH) else rnd(h, dH)
            results.append(Val(h, np.zeros(h.shape), dH))
        if grow:
            g0 = vals[position]
            G, w, w2, aa = grow["G"], grow["w"], grow["w2"], grow["a"]
            dG = G.dtype
            out = const_val(grow["v"], dG, G.shape).v
            gy, gx = np.meshgrid(np.arange(Gy), np.arange(Gx * w), indexing="ij")
            if grow["copy"]:
                t = gx % w - aa
                inside = (t >= 0) & (t < w2)
                src_v = gather(a, [gy + grow["dr"], (gx // w) * sN + grow["dc"] + t], zero)
                conv = cast_val(Val(src_v, np.zeros(G.shape), dA), dG).v
                out = np.where(inside, conv, out)
            del g0
            results.append(Val(out, np.zeros(G.shape), dG))
        return results

    desc = (
        f"block {Gx}x{Gy} threads {threads}: F:{SHORT[dF]} from A:{SHORT[dA]}{[M, N]}"
        f"{f', serial x{nk}' if nk else ''}{', if/else' if cond is not None else ''}"
        + (
            f", atomics H:{SHORT[hist['H'].dtype]}[{hist['nb']}] tile {hist['bM']}x{hist['bN']}"
            if hist
            else ""
        )
        + (f", global fill+copy G:{SHORT[grow['G'].dtype]}" if grow else "")
    )
    return name, params, source, ref, desc


# ----------------------------------------------------------------------------------------
# entry point

FAMILIES = {
    "elementwise": gen_elementwise,
    "copy": gen_copy,
    "reduce": gen_reduce,
    "block": gen_block,
}
FAMILY_WEIGHTS = {"elementwise": 10, "copy": 4, "reduce": 5, "block": 2}


def generate(seed: int, size: str = "small", family: str | None = None) -> Case:
    """The program of `seed`: deterministic (same seed, size and family give the same case)."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    r = random.Random(f"tilers-progen:{seed}:{size}")
    if family is None:
        family = r.choices(list(FAMILY_WEIGHTS), weights=list(FAMILY_WEIGHTS.values()))[0]
    name, params, source, ref, desc = FAMILIES[family](r, seed, size)
    inputs = [p for p in params if not p.output]
    out_idx = [n for n, p in enumerate(params) if p.output and not p.inout]
    del inputs
    tolerances = {
        p.name: "exact" if is_int(p.dtype) else "bounded (per-element bound from the reference)"
        for p in params
        if p.output
    }
    return Case(
        seed=seed,
        size=size,
        family=family,
        source=source,
        prim_func_name=name,
        params=params,
        summary=desc,
        ref=ref,
        out_idx=out_idx,
        tolerances=tolerances,
    )


def main(argv=None):
    """`python tests/progen.py SEED [SIZE]`: print the program of a seed."""
    argv = sys.argv[1:] if argv is None else argv
    seed = int(argv[0]) if argv else 0
    size = argv[1] if len(argv) > 1 else "small"
    case = generate(seed, size)
    print(case.describe())
    print(case.source)


if __name__ == "__main__":
    main()
