"""Where the user is: the innermost frame outside the tilers package as file:line:col, and
errors that point there. Shared by the tracer (`_trace`) and the runtime (`kernel`)."""

from __future__ import annotations

import linecache
import os
import sys
from collections import namedtuple

from .errors import TileError, diagnostic_error

# Frames whose file lies in this directory are tilers internals; a location is the innermost
# frame outside it.
_PACKAGE_DIRS = tuple(
    {os.path.dirname(__file__) + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep}
)

# A user source location; line and column are 1-based, column 0 means unknown.
Loc = namedtuple("Loc", ["file", "line", "column"])


_positions_cache: dict = {}


def capture() -> Loc:
    """The location being executed in the innermost frame outside the tilers package."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIRS):
        frame = frame.f_back
    if frame is None:
        return Loc("<unknown>", 0, 0)
    return frame_loc(frame)


def frame_loc(frame) -> Loc:
    code = frame.f_code
    line = frame.f_lineno or 0
    column = 0
    positions = _positions_cache.get(code)
    if positions is None:
        positions = list(code.co_positions()) if hasattr(code, "co_positions") else []
        _positions_cache[code] = positions
    index = frame.f_lasti // 2
    if 0 <= index < len(positions):
        start_line, _, start_byte, _ = positions[index]
        if start_line == line and start_byte is not None:
            # co_positions counts UTF-8 bytes; diagnostics count characters.
            text = linecache.getline(code.co_filename, line).encode()
            column = len(text[:start_byte].decode(errors="ignore")) + 1
    return Loc(code.co_filename, line, column)


def user_error(message: str, help: str | None = None, loc: Loc | None = None) -> TileError:
    """A TileError pointing at ``loc`` (by default the user's line being executed)."""
    if loc is None:
        loc = capture()
    text = linecache.getline(loc.file, loc.line) if loc.line else ""
    return diagnostic_error(loc.file, loc.line, loc.column, message, text, help)


def line_text(loc: Loc) -> str:
    return linecache.getline(loc.file, loc.line)


def add_call_site(error: Exception, help: str) -> Exception:
    """Note under ``error``'s message the user's line being executed, with a caret and help.

    For errors whose message stays as it is (a TypeError of a call): Python shows notes
    after the message (3.11+; older versions keep the bare message).
    """
    loc = capture()
    if loc.line and hasattr(error, "add_note"):
        text = diagnostic_error(loc.file, loc.line, loc.column, "", line_text(loc), help)
        error.add_note(str(text).replace(": error: ", ": in this call", 1))
    return error
