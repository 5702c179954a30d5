"""tilers reads a kernel's body from its file (the control-flow rewrite): when the file
changed after the function was defined (an edit while a notebook or a server runs), the text
there is not this function any more, and tracing it would mix the two — an error says to
reload. Edits that leave the function as it was (a comment) trace as before. An eager
@tilers.jit body is read when the decorator runs, so it keeps the text it was defined with."""

import importlib
import os
import sys
import textwrap

import pytest
import tilers
from tilers import TileError

SOURCE = textwrap.dedent('''
    import tilers.language as T


    def make(n):
        @T.prim_func
        def f(A: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(n):
                    if i < 3:
                        A[i] = 1.0

        return f
''')


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A fresh module holding SOURCE, and a function that rewrites its file."""
    name = f"stale_kernel_{abs(hash(str(tmp_path)))}"
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module(name)

    def edit(text):
        stat = path.stat()
        path.write_text(text)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))

    yield mod, edit
    sys.modules.pop(name, None)


@pytest.mark.parametrize("change", [
    lambda s: s.replace("A[i] = 1.0", "A[i] = 2.0"),
    lambda s: s.replace("i < 3", "i < 4"),
    lambda s: "\n\n" + s,  # the function moved down the file
], ids=["constant", "condition", "moved"])
def test_a_kernel_whose_file_changed_is_an_error(module, change):
    mod, edit = module
    edit(change(SOURCE))
    with pytest.raises(TileError, match="changed after it was defined") as err:
        tilers.compile(mod.make(8), target="interp")
    assert "reload the module" in str(err.value)
    importlib.reload(mod)
    tilers.compile(mod.make(8), target="interp")  # reloaded: file and function agree


def test_a_comment_or_an_unchanged_file_traces(module):
    mod, edit = module
    edit(SOURCE.replace("if i < 3:", "if i < 3:  # the first three"))
    kernel = tilers.compile(mod.make(8), target="interp")
    import numpy as np

    a = np.zeros(8, np.float32)
    kernel(a)
    assert a.tolist() == [1, 1, 1, 0, 0, 0, 0, 0]


EAGER = textwrap.dedent('''
    import tilers
    import tilers.language as T


    @tilers.jit
    def double(A, dtype=T.float32):
        N = T.const("N")
        A: T.Tensor((N,), dtype)
        B = T.empty((N,), dtype)
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                B[i] = A[i] * 2.0
        return B
''')


def test_an_eager_function_keeps_the_text_it_was_defined_with(tmp_path, monkeypatch):
    """@tilers.jit reads an eager body when it decorates it: a later edit of the file does
    not reach the function until the module is reloaded."""
    import numpy as np

    path = tmp_path / "stale_eager.py"
    path.write_text(EAGER)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("stale_eager", None)
    mod = importlib.import_module("stale_eager")
    try:
        stat = path.stat()
        path.write_text(EAGER.replace("* 2.0", "* 3.0"))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
        assert mod.double(np.ones(4, np.float32)).tolist() == [2.0] * 4
        importlib.reload(mod)
        assert mod.double(np.ones(4, np.float32)).tolist() == [3.0] * 4
    finally:
        sys.modules.pop("stale_eager", None)
