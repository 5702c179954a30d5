"""Python control flow on traced values inside a kernel body.

TileLang parses a kernel's body, so its users write ``if i < n:``, ``a and b``, ``not c``,
``x if c else y`` and ``lo <= i < hi`` on device values. tilers traces by running Python, and
Python asks such values for a bool. So the body of a kernel function — the statements inside
``with T.Kernel(...)`` — is rewritten before it runs (same file, same lines, so errors still
point at the user's code):

- ``if test: A else: B`` runs ``A`` / ``B`` as Python when ``test`` is a Python value
  (compile-time metaprogramming), and records ``with T.If(test): A`` / ``T.Else(): B`` when
  it is a traced value;
- ``a and b`` / ``a or b`` / ``not a`` keep Python's meaning for Python values and become
  logical operations of traced ones (``b`` is evaluated only where Python would);
- ``x if c else y`` is ``T.if_then_else(c, x, y)`` for a traced ``c``;
- ``a < b < c`` is ``a < b and b < c``;
- ``x = value`` where ``x`` is a ``T.alloc_var`` stores into it (``x += 1`` too).

- ``break`` under a traced condition leaves the device loop around it (``T.loop_break()``:
  a ``T.serial`` loop's threads that run it leave the loop, as in CUDA).

- ``while test:`` loops in Python while ``test`` is a Python value, and is a device loop when
  it is traced (a ``T.serial`` loop that leaves at the top of the first iteration where
  ``test`` is false; a ``break`` in it under a traced condition leaves it too).

What stays an error: ``while ... else``, a ``while`` whose test turns from a Python value into
a traced one, ``continue`` under a traced condition other than as the last statement of a
branch of an ``if`` of the loop's own body (that one skips the rest of the iteration),
``return`` under one, ``break`` under one out of a Python loop (it runs at trace time), a traced value in a Python ``for``'s
iterable or ``range`` bound where a device loop is not written (use ``T.serial``), and
control flow in a helper function called from the kernel (it runs as plain Python: make it
a ``T.macro``).
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap

HELPER = "__tilers_flow__"
_UNBOUND = object()


def attr_name(node):
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def is_kernel_with(node) -> bool:
    return isinstance(node, ast.With) and any(
        isinstance(i.context_expr, ast.Call) and attr_name(i.context_expr.func) in ("Kernel", "ClusterKernel")
        for i in node.items
    )


def _thunk(expr):
    return ast.copy_location(
        ast.Lambda(
            args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=expr,
        ),
        expr,
    )


class ControlFlow(ast.NodeTransformer):
    """Rewrites the statements inside ``with T.Kernel`` (see the module docstring); with
    ``range_loops``, ``for ... in range(...)`` there becomes a ``T.serial`` loop too (the
    eager style, as TileLang's)."""

    def __init__(self, range_loops: bool = False, helper: str = HELPER):
        self.depth = 0
        self.range_loops = range_loops
        self.helper = helper
        self.counter = 0
        self.changed = False

    def h(self, attr, like):
        return ast.copy_location(ast.Attribute(ast.Name(self.helper, ast.Load()), attr, ast.Load()), like)

    # nested functions run as written (a helper called from the kernel is plain Python)
    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_With(self, node):
        kernel = is_kernel_with(node)
        self.depth += kernel
        self.generic_visit(node)
        self.depth -= kernel
        return node

    def visit_For(self, node):
        if self.depth:
            node.body = _lift_continues(node.body)
        self.generic_visit(node)
        call = node.iter
        if (self.depth and self.range_loops and isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name) and call.func.id == "range"):
            call.func = self.h("range", call.func)
            self.changed = True
        if self.depth and _breaks(node.body):
            # a `break` under a traced condition needs to know which loop it leaves
            node.iter = ast.copy_location(ast.Call(self.h("loop", node.iter), [node.iter], []), node.iter)
            self.changed = True
        return node

    def visit_While(self, node):
        if self.depth:
            node.body = _lift_continues(node.body)
        self.generic_visit(node)
        if not self.depth or node.orelse:
            return node
        # `while test: body` -> `for _ in __tilers_flow__.while_(lambda: test): body`: a Python
        # loop while `test` is a Python value, a device loop (T.serial with a break at the
        # top) when it is traced
        self.changed = True
        self.counter += 1
        target = ast.copy_location(ast.Name(f"__tilers_while{self.counter}", ast.Store()), node)
        loop = ast.copy_location(ast.Call(self.h("while_", node), [_thunk(node.test)], []), node)
        return ast.copy_location(ast.For(target=target, iter=loop, body=node.body, orelse=[]), node)

    def visit_If(self, node):
        self.generic_visit(node)
        if not self.depth:
            return node
        self.changed = True
        jump = _jump_in(node.body + node.orelse)
        self.counter += 1
        name = f"__tilers_cond{self.counter}"
        store = ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], node.test), node)
        test = ast.copy_location(ast.Name(name, ast.Load()), node)
        traced = ast.copy_location(ast.Call(self.h("traced", node), [test], []), node)
        if jump is not None and jump[0] == "break" and _jump_in(node.body + node.orelse, "break") is None:
            # only breaks: on the device they leave the device loop (T.loop_break())
            device_body = _device_breaks(copy.deepcopy(node.body), self)
            device_else = _device_breaks(copy.deepcopy(node.orelse), self)
            device = [ast.copy_location(ast.With(
                items=[ast.withitem(ast.copy_location(ast.Call(self.h("If", node), [test], []), node))],
                body=device_body), node)]
            if device_else:
                device.append(ast.copy_location(ast.With(
                    items=[ast.withitem(ast.copy_location(ast.Call(self.h("Else", node), [], []), node))],
                    body=device_else), node.orelse[0]))
            python = ast.copy_location(ast.If(test, node.body, node.orelse), node)
            return [store, ast.copy_location(ast.If(traced, device, [python]), node)]
        if jump is not None:
            # a device branch cannot leave the traced loop or function: an error at the jump
            kind, at = jump
            error = ast.copy_location(
                ast.Expr(ast.Call(self.h("no_jump", at), [ast.Constant(kind)], [])), at
            )
            python = ast.copy_location(ast.If(test, node.body, node.orelse), node)
            return [store, ast.copy_location(ast.If(traced, [error], [python]), node)]
        device = [
            ast.copy_location(
                ast.With(
                    items=[ast.withitem(ast.copy_location(ast.Call(self.h("If", node), [test], []), node))],
                    body=node.body,
                ),
                node,
            )
        ]
        if node.orelse:
            device.append(
                ast.copy_location(
                    ast.With(
                        items=[ast.withitem(ast.copy_location(ast.Call(self.h("Else", node), [], []), node))],
                        body=node.orelse,
                    ),
                    node.orelse[0],
                )
            )
        python = ast.copy_location(ast.If(test, node.body, node.orelse), node)
        return [store, ast.copy_location(ast.If(traced, device, [python]), node)]

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if not self.depth:
            return node
        self.changed = True
        attr = "and_" if isinstance(node.op, ast.And) else "or_"
        first, *rest = node.values
        return ast.copy_location(ast.Call(self.h(attr, node), [first] + [_thunk(v) for v in rest], []), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if not self.depth or not isinstance(node.op, ast.Not):
            return node
        self.changed = True
        return ast.copy_location(ast.Call(self.h("not_", node), [node.operand], []), node)

    def visit_IfExp(self, node):
        self.generic_visit(node)
        if not self.depth:
            return node
        self.changed = True
        return ast.copy_location(
            ast.Call(self.h("ifexp", node), [node.test, _thunk(node.body), _thunk(node.orelse)], []), node
        )

    def visit_Compare(self, node):
        self.generic_visit(node)
        if not self.depth or len(node.ops) < 2:
            return node
        self.changed = True
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(ast.copy_location(ast.Compare(left, [op], [right]), node))
            left = right
        first, *rest = parts
        return ast.copy_location(ast.Call(self.h("and_", node), [first] + [_thunk(p) for p in rest], []), node)

    def visit_Assign(self, node):
        self.generic_visit(node)
        if (self.depth and len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List))
                and isinstance(node.value, (ast.Tuple, ast.List))
                and len(node.value.elts) == len(node.targets[0].elts)):
            # `a[0], a[1] = a[1], a[0]`: the values are read before any target is written
            self.changed = True
            node.value = ast.copy_location(ast.Call(self.h("bind_all", node), [node.value], []), node)
            return node
        if not self.depth or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return node
        self.changed = True
        name = node.targets[0].id
        current = ast.copy_location(
            ast.Call(
                ast.Attribute(ast.Call(ast.Name("locals", ast.Load()), [], []), "get", ast.Load()),
                [ast.Constant(name), self.h("UNBOUND", node)],
                [],
            ),
            node,
        )
        node.value = ast.copy_location(
            ast.Call(self.h("assign", node), [current, node.value, ast.Constant(name)], []), node
        )
        return node


def _lift_continues(body):
    """A loop body's ``if c: A; continue`` (an ``if`` of the body itself, one branch ending in
    ``continue``, no other jump in it) as ``if c: A else: <the rest of the body>`` (likewise
    for the ``else`` branch): the same loop in Python, and under a traced ``c`` a device
    loop whose iterations skip the rest (TileLang's ``continue``)."""
    for i, s in enumerate(body):
        if not isinstance(s, ast.If):
            continue
        for branch, other in (("body", "orelse"), ("orelse", "body")):
            b, o = getattr(s, branch), getattr(s, other)
            if (b and isinstance(b[-1], ast.Continue) and _jump_in(b[:-1]) is None
                    and _jump_in(o) is None):
                rest = _lift_continues(body[i + 1:])
                kept = b[:-1]
                if branch == "body" and not kept:
                    kept = [ast.copy_location(ast.Pass(), b[-1])]
                setattr(s, branch, kept)
                setattr(s, other, o + rest)
                if branch == "orelse" and not s.body:
                    s.body = [ast.copy_location(ast.Pass(), s)]
                return body[:i] + [s]
    return body


def _breaks(body) -> bool:
    """Does `body` (a loop's) hold a `break` of its own (not of a loop inside it)?"""
    return _jump_in(body, "continue", "return") is not None


class _DeviceBreak(ast.NodeTransformer):
    """`break` (of the loop around the statements, not of one inside them) becomes
    ``__tilers_flow__.brk()``."""

    def __init__(self, flow):
        self.flow = flow

    def visit_Break(self, node):
        call = ast.copy_location(ast.Call(self.flow.h("brk", node), [], []), node)
        return ast.copy_location(ast.Expr(call), node)

    def _leave(self, node):
        return node

    visit_For = visit_While = visit_FunctionDef = visit_AsyncFunctionDef = _leave
    visit_Lambda = visit_ClassDef = _leave


def _device_breaks(body, flow):
    t = _DeviceBreak(flow)
    return [t.visit(s) for s in body]


def _jump_in(body, *ignore):
    """(kind, node) of a `break` / `continue` / `return` in `body` that leaves it (not one
    inside a loop or function of its own), kinds in `ignore` left out."""
    pending = list(body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Break) and "break" not in ignore:
            return "break", node
        if isinstance(node, ast.Continue) and "continue" not in ignore:
            return "continue", node
        if isinstance(node, ast.Return) and "return" not in ignore:
            return "return", node
        if isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                             ast.ClassDef)):
            continue
        pending.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))
    return None


class Flow:
    """The helpers the rewritten body calls (``__tilers_flow__``)."""

    UNBOUND = _UNBOUND

    @staticmethod
    def no_jump(kind):
        from ._source import user_error

        raise user_error(
            f"`{kind}` inside an `if` on a traced value: a device branch cannot leave the "
            "loop or function being traced",
            help="guard the statements with the condition instead (if cond: ...), or make the "
            "condition a Python value",
        )

    # per loop being traced whose body has a `break`, innermost last: is it a device loop?
    loops: list = []

    @staticmethod
    def loop(iterable):
        from . import language

        # a device loop (T.serial, T.Parallel, ...: T.loop_break says which it can leave)
        device = inspect.isgenerator(iterable) and iterable.gi_code.co_filename == language.__file__
        Flow.loops.append(device)
        try:
            yield from iterable
        finally:
            Flow.loops.pop()

    @staticmethod
    def while_(test):
        """`while test():` in a kernel body: Python's loop while the test is a Python value;
        on a traced one, a device loop that leaves at the top of an iteration where it is
        false (``T.serial`` over 2^31 - 1 iterations with ``T.loop_break()``)."""
        from . import language
        from ._source import user_error

        value = test()
        if not Flow.traced(value):
            while value:
                yield None
                value = test()
                if Flow.traced(value):
                    raise user_error(
                        "the condition of this `while` was a Python value and is now a traced one: "
                        "a loop is either unrolled at trace time or a device loop",
                        help="make the condition traced from the start (a T.alloc_var) or a Python value throughout",
                    )
            return
        Flow.loops.append(True)
        try:
            for _ in language.serial((1 << 31) - 1):
                with language.If(Flow.not_(test())):
                    language.loop_break()
                yield None
        finally:
            Flow.loops.pop()

    @staticmethod
    def brk():
        from . import language
        from ._source import user_error

        if not Flow.loops or not Flow.loops[-1]:
            raise user_error(
                "`break` under a traced condition out of a Python loop: the loop runs at trace "
                "time, so a device value cannot end it",
                help="loop with T.serial(...) to leave the loop on the device",
            )
        language.loop_break()

    @staticmethod
    def traced(value) -> bool:
        from . import _trace

        return isinstance(value, _trace.Expr)

    @staticmethod
    def If(cond):
        from . import language

        return language.If(_as_bool(cond))

    @staticmethod
    def Else():
        from . import language

        return language.Else()

    @staticmethod
    def and_(first, *thunks):
        value = first
        for thunk in thunks:
            if Flow.traced(value):
                other = thunk()
                value = _as_bool(value) & _as_bool(other) if Flow.traced(other) else (
                    _as_bool(value) if other else False)
            elif not value:
                return value
            else:
                value = thunk()
        return value

    @staticmethod
    def or_(first, *thunks):
        value = first
        for thunk in thunks:
            if Flow.traced(value):
                other = thunk()
                value = _as_bool(value) | _as_bool(other) if Flow.traced(other) else (
                    True if other else _as_bool(value))
            elif value:
                return value
            else:
                value = thunk()
        return value

    @staticmethod
    def not_(value):
        if Flow.traced(value):
            from . import _trace

            return _trace.binary("eq", _as_bool(value), False)
        return not value

    @staticmethod
    def ifexp(cond, then, otherwise):
        if Flow.traced(cond):
            from . import language

            return language.if_then_else(_as_bool(cond), then(), otherwise())
        return then() if cond else otherwise()

    @staticmethod
    def bind_all(values):
        """The right side of a tuple assignment: each traced value read from buffers keeps
        its value should an earlier target of the same assignment write those buffers."""
        from . import _trace, language

        builder = getattr(_trace._state, "builder", None)
        if builder is not None and builder.blocks:
            loc = _trace.capture()
            for k, v in enumerate(values):
                if isinstance(v, _trace.Expr) and not isinstance(v, language.Var):
                    builder.bind(f"value{k}", v, loc)
        return values

    @staticmethod
    def assign(current, value, name=None):
        from . import _trace, language

        if isinstance(current, language.Var):
            current.set(value)
            return current
        # a name bound to a traced value read from buffers keeps that value, as TileLang's
        # Let does, should the buffers be written before it is used (Builder.bind)
        if name is not None and isinstance(value, _trace.Expr) and not isinstance(value, language.Var):
            builder = getattr(_trace._state, "builder", None)
            if builder is not None and builder.blocks:
                builder.bind(name, value, _trace.capture())
        return value

    @staticmethod
    def range(*args):
        from . import language as T
        from ._source import user_error

        if not 1 <= len(args) <= 3:
            raise user_error(f"range expected 1 to 3 arguments, got {len(args)}")
        return T.serial(*args)


def _as_bool(value):
    from . import _trace

    if isinstance(value, _trace.Expr) and value.dtype != "bool":
        return value != 0
    return value


# ---------------------------------------------------------------------------------------
# rewriting a function


def syntax(func):
    """(source, ast.FunctionDef) of ``func`` with the file's own line and column numbers."""
    try:
        lines, first = inspect.getsourcelines(func)
    except (OSError, TypeError):
        return None
    source = "".join(lines)
    indent = len(source) - len(source.lstrip())
    text = "if 1:\n" + source if indent else source  # columns stay the file's
    try:
        tree = ast.parse(text)
        offset = first - 2 if indent else first - 1
    except SyntaxError:
        try:
            tree = ast.parse(textwrap.dedent(source))
        except SyntaxError:
            return None
        offset = first - 1
    ast.increment_lineno(tree, offset)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func.__name__:
            return source, node
    return None


def make_maker(func, definition, helpers: list[str]):
    """Compile the rewritten ``definition`` inside a function taking ``helpers`` and the
    original's free names, which returns it (so its globals stay the function's own)."""
    code = func.__code__
    freevars = code.co_freevars
    maker = ast.FunctionDef(
        name="__tilers_make__",
        args=ast.arguments(
            posonlyargs=[], args=[ast.arg(h) for h in helpers] + [ast.arg(n) for n in freevars],
            kwonlyargs=[], kw_defaults=[], defaults=[],
        ),
        body=[definition, ast.Return(ast.Name(definition.name, ast.Load()))],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    ast.copy_location(maker, definition)
    module = ast.Module(body=[maker], type_ignores=[])
    ast.fix_missing_locations(module)
    namespace: dict = {}
    exec(compile(module, code.co_filename, "exec"), func.__globals__, namespace)
    return namespace["__tilers_make__"]


def _from_text(text_code, original) -> bool:
    """Whether ``original`` can have been compiled from the text ``text_code`` was: every
    name, value and source line of the text's code is the original's (not the instructions,
    which differ between compile paths; the original may hold more — pytest's rewritten
    asserts add names and values)."""

    def parts(code):
        consts = {repr(c) for c in code.co_consts if not inspect.iscode(c)}
        # the first line is the prologue's: the decorator's or the def's, as compiled
        lines = sorted({line for _, _, line in code.co_lines() if line is not None})[1:]
        return set(code.co_names), set(code.co_varnames) | set(code.co_freevars), consts, set(lines)

    return all(mine <= theirs for mine, theirs in zip(parts(text_code), parts(original)))


def check_source_is_current(func) -> None:
    """The kernel body is rewritten from the source file as it is now: if the file changed
    after the function was defined (an edit while a notebook or server runs), that text is
    not this function, and running it would mix the two. Compiled as written, the text must
    use only the function's own names, values and lines; else an error says to reload."""
    found = syntax(func)
    if found is None:
        return
    plain = found[1]  # a fresh parse: stripped of what the def statement evaluates
    plain.decorator_list = []
    plain.returns = None
    args = plain.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]:
        arg.annotation = None
    args.defaults = []
    args.kw_defaults = [None] * len(args.kwonlyargs)
    try:
        maker = make_maker(func, plain, [])
        compiled = maker(*([None] * len(func.__code__.co_freevars))).__code__
    except Exception:  # noqa: BLE001 - a check that cannot run does not block the kernel
        return
    if not _from_text(compiled, func.__code__):
        from ._source import user_error

        code = func.__code__
        raise user_error(
            f"the source of '{func.__name__}' in {code.co_filename} changed after it was defined: "
            "tilers reads a kernel's body from its file, which no longer holds this function",
            help="reload the module (importlib.reload, or %autoreload in a notebook) or restart, "
            "so the function and its file agree",
        )


_prim_cache: dict = {}


def prim_func_code(func, inside_kernel: bool = False):
    """The code of a prim_func's function with its kernel body rewritten, or None when the
    body has nothing to rewrite (the function then runs as written). Its free names: the
    helper ``__tilers_flow__`` and any of the original's. ``inside_kernel``: the whole body
    is kernel code (a ``T.macro``)."""
    # by identity: code objects of two files compare equal when only their file differs
    key = (id(func.__code__), inside_kernel)
    known = _prim_cache.get(key)
    if known is not None and known[0] is func.__code__:
        return known[1]
    result = None
    found = syntax(func)
    if found is not None:
        _, definition = found
        definition.decorator_list = []
        definition.returns = None
        args = definition.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            arg.annotation = None  # evaluated by the tracer from the original
        for arg in (args.vararg, args.kwarg):
            if arg is not None:
                arg.annotation = None
        flow = ControlFlow()
        flow.depth = int(inside_kernel)
        definition.body = [flow.visit(s) for s in definition.body]
        flat = []
        for s in definition.body:
            flat.extend(s if isinstance(s, list) else [s])
        definition.body = flat
        if flow.changed:  # the rewritten text runs: it must still be this function's
            check_source_is_current(func)
            ast.fix_missing_locations(definition)
            maker = make_maker(func, definition, [HELPER])
            inner = maker(Flow, *([None] * len(func.__code__.co_freevars)))
            result = inner.__code__
    _prim_cache[key] = (func.__code__, result)
    return result
