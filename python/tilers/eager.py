"""The eager ``@tilers.jit``: a function that declares its tensors in its body and is called
with them.

    @tilers.jit
    def matmul(A, B, block_M, block_N, block_K, dtype=T.float16):
        M, N, K = T.const("M, N, K")
        A: T.Tensor((M, K), dtype)
        B: T.Tensor((K, N), dtype)
        C = T.empty((M, N), dtype)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            ...
        return C

    C = matmul(a, b, 128, 128, 32)

How it works. At decoration the function's source is parsed and rewritten (its own file and
lines, so errors point at them): a bare annotation ``A: T.Tensor(...)`` or ``n: T.int32`` of a
parameter becomes a declaration of a kernel parameter, a header annotation the same, and a
``for ... in range(...)`` inside ``with T.Kernel`` becomes a ``T.serial`` loop. A call binds
its arguments to the signature: the parameters declared that way are the kernel's runtime
arguments, every other one is a configuration value of the compilation. ``T.const`` names are
bound from the shapes of the tensors a call receives (the first dimension that is the name
itself; a keyword of that name wins), so each distinct shape compiles a kernel of its own;
``T.dynamic`` names stay symbolic. The body is then traced once per (shapes, dtypes,
configuration) into the program ``tilers.compile`` would make; the compiled kernel takes the
runtime arguments in signature order followed by the ``T.empty`` outputs, which it allocates
and returns.
"""

from __future__ import annotations

import ast
import inspect
import threading

from . import _rewrite, _trace
from ._source import Loc, capture, user_error
from .errors import TileError

_HELPER = "__tilers_eager__"
_EXTRA = "__tilers_kwargs__"
_TENSOR_NAMES = ("Tensor", "Buffer", "StridedTensor")


# ----------------------------------------------------------------------------------------
# which style a @tilers.jit function is


def is_eager(func) -> bool:
    """The rule (docs/porting.md): a function containing a nested ``@T.prim_func`` is a
    factory; one whose own body opens ``with T.Kernel(...)``, or calls ``T.const`` or
    ``T.empty``, is eager; anything else (or a function without source) is a factory."""
    syntax = _rewrite.syntax(func)
    if syntax is None:
        return False
    definition = syntax[1]
    eager = False
    for node in _own_nodes(definition):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not definition:
            if any(_rewrite.attr_name(d) == "prim_func" for d in node.decorator_list):
                return False
        if isinstance(node, ast.With) and _rewrite.is_kernel_with(node):
            eager = True
        if isinstance(node, ast.Call) and _rewrite.attr_name(node.func) in ("const", "empty"):
            eager = True
    return eager


def _own_nodes(definition):
    """Every node of a function body, nested function definitions included (but not their
    bodies)."""
    pending = list(definition.body)
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(getattr(node, "decorator_list", []))
            continue
        pending.extend(ast.iter_child_nodes(node))


# ----------------------------------------------------------------------------------------
# the rewrite


def _declaration(name: str, annotation, loc_node, header: bool):
    """``name = __tilers_eager__.declare("name", <annotation>, header)``."""
    call = ast.Call(
        ast.Attribute(ast.Name(_HELPER, ast.Load()), "declare", ast.Load()),
        [ast.Constant(name), annotation, ast.Constant(header)],
        [],
    )
    stmt = ast.Assign([ast.Name(name, ast.Store())], call)
    for node in ast.walk(stmt):
        ast.copy_location(node, loc_node)
    return stmt


class Rewritten:
    """The rewritten function's code and what the rewrite learned about the parameters."""

    def __init__(self, func):
        syntax = _rewrite.syntax(func)
        if syntax is None:
            raise TileError(
                f"@tilers.jit: the source of '{func.__name__}' is not available, so its eager "
                "body cannot be read (define it in a file, not in an interactive string)"
            )
        source, definition = syntax
        _rewrite.check_source_is_current(func)
        definition.decorator_list = []
        definition.returns = None
        params = inspect.signature(func).parameters
        for p in params.values():
            if p.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise user_error(
                    f"eager @tilers.jit function '{func.__name__}' has a positional-only "
                    f"parameter '{p.name}'",
                    loc=Loc(func.__code__.co_filename, definition.lineno, definition.col_offset + 1),
                    help="remove the `/` from the signature",
                )
        self.runtime: dict[str, str] = {}  # parameter -> "tensor" | "scalar" (as written)
        header = []
        args = definition.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            if arg.annotation is not None:
                kind = _annotation_kind(arg.annotation)
                if kind is not None:
                    self.runtime[arg.arg] = kind
                    header.append(_declaration(arg.arg, arg.annotation, arg.annotation, True))
                arg.annotation = None
        for arg in (args.vararg, args.kwarg):
            if arg is not None:
                arg.annotation = None
        body = []
        for stmt in definition.body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and stmt.value is None
                and isinstance(stmt.target, ast.Name)
            ):
                name = stmt.target.id
                kind = _annotation_kind(stmt.annotation)
                if kind is not None:
                    if name not in params:
                        raise user_error(
                            f"'{name}: {ast.unparse(stmt.annotation)}' declares a kernel "
                            f"{kind}, but '{name}' is not a parameter of {func.__name__}",
                            loc=Loc(func.__code__.co_filename, stmt.lineno, stmt.col_offset + 1),
                            help=f"add '{name}' to the parameters, or allocate an output "
                            f"with {name} = T.empty(shape, dtype)",
                        )
                    self.runtime[name] = kind
                    body.append(_declaration(name, stmt.annotation, stmt, False))
                    continue
            body.append(stmt)
        definition.body = header + body
        if args.kwarg is None:
            args.kwarg = ast.arg(_EXTRA)
            self.extra = _EXTRA
        else:
            self.extra = args.kwarg.arg
        # range loops and Python control flow inside `with T.Kernel` (tilers/_rewrite.py)
        rewrite = _rewrite.ControlFlow(range_loops=True, helper=_HELPER)
        body = []
        for stmt in definition.body:
            done = rewrite.visit(stmt)
            body.extend(done if isinstance(done, list) else [done])
        definition.body = body
        ast.fix_missing_locations(definition)
        self.freevars = func.__code__.co_freevars
        self.make = _rewrite.make_maker(func, definition, [_HELPER])
        self.func = func

    def function(self, helper):
        """The rewritten function, its free names read from the original's closure now."""
        values = []
        for name, cell in zip(self.freevars, self.func.__closure__ or ()):
            try:
                values.append(cell.cell_contents)
            except ValueError:
                raise TileError(
                    f"{self.func.__name__} reads '{name}', which is not assigned yet"
                ) from None
        return self.make(helper, *values)


def _annotation_kind(node) -> str | None:
    """"tensor" for ``T.Tensor(...)`` / ``T.Tensor[...]`` (and Buffer, StridedTensor),
    "scalar" for ``T.int32`` and the other dtypes, else None (a configuration value)."""
    target = node
    if isinstance(target, (ast.Call, ast.Subscript)):
        target = target.func if isinstance(target, ast.Call) else target.value
        name = _rewrite.attr_name(target)
        return "tensor" if name in _TENSOR_NAMES else None
    if isinstance(target, ast.Attribute) and target.attr in _SCALAR_NAMES:
        return "scalar"
    return None


_SCALAR_NAMES = set(_trace.DTYPES) | {"float", "int", "uint", "half", "double", "short", "long"}


# ----------------------------------------------------------------------------------------
# one trace


_state = threading.local()


def current() -> _Trace | None:
    return getattr(_state, "trace", None)


class _Stop(Exception):
    """Raised at the first T.Kernel of a discovery trace: the declarations are all known."""


class _Trace(_rewrite.Flow):
    """The state of tracing one eager call: the argument values by name, the T.const values,
    and the parameters declared so far."""

    def __init__(self, eager: EagerFunction, values: dict, consts: dict | None, builder):
        self.eager = eager
        self.values = values
        self.consts = consts  # None while discovering
        self.builder = builder
        self.inputs: list[tuple[str, dict]] = []  # (name, builder param) as declared
        self.outputs: list = []  # Buffers of T.empty, in declaration order
        self.declared_shapes: list[tuple[str, tuple]] = []  # for binding T.const names
        self.const_names: dict[str, object] = {}  # name -> placeholder (discovery)
        self.const_locs: dict[str, Loc] = {}
        self.discovered_shapes: list = []  # the discovery trace's declared_shapes
        self.sources: dict[str, tuple] = {}  # T.const name -> (value, where it came from)

    # --- helpers called by the rewritten code ---------------------------------------

    def declare(self, name: str, annotation, header: bool):
        from . import language as T  # noqa: F401  (the annotation was evaluated already)

        value = self.values.get(name, _MISSING)
        loc = capture()
        if isinstance(annotation, _trace.TensorType):
            return self._declare_tensor(name, annotation, value, loc)
        if isinstance(annotation, _trace.DType) and not isinstance(annotation, type):
            return self._declare_scalar(name, annotation, value, loc)
        if header:  # a configuration value with a Python annotation (block_M: int = 128)
            return value
        raise user_error(
            f"the annotation of '{name}' is neither a tensor (T.Tensor(shape, dtype)) nor a "
            f"scalar dtype (T.int32), got {annotation!r}",
            loc=loc,
        )

    def _declare_tensor(self, name, annotation, value, loc):
        self.declared_shapes.append((name, annotation.shape))
        if self.consts is None:
            return value
        dims = annotation.shape if isinstance(annotation.shape, (tuple, list)) else (annotation.shape,)
        for axis, d in enumerate(dims):
            if isinstance(d, int) and not isinstance(d, bool) and d <= 0:
                raise user_error(
                    f"parameter '{name}': dimension {axis} is {d}; a T.const or fixed size "
                    "must be positive",
                    loc=loc,
                    help="declare the size with T.dynamic (one kernel for every value, 0 "
                    "included) to take empty tensors",
                )
        shape = _trace._tensor_shape(name, annotation.shape, loc)
        for d in shape:
            if isinstance(d, _trace.Size):
                self.builder.size_var(d)
        try:
            dtype = _trace.normalize_dtype(annotation.dtype)
        except TileError:
            raise user_error(
                f"parameter '{name}' has unknown dtype {annotation.dtype!r}"
                if not _trace.is_reserved(annotation.dtype) else
                f"parameter '{name}': " + _trace._reserved_message(annotation.dtype)[0],
                loc=loc,
                help="use one of: " + ", ".join(_trace.DTYPES),
            ) from None
        _check_tensor_value(self, name, shape, dtype, value, loc)
        buffer = self.builder.new_buffer(name, "global", dtype, shape, loc)
        param = {"kind": "tensor", "name": name, "buffer": buffer.id}
        self.inputs.append((name, param))
        return buffer

    def _declare_scalar(self, name, dtype, value, loc):
        if self.consts is None:
            return value
        var = self.builder.new_var(name, "param", _trace.normalize_dtype(dtype))
        param = {"kind": "scalar", "name": name, "var": var.node()["id"]}
        self.inputs.append((name, param))
        return var

    # --- T.const and T.empty ------------------------------------------------------------

    def const(self, names: list[str], dtype: str, loc: Loc):
        values = []
        for name in names:
            if name in self.const_locs:
                raise user_error(
                    f"T.const: '{name}' is declared twice", loc=loc,
                    help=f"declare each size once; the first is at line {self.const_locs[name].line}",
                )
            self.const_locs[name] = loc
            if self.consts is None:
                placeholder = _trace.Size(name, dtype, 1, loc)
                self.const_names[name] = placeholder
                values.append(placeholder)
            elif name not in self.consts:
                # a size no tensor gave: first, a non-tensor where a tensor was declared
                for param, kind in self.eager.rewritten.runtime.items():
                    value = self.values.get(param)
                    if kind == "tensor" and value is not None and not isinstance(value, _trace.TensorType) \
                            and not (hasattr(value, "shape") and hasattr(value, "dtype")):
                        raise TypeError(
                            f"{self.eager.__name__}: parameter '{param}' expects a tensor, got "
                            f"{type(value).__name__} {value!r:.60}"
                        )
                raise user_error(
                    f"T.const size '{name}' has no value: it is not a dimension of any tensor "
                    "parameter this call was given, and no keyword names it",
                    loc=loc,
                    help=f"use '{name}' itself as a dimension of an input tensor "
                    f"(A: T.Tensor(({name}, ...), dtype)), or pass {name}=... to the call "
                    "or to .compile()",
                )
            else:
                values.append(self.consts[name])
        return values

    def empty(self, shape, dtype, loc: Loc):
        if self.consts is None:
            return _Placeholder()
        dims = shape if isinstance(shape, (tuple, list)) else (shape,)
        name = _trace.assigned_name(loc) or f"out{len(self.outputs)}"
        shape = _trace._tensor_shape(name, dims, loc)
        for d in shape:
            if isinstance(d, _trace.Size):
                self.builder.size_var(d)
        buffer = self.builder.new_buffer(name, "global", _trace.normalize_dtype(dtype), shape, loc)
        self.outputs.append((buffer, {"kind": "tensor", "name": buffer.name, "buffer": buffer.id}, loc))
        return buffer


class _Placeholder:
    """What T.empty gives while discovering (the trace stops before it is used)."""


_MISSING = object()


def _check_tensor_value(trace: _Trace, name: str, shape: tuple, dtype: str, value, loc: Loc):
    """A call's tensor for parameter `name` against its declaration: an error naming the
    parameter, what it needs and what it got (before anything is compiled or written)."""
    if value is _MISSING or value is None or isinstance(value, _trace.TensorType):
        return  # .compile() without tensors
    fn = trace.eager.__name__
    text = _declared_text(trace, name, shape)
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise TypeError(
            f"{fn}: parameter '{name}' expects a tensor ({dtype}{text}), got "
            f"{type(value).__name__} {value!r:.60}"
        )
    got_dtype = _dtype_name(value.dtype)
    if got_dtype != dtype:
        raise ValueError(f"{fn}: parameter '{name}' expects dtype {dtype}, got {got_dtype}")
    got = tuple(int(d) for d in value.shape)
    if len(got) != len(shape):
        raise ValueError(
            f"{fn}: parameter '{name}' expects a {len(shape)}-D tensor {text}, "
            f"got shape {list(got)}"
        )
    for axis, (want, have) in enumerate(zip(shape, got)):
        if isinstance(want, _trace.Size) or want == have:
            continue
        which = _which_const(trace, name, axis)
        raise ValueError(
            f"{fn}: parameter '{name}': dimension {axis} must be {which or want}, got {have} "
            f"(shape {list(got)})"
        )


def _which_const(trace: _Trace, name: str, axis: int) -> str | None:
    """"K = 64 (from A.shape[1])" when that dimension is a T.const bound elsewhere."""
    for param, dims in trace.discovered_shapes:
        dims = dims if isinstance(dims, (tuple, list)) else (dims,)
        if param == name and axis < len(dims) and isinstance(dims[axis], _trace.Size):
            const = dims[axis].name
            if const in trace.sources:
                value, source = trace.sources[const]
                return f"{const} = {value} ({source})"
    return None


def _declared_text(trace: _Trace, name: str, shape: tuple) -> str:
    """``[M=64, 16]``: a declared shape, each T.const dimension with its name."""
    names = {}
    for param, dims in trace.discovered_shapes:
        if param == name:
            dims = dims if isinstance(dims, (tuple, list)) else (dims,)
            names = {a: d.name for a, d in enumerate(dims) if isinstance(d, _trace.Size)}
    parts = []
    for axis, d in enumerate(shape):
        if isinstance(d, _trace.Size):
            parts.append(d.name)
        elif axis in names:
            parts.append(f"{names[axis]}={d}")
        else:
            parts.append(str(d))
    return "[" + ", ".join(parts) + "]"


def _dtype_name(dtype) -> str:
    text = str(dtype).removeprefix("torch.")
    try:
        return _trace.normalize_dtype(text)
    except TileError:
        return text


# ----------------------------------------------------------------------------------------
# the eager function


class EagerFunction:
    """An eager ``@tilers.jit`` function (see the module docstring)."""

    def __init__(self, func, options: dict):
        self.func = func
        self.__name__ = func.__name__
        self.__qualname__ = getattr(func, "__qualname__", func.__name__)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self.options = options
        self.signature = inspect.signature(func)
        self.rewritten = Rewritten(func)
        self._names = [
            p.name for p in self.signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)
        ]
        self._scalar_at = [self.rewritten.runtime.get(n) == "scalar" for n in self._names]
        self._calls: dict = {}  # call key -> (kernel, runtime argument getters)
        self._kernels: dict = {}  # program text -> JITKernel

    def __repr__(self):
        return f"<eager tilers.jit {self.__name__}>"

    # --- calling ------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        try:
            key = self._key(args, kwargs)
            entry = self._calls.get(key)
        except TypeError:  # an unhashable configuration value: no memo
            key, entry = None, None
        if entry is None:
            entry = self._prepare(args, kwargs)
            if key is not None:
                self._calls[key] = entry
        kernel, getters = entry
        if getters is None:  # the runtime arguments are the call's, in order
            return kernel(*args)
        inputs = [
            args[g] if type(g) is int else kwargs[g] if type(g) is str else g[0] for g in getters
        ]
        return kernel(*inputs)

    def compile(self, *args, **kwargs):
        """The kernel for these arguments without running it: tensors may be left out when
        every T.const size is given by keyword (``f.compile(M=1024, N=1024, K=1024,
        block_M=128, ...)``); the kernel is called with the runtime arguments and returns the
        outputs."""
        return self._prepare(args, kwargs, allow_missing=True)[0]

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self.compile(*args, **kwargs).get_kernel_source()

    def _key(self, args, kwargs):
        # the hot path of every call: a tensor's shape and dtype (torch and numpy give
        # hashable ones), a runtime scalar's type, a configuration value with its type
        scalars = self._scalar_at
        parts = []
        for i, a in enumerate(args):
            shape = getattr(a, "shape", None)
            if shape is not None:
                parts.append((type(a), shape, a.dtype))
            elif i < len(scalars) and scalars[i]:
                parts.append(type(a))
            else:
                parts.append((type(a), a))
        if kwargs:
            runtime = self.rewritten.runtime
            parts.append(tuple(sorted((k, _arg_key(v, runtime.get(k))) for k, v in kwargs.items())))
        key = tuple(parts)
        hash(key)
        return key

    def _prepare(self, args, kwargs, allow_missing=False):
        """Bind, trace and compile one call's kernel; and where its runtime arguments are."""
        params = self.signature.parameters
        takes_keywords = any(p.kind is p.VAR_KEYWORD for p in params.values())
        extra = {} if takes_keywords else {k: v for k, v in kwargs.items() if k not in params}
        known = {k: v for k, v in kwargs.items() if k not in extra}
        try:
            if allow_missing:
                bound = self.signature.bind_partial(*args, **known)
            else:
                bound = self.signature.bind(*args, **known)
        except TypeError as error:
            raise TypeError(f"{self.__name__}(): {error}") from None
        bound.apply_defaults()
        values = dict(bound.arguments)
        missing = [
            p.name for p in params.values()
            if p.name not in values and p.name not in self.rewritten.runtime
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        if missing:
            raise TypeError(
                f"{self.__name__}.compile(): missing configuration value(s): {', '.join(missing)}"
            )
        kernel = self._kernel_for(values, extra)
        getters = []
        positions = {name: i for i, name in enumerate(self._names)}
        for spec in kernel.info["params"]:
            if len(getters) == len(kernel.info["params"]) - len(kernel.out_idx):
                break
            name = spec["name"]
            i = positions.get(name)
            if name in kwargs:
                getters.append(name)
            elif i is not None and i < len(args):
                getters.append(i)
            else:  # a default value
                getters.append((values.get(name),))
        if not kwargs and getters == list(range(len(args))):
            getters = None
        return kernel, getters

    def _kernel_for(self, values: dict, extra: dict):
        program, out_idx = self.trace(values, extra)
        from .jit import build_kernel

        text = _trace.program_json(program)
        kernel = self._kernels.get((text, tuple(out_idx)))
        if kernel is None:
            kernel = build_kernel(program, text, out_idx, **self.options)
            self._kernels[(text, tuple(out_idx))] = kernel
        return kernel

    # --- tracing ------------------------------------------------------------------------

    def trace(self, values: dict, extra: dict) -> tuple[dict, list[int]]:
        """The tile program of a call with these argument values, and its outputs' positions."""
        consts, sources = self._bind_consts(values, extra)
        builder = _trace.Builder(self.__name__)
        trace = _Trace(self, values, consts, builder)
        trace.sources = sources
        trace.discovered_shapes = self._discovered
        result = self._run(trace, values)
        builder.finish("eager function", self.func)
        returned = _returned_buffers(self, trace, result)
        order = {name: i for i, name in enumerate(self.signature.parameters)}
        inputs = sorted(trace.inputs, key=lambda item: order.get(item[0], len(order)))
        builder.params = [param for _, param in inputs] + [param for _, param, _ in trace.outputs]
        first_output = len(inputs)
        index = {buffer.id: first_output + i for i, (buffer, _, _) in enumerate(trace.outputs)}
        out_idx = [index[b.id] for b in returned]
        return builder.program(), out_idx

    def _run(self, trace: _Trace, values: dict):
        """Run the rewritten function with the argument values, tracing into `trace`."""
        function = self.rewritten.function(trace)
        positional, keywords = [], {}
        for p in self.signature.parameters.values():
            value = values.get(p.name)
            if p.kind is p.POSITIONAL_OR_KEYWORD:
                positional.append(value)
            elif p.kind is p.VAR_POSITIONAL:
                positional.extend(value or ())
            elif p.kind is p.KEYWORD_ONLY:
                keywords[p.name] = value
            elif p.kind is p.VAR_KEYWORD:
                keywords.update(value or {})
        previous = getattr(_trace._state, "builder", None)
        previous_trace = current()
        _trace._state.builder = trace.builder
        _state.trace = trace
        try:
            return function(*positional, **keywords)
        except NameError as error:
            how = f"{self.__name__}(..., {{name}}=...) or a parameter named '{{name}}'"
            raise _trace.unbound_name_error(error, how) from None
        finally:
            _trace._state.builder = previous
            _state.trace = previous_trace

    def _bind_consts(self, values: dict, extra: dict) -> tuple[dict, dict]:
        """Each T.const name's value: a keyword naming it, else the first tensor dimension
        that is the name itself (found by a discovery trace that stops at T.Kernel)."""
        builder = _trace.Builder(self.__name__)
        trace = _Trace(self, values, None, builder)
        try:
            self._run(trace, values)
        except _Stop:
            pass
        self._discovered = trace.declared_shapes
        consts, sources = {}, {}
        for name, placeholder in trace.const_names.items():
            if name in extra:
                consts[name] = extra[name]
                sources[name] = (extra[name], f"{name}={extra[name]!r}")
                continue
            for param, dims in trace.declared_shapes:
                value = values.get(param, _MISSING)
                dims = dims if isinstance(dims, (tuple, list)) else (dims,)
                for axis, d in enumerate(dims):
                    if d is placeholder and hasattr(value, "shape") and axis < len(value.shape):
                        consts[name] = int(value.shape[axis])
                        sources[name] = (consts[name], f"from {param}.shape[{axis}]")
                        break
                if name in consts:
                    break
            if name not in consts and not any(
                any(d is placeholder for d in (dims if isinstance(dims, (tuple, list)) else (dims,)))
                for _, dims in trace.declared_shapes
            ):
                raise user_error(
                    f"T.const size '{name}' is not a dimension of any tensor parameter",
                    loc=trace.const_locs[name],
                    help=f"use '{name}' itself (not an expression of it) as a dimension of an "
                    f"input: A: T.Tensor(({name}, ...), dtype); or pass {name}=... by keyword",
                )
        for name, value in extra.items():
            if name not in trace.const_names:
                raise TypeError(
                    f"{self.__name__}() got an unexpected keyword argument '{name}' (neither a "
                    f"parameter nor a T.const size; its sizes: "
                    f"{', '.join(trace.const_names) or 'none'})"
                )
        return consts, sources


def _arg_key(value, runtime: str | None):
    """The part of a call's key one argument gives: a tensor's shape, dtype and kind; a
    runtime scalar's type (its value is an argument of the launch); a configuration value
    itself."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return (type(value), shape, value.dtype)
    if runtime == "scalar":
        return type(value)
    return (type(value), value)


def _returned_buffers(eager: EagerFunction, trace: _Trace, result) -> list:
    """The T.empty outputs the function returns, in the order it returns them."""
    items = [] if result is None else list(result) if isinstance(result, (tuple, list)) else [result]
    outputs = {buffer.id: (buffer, loc) for buffer, _, loc in trace.outputs}
    returned = []
    for item in items:
        if not isinstance(item, _trace.Buffer) or item.id not in outputs:
            what = f"parameter '{item.name}'" if isinstance(item, _trace.Buffer) else type(item).__name__
            raise TileError(
                f"eager function '{eager.__name__}' returns {what}; it can return only the "
                "tensors it allocates with T.empty (inputs are written in place and need not "
                "be returned)"
            )
        returned.append(item)
    missing = [(b, loc) for b, _, loc in trace.outputs if all(r.id != b.id for r in returned)]
    if missing:
        buffer, loc = missing[0]
        raise user_error(
            f"output '{buffer.name}' (T.empty) is not returned by {eager.__name__}",
            loc=loc,
            help=f"return every output the function allocates: return {buffer.name}",
        )
    return returned


# ----------------------------------------------------------------------------------------
# T.const and T.empty (tilers.language calls these)


def const(names, dtype="int32"):
    loc = capture()
    trace = current()
    if trace is None:
        raise user_error(
            "T.const declares the sizes of an eager @tilers.jit function, bound from the "
            "tensors it is called with; this is not one",
            loc=loc,
            help="in a @T.prim_func, pass the sizes to tilers.compile(func, M=...) or make "
            'them symbolic with M = T.dynamic("M")',
        )
    if not isinstance(names, (str, list, tuple)):
        raise user_error(f"T.const takes names, got {names!r}", loc=loc, help='e.g. T.const("M, N, K")')
    import re

    parts = [names] if isinstance(names, str) else list(names)
    split = [n for part in parts for n in re.split(r"[\s,]+", str(part).strip()) if n]
    for n in split:
        if not n.isidentifier():
            raise user_error(f"T.const: {n!r} is not a valid name", loc=loc, help='e.g. T.const("M, N")')
    dtype = _trace.normalize_dtype(dtype)
    values = trace.const(split, dtype, loc)
    several = isinstance(names, (list, tuple)) or len(split) > 1
    return tuple(values) if several else values[0]


def empty(*shape, dtype="float32"):
    loc = capture()
    trace = current()
    if len(shape) == 2 and isinstance(shape[0], (tuple, list)):
        shape, dtype = shape[0], shape[1]
    elif len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    if trace is None:
        raise user_error(
            "T.empty declares an output of an eager @tilers.jit function (allocated per call "
            "and returned); this is not one",
            loc=loc,
            help="in a @T.prim_func, make the output a parameter and list it in out_idx=",
        )
    return trace.empty(tuple(shape), dtype, loc)


def stop_discovery():
    """Called by T.Kernel: a discovery trace ends at the first kernel."""
    trace = current()
    if trace is not None and trace.consts is None:
        raise _Stop()


__all__ = ["EagerFunction", "const", "empty", "is_eager"]
