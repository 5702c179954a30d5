"""TileError and the rendering of user-facing diagnostics (file:line:col, source line, caret)."""

from __future__ import annotations


class TileError(Exception):
    """A mistake in the user's kernel; the message points at the user's source line.

    ``file``, ``line`` and ``column`` repeat the location shown in the message (or are None
    when the error has no location, e.g. a bad ``tilers.compile`` argument).
    """

    def __init__(
        self,
        message: str,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ):
        super().__init__(message)
        self.file = file
        self.line = line
        self.column = column


def format_diagnostic(
    file: str,
    line: int,
    column: int,
    message: str,
    source_line: str | None = None,
    help: str | None = None,
) -> str:
    """Render one diagnostic.

    ``column`` is 1-based; 0 means unknown, and then no caret is drawn::

        add.py:12:16: error: a traced value cannot be used as a Python bool
            if x > 0:
               ^
        help: use `with T.If(cond):` for statements
    """
    parts = [f"{file}:{line}:{column}: error: {message}"]
    if source_line and source_line.strip():
        text = source_line.rstrip()
        indent = len(text) - len(text.lstrip())
        text = text[indent:]
        parts.append("    " + text)
        caret = column - 1 - indent
        if column > 0 and 0 <= caret <= len(text):
            # Keep tabs so the caret lines up with the text above it.
            lead = "".join("\t" if ch == "\t" else " " for ch in text[:caret])
            parts.append("    " + lead + "^")
    if help:
        parts.append(f"help: {help}")
    return "\n".join(parts)


def diagnostic_error(
    file: str,
    line: int,
    column: int,
    message: str,
    source_line: str | None = None,
    help: str | None = None,
) -> TileError:
    """A TileError whose message is the rendered diagnostic."""
    text = format_diagnostic(file, line, column, message, source_line, help)
    return TileError(text, file=file, line=line, column=column)


def from_compiler(message: str) -> TileError:
    """A TileError for a message rendered by the Rust core, with ``file``, ``line`` and
    ``column`` taken from its first location line (``--> file:line:col``)."""
    for text in message.splitlines():
        text = text.strip()
        if text.startswith("-->") or text.startswith("┌─"):
            place = text.split(maxsplit=1)[1] if " " in text else ""
            parts = place.rsplit(":", 2)
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                return TileError(message, parts[0], int(parts[1]), int(parts[2]))
    return TileError(message)
