"""User layouts: ``T.Layout(shape, fn)`` in ``T.annotate_layout``.

A layout maps a buffer's logical index ``(i, j, ...)`` to an index of its storage,
``fn(i, j, ...) -> [p0, p1, ...]``, read row-major over the storage's shape (each ``p``'s
extent, found by interval arithmetic over the index expressions). TileLang's backward
attention examples store a float32 gradient that way, so that the atomics of one
mma fragment land on neighbouring addresses:
``T.Layout(dQ.shape, lambda b, l, h, d: [b, l // 8, h, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2])``.

tilers applies the map where the program is traced: every element access of an annotated
buffer goes to the storage element ``fn(index)`` (read row-major in the buffer's own logical
shape, so a tensor parameter keeps the shape its caller passes), and a ``T.copy``,
``T.fill`` or tile ``T.atomic_*`` on such a buffer becomes a ``T.Parallel`` loop of element
accesses, bounds checked as the tile operation is. Operations that need the buffer's own
layout (``T.gemm``, reductions) refuse it at the user's line. A layout must be a bijection
onto its storage: checked exactly when the buffer has at most 2**22 elements, else the
extents' product is compared and 2**16 sampled indices are checked for collisions.

``T.Fragment`` (a fragment's thread mapping) is accepted as a hint: which thread holds which
element of a fragment cannot change what a program computes (tilers allows no access to a
fragment by thread index), and tilers chooses fragment layouts from the instructions that
use them; the report shows the chosen ones.
"""

from __future__ import annotations

import builtins as _builtins
import inspect

from . import _trace


class _Bound:
    """An index expression's range ``[lo, hi]`` over the layout's inputs, built by the same
    operators the index function applies (ints, or traced values for symbolic sizes)."""

    __slots__ = ("hi", "lo")

    def __init__(self, lo, hi):
        self.lo = lo
        self.hi = hi

    @staticmethod
    def of(x):
        if isinstance(x, _Bound):
            return x
        if isinstance(x, _builtins.int) and not isinstance(x, _builtins.bool):
            return _Bound(x, x)
        raise _Unsupported(f"a {type(x).__name__} in an index expression")

    def _const(self, other, op):
        if not (isinstance(other, _builtins.int) and not isinstance(other, _builtins.bool)):
            raise _Unsupported(f"`{op}` by a {type(other).__name__} (only by integer constants)")
        return other

    def __add__(self, other):
        o = _Bound.of(other)
        return _Bound(self.lo + o.lo, self.hi + o.hi)

    __radd__ = __add__

    def __sub__(self, other):
        c = self._const(other, "-")
        return _Bound(self.lo - c, self.hi - c)

    def __mul__(self, other):
        if isinstance(other, _Bound):
            if not (_nonneg(self.lo) and _nonneg(other.lo)):
                raise _Unsupported("a product of two ranges that may be negative")
            return _Bound(self.lo * other.lo, self.hi * other.hi)
        c = self._const(other, "*")
        if c < 0:
            raise _Unsupported("a multiplication by a negative constant")
        return _Bound(self.lo * c, self.hi * c)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        c = self._const(other, "//")
        if c <= 0:
            raise _Unsupported("a division by a constant that is not positive")
        return _Bound(self.lo // c, self.hi // c)

    def __mod__(self, other):
        c = self._const(other, "%")
        if c <= 0:
            raise _Unsupported("a remainder by a constant that is not positive")
        if isinstance(self.hi, _builtins.int) and 0 <= self.lo and self.hi < c:
            return self
        return _Bound(0, c - 1)

    def __and__(self, other):
        c = self._const(other, "&")
        if c < 0:
            raise _Unsupported("`&` with a negative constant")
        hi = min(self.hi, c) if isinstance(self.hi, _builtins.int) else c
        return _Bound(0, hi)

    __rand__ = __and__

    def __rshift__(self, other):
        c = self._const(other, ">>")
        return _Bound(self.lo >> c, self.hi >> c)

    def __lshift__(self, other):
        c = self._const(other, "<<")
        return _Bound(self.lo << c, self.hi << c)

    def _bits(self, other, op):
        o = _Bound.of(other)
        his = [self.hi, o.hi]
        if not all(isinstance(h, _builtins.int) for h in his):
            raise _Unsupported(f"`{op}` of a range with a symbolic bound")
        if self.lo < 0 or o.lo < 0:
            raise _Unsupported(f"`{op}` of a range that may be negative")
        top = max(his)
        return _Bound(0, (1 << top.bit_length()) - 1)

    def __xor__(self, other):
        return self._bits(other, "^")

    __rxor__ = __xor__

    def __or__(self, other):
        return self._bits(other, "|")

    __ror__ = __or__


def _nonneg(x):
    return not isinstance(x, _builtins.int) or x >= 0


class _Unsupported(Exception):
    pass


def _outputs(fn, args):
    out = fn(*args)
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


class Layout:
    """``T.Layout(shape, fn)``: the storage index of each logical index of a buffer of
    ``shape`` (see the module's docstring), for ``T.annotate_layout({buf: layout})``."""

    def __init__(self, shape, forward_fn):
        loc = _trace.capture()
        self.loc = loc
        if not callable(forward_fn):
            raise _trace.user_error(
                f"T.Layout(shape, fn): fn must be a function of the indices, got "
                f"{type(forward_fn).__name__}",
                loc=loc,
                help="e.g. T.Layout(A.shape, lambda i, j: [j, i])",
            )
        if isinstance(shape, (_builtins.int, _trace.Expr)):
            shape = (shape,)
        self.input_shape = tuple(shape)
        rank = len(self.input_shape)
        try:
            params = inspect.signature(forward_fn).parameters.values()
            positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            if not any(p.kind == p.VAR_POSITIONAL for p in params) and len(positional) != rank:
                raise _trace.user_error(
                    f"T.Layout: the shape has {rank} dimension{'s' if rank != 1 else ''} but "
                    f"the index function takes {len(positional)} argument"
                    f"{'s' if len(positional) != 1 else ''}",
                    loc=loc,
                    help="give the function one argument per dimension of the shape",
                )
        except (TypeError, ValueError):
            pass
        self.fn = forward_fn
        for d in self.input_shape:
            if isinstance(d, _builtins.int) and d <= 0:
                raise _trace.user_error(
                    f"T.Layout: the shape {list(self.input_shape)} has a dimension that is "
                    "not positive",
                    loc=loc,
                    help="pass the buffer's shape, e.g. T.Layout(A.shape, fn)",
                )
        try:
            bounds = _outputs(forward_fn, [_Bound(0, d - 1) for d in self.input_shape])
            bounds = [_Bound.of(b) for b in bounds]
        except _Unsupported as err:
            raise _trace.user_error(
                f"T.Layout: the index function uses {err}, which tilers cannot bound",
                loc=loc,
                help="write storage indices with +, -, *, //, % (and &, ^, |, <<, >>) of the "
                "indices and integer constants",
            ) from None
        for k, b in enumerate(bounds):
            if isinstance(b.lo, _builtins.int) and b.lo < 0:
                raise _trace.user_error(
                    f"T.Layout: storage index {k} of the index function can be negative "
                    f"(down to {b.lo})",
                    loc=loc,
                    help="storage indices count from 0",
                )
        self.output_shape = tuple(b.hi + 1 for b in bounds)
        self._checked = False

    # TileLang's accessors
    def get_input_shape(self):
        return list(self.input_shape)

    def get_output_shape(self):
        return list(self.output_shape)

    def map_forward_index(self, indices):
        return _outputs(self.fn, list(indices))

    def __repr__(self):
        return f"T.Layout({list(self.input_shape)} -> {list(self.output_shape)})"

    def check_bijection(self, buffer, loc):
        """Raise a user error naming both lines unless the layout maps the elements of
        ``buffer`` one to one onto its storage."""
        if self._checked:
            return
        where = f"(the layout is made at {self.loc.file}:{self.loc.line})" if self.loc else ""
        if tuple(self.input_shape) != tuple(buffer.shape):
            raise _trace.user_error(
                f"T.annotate_layout: the layout is for shape {list(self.input_shape)}, but "
                f"'{buffer.name}' is {list(buffer.shape)} {where}",
                loc=loc,
                help=f"make the layout from the buffer's shape: T.Layout({buffer.name}.shape, fn)",
            )
        fixed = all(isinstance(d, _builtins.int) for d in self.input_shape + self.output_shape)
        if not fixed:
            self._checked = True  # symbolic sizes: only the bound check above applies
            return
        n_in = _prod(self.input_shape)
        n_out = _prod(self.output_shape)
        if n_in != n_out:
            raise _trace.user_error(
                f"T.annotate_layout: the layout of '{buffer.name}' is not a bijection: its "
                f"{n_in} elements map into a storage of shape {list(self.output_shape)} "
                f"({n_out} elements) {where}",
                loc=loc,
                help="each element needs its own storage index and every storage index an "
                "element: the storage's extents must multiply to the buffer's size",
            )
        collision = self._collision(n_in)
        if collision is not None:
            a, b, p = collision
            raise _trace.user_error(
                f"T.annotate_layout: the layout of '{buffer.name}' is not a bijection: "
                f"{list(a)} and {list(b)} both map to storage index {list(p)} {where}",
                loc=loc,
                help="each element needs its own storage index",
            )
        self._checked = True

    def _collision(self, n):
        import numpy as np

        shape = self.input_shape
        if n <= 1 << 22:
            flat = np.arange(n, dtype=np.int64)
        else:
            flat = np.unique(np.random.default_rng(0).integers(0, n, 1 << 16, dtype=np.int64))
        idx = np.unravel_index(flat, shape)
        try:
            outs = _outputs(self.fn, [np.asarray(i, dtype=np.int64) for i in idx])
            outs = [np.broadcast_to(np.asarray(o, dtype=np.int64), flat.shape) for o in outs]
        except Exception:  # an index function numpy cannot evaluate: bounds only
            return None
        for o, e in zip(outs, self.output_shape):
            if (o < 0).any() or (o >= e).any():
                return None  # cannot happen with the bounds found; be safe
        lin = np.ravel_multi_index(tuple(outs), self.output_shape)
        order = np.argsort(lin, kind="stable")
        dup = np.nonzero(lin[order][1:] == lin[order][:-1])[0]
        if len(dup) == 0:
            return None
        i, j = order[dup[0]], order[dup[0] + 1]
        point = lambda k: tuple(int(x[k]) for x in idx)  # noqa: E731
        return point(i), point(j), tuple(int(o[i]) for o in outs)


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


class Fragment:
    """``T.Fragment(shape, forward_thread_fn=..., replicate=..., forward_index_fn=...)``:
    TileLang's thread mapping of a fragment, accepted as a hint (see the module's
    docstring): tilers chooses each fragment's layout from the instructions that use it."""

    def __init__(self, shape, forward_fn=None, forward_thread_fn=None, replicate=1,
                 forward_index_fn=None, **kwargs):
        self.loc = _trace.capture()
        if isinstance(shape, (_builtins.int, _trace.Expr)):
            shape = (shape,)
        self.input_shape = tuple(shape)
        self.replicate = replicate
        self.forward_thread_fn = forward_thread_fn
        self.forward_index_fn = forward_index_fn
        if forward_thread_fn is None and forward_fn is not None:
            # forward_fn(i, ...) -> (thread, index)
            self.forward_thread_fn = lambda *i: forward_fn(*i)[0]
            self.forward_index_fn = lambda *i: forward_fn(*i)[1]
        if forward_fn is None and forward_thread_fn is None:
            raise _trace.user_error(
                "T.Fragment needs forward_fn or forward_thread_fn (which thread holds an element)",
                loc=self.loc,
                help="e.g. T.Fragment(shape, forward_thread_fn=lambda i, j: ..., forward_index_fn=...)",
            )

    def get_input_shape(self):
        return list(self.input_shape)

    def __repr__(self):
        return f"T.Fragment({list(self.input_shape)})"


def storage_indices(buffer, indices):
    """The logical index of ``buffer`` (its declared shape, row-major) whose element holds the
    element ``indices`` under the buffer's user layout."""
    layout = buffer.user_layout
    outs = layout.map_forward_index(indices)
    offset = None
    for p, extent in zip(outs, layout.output_shape):
        offset = p if offset is None else offset * extent + p
    out = []
    for d in reversed(buffer.shape[1:]):
        out.append(offset % d if d != 1 else 0)
        offset = offset // d
    out.append(offset)
    return tuple(reversed(out))


# ----------------------------------------------------------------------------------------
# tile operations on a buffer with a user layout: a T.Parallel loop of element accesses


def has_user_layout(x) -> bool:
    buffer = x if isinstance(x, _trace.Buffer) else getattr(x, "buffer", None)
    return isinstance(buffer, _trace.Buffer) and buffer.user_layout is not None


def _linear(node):
    """``node`` (an int expression) as {leaf: coefficient} with the constant under None, or
    None when it is not a sum of constant multiples."""
    op = node.get("op")
    if op == "const" and isinstance(node.get("value"), _builtins.int):
        return {None: node["value"]}
    if op in ("add", "sub"):
        a, b = _linear(node["a"]), _linear(node["b"])
        if a is None or b is None:
            return None
        sign = 1 if op == "add" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    if op == "mul":
        a, b = _linear(node["a"]), _linear(node["b"])
        if a is None or b is None:
            return None
        for const, other in ((a, b), (b, a)):
            if set(const) == {None}:
                return {k: v * const[None] for k, v in other.items()}
        return None
    import json

    return {json.dumps(node, sort_keys=True): 1}


def _extent(start, stop, loc):
    if isinstance(start, _builtins.int) and isinstance(stop, _builtins.int):
        return stop - start
    diff = _linear(_trace.literal(stop - start).node())
    if diff is not None and all(v == 0 for k, v in diff.items() if k is not None):
        return diff.get(None, 0)
    raise _trace.user_error(
        "a slice of a buffer with a user layout must have a constant extent",
        loc=loc,
        help="slice as A[i0:i0 + 64] with a constant width",
    )


def _operand(x, loc):
    """``(buffer, dims)``: per dimension ``["slice", start, extent]``, ``["origin", start]``
    or ``["index", i]``."""
    if isinstance(x, _trace.Buffer):
        return x, [["slice", 0, d] for d in x.shape]
    if not isinstance(x, _trace.Load):
        raise _trace.user_error(
            f"expected a buffer or a subscript such as A[i, 0:64], got {type(x).__name__}",
            loc=loc,
            help="pass a buffer or a region of one",
        )
    buffer = x.buffer
    origin = not x.has_slices()
    dims = []
    for d, extent in enumerate(buffer.shape):
        if d >= len(x.indices):
            dims.append(["slice", 0, extent])
            continue
        i = x.indices[d]
        if isinstance(i, slice):
            if i.step is not None:
                raise _trace.user_error("slices with a step are not supported", loc=x.loc,
                                        help="copy a contiguous region")
            start = 0 if i.start is None else i.start
            stop = extent if i.stop is None else i.stop
            dims.append(["slice", start, _extent(start, stop, x.loc)])
        elif origin:
            dims.append(["origin", i])
        else:
            dims.append(["index", i])
    return buffer, dims


def _resolve_origins(dims, other_dims):
    """Origin dimensions take the other operand's extents, matched from the right."""
    if not any(d[0] == "origin" for d in dims):
        return
    extents = [d[2] for d in other_dims if d[0] == "slice"]
    for d in reversed(dims):
        if d[0] == "origin":
            d[:] = ["slice", d[1], extents.pop() if extents else 1]
        elif d[0] == "slice" and extents:
            extents.pop()


def _shape(dims):
    return [d[2] for d in dims if d[0] == "slice" and d[2] != 1]


def _indices(dims, loop_vars):
    """The element index of each dimension, loop variables taking the slices of extent > 1
    in order; and the bounds conditions of a global buffer's slices."""
    it = iter(loop_vars)
    out = []
    for d in dims:
        if d[0] == "index":
            out.append(d[1])
        elif d[2] == 1:
            out.append(d[1])
        else:
            v = next(it)
            out.append(v if isinstance(d[1], _builtins.int) and d[1] == 0 else d[1] + v)
    return out


def _in_bounds(buffer, dims, indices):
    if buffer.scope != "global":
        return None
    cond = None
    for d, (dim, i) in enumerate(zip(dims, indices)):
        extent = buffer.shape[d]
        if dim[0] == "slice" and isinstance(dim[1], _builtins.int) and isinstance(extent, _builtins.int) \
                and dim[1] >= 0 and dim[1] + dim[2] <= extent:
            continue
        c = i < extent
        cond = c if cond is None else (cond & c)
    return cond


def expand(what, src, dst, loc, *, pad=None, atomic=None, memory_order=None, fill_value=None, remote=None):
    """``T.copy(src, dst)`` (or a tile atomic, or ``T.fill(dst, fill_value)`` with src None)
    where a buffer has a user layout, as a T.Parallel loop of element accesses. ``remote``
    (view, rank): ``T.copy_cluster``'s, the stores land in block ``rank`` of the cluster,
    through ``dst``'s cluster view."""
    from . import language as T

    builder = _trace.current_builder()
    dbuf, ddims = _operand(dst, loc)
    if src is not None:
        sbuf, sdims = _operand(src, loc)
        _resolve_origins(sdims, ddims)
        _resolve_origins(ddims, sdims)
        if _shape(sdims) != _shape(ddims):
            raise _trace.user_error(
                f"{what}: the regions of '{sbuf.name}' {_shape(sdims)} and '{dbuf.name}' "
                f"{_shape(ddims)} do not have the same shape",
                loc=loc,
                help="copy regions of the same shape (dimensions of extent 1 aside)",
            )
    else:
        _resolve_origins(ddims, [])
    for buf in (dbuf,) if src is None else (sbuf, dbuf):
        if buf.scope == "fragment" and buf.user_layout is not None:
            raise _trace.user_error(
                f"{what}: the fragment '{buf.name}' has a T.Layout",
                loc=loc,
                help="a fragment's layout says which thread holds an element: use T.Fragment",
            )
    shape = _shape(ddims)
    if len(shape) > 4:
        raise _trace.user_error(
            f"{what} on a buffer with a user layout spans {len(shape)} dimensions; at most 4",
            loc=loc,
            help="split the copy along its leading dimensions",
        )
    if not shape:
        shape = [1]
    loop_vars = [builder.new_var(f"i{len(builder.vars)}_{k}", "loop") for k in range(len(shape))]
    body = T._parallel_body(builder, loop_vars, shape, loc)
    next(body)
    lv = loop_vars if _shape(ddims) else []
    didx = _indices(ddims, lv)
    dcond = _in_bounds(dbuf, ddims, didx)
    if src is not None:
        sidx = _indices(sdims, lv)
        value = sbuf[tuple(sidx)] if sidx else sbuf[0]
        scond = _in_bounds(sbuf, sdims, sidx)
        if scond is not None:
            value = T.if_then_else(scond, value, _trace.literal(0 if pad is None else pad, sbuf.dtype))
    else:
        value = fill_value

    def write():
        if remote is not None:
            view, rank = remote
            view[(rank,) + tuple(didx)] = value
            return
        target = dbuf[tuple(didx)]
        if atomic is not None:
            T._atomic(atomic, target, value, memory_order, False)
        else:
            dbuf[tuple(didx)] = value

    if dcond is not None:
        with T.If(dcond):
            write()
    else:
        write()
    next(body, None)
