"""Layouts by TileLang's names: ``tilers.layout.make_swizzled_layout`` (the same as
``T.make_swizzled_layout``, for ``T.annotate_layout``), ``Layout`` and ``Fragment`` (the
same as ``T.Layout`` and ``T.Fragment``; see tilers/_user_layout.py)."""

from __future__ import annotations

from . import language as _T
from .errors import TileError


def make_swizzled_layout(buffer, k_major=True, allow_pad=True):
    """``T.make_swizzled_layout(buffer)`` (tilers picks the swizzle from the tile's width;
    ``k_major`` and ``allow_pad`` are TileLang's and have no effect)."""
    return _T.make_swizzled_layout(buffer)


def _unsupported(name):
    def make(*args, **kwargs):
        raise TileError(
            f"tilers.layout.{name} is not supported yet: tilers infers every fragment and "
            "shared layout itself (kernel.layouts() shows them); T.annotate_layout takes "
            "T.make_swizzled_layout(buffer) or a T.Layout"
        )

    make.__name__ = name
    return make


Layout = _T.Layout
Fragment = _T.Fragment


def _bank_swizzle(line_bytes: int, what: str):
    """TileLang's fixed swizzles. On a buffer, the swizzled layout (tilers picks the swizzle
    from the tile's width and its instruction's needs). On ``(rows, columns, element_bits)``,
    the layout itself as a T.Layout, to look at (tilers.tools.plot_layout) or annotate: rows
    in groups of 8, 16-byte chunks of a ``line_bytes`` line XOR-permuted by the row within
    its group, stored as [column panel, row group, element in the panel's 8 lines]."""
    chunks = line_bytes // 16

    def make(*args, **kwargs):
        if len(args) == 1 and not kwargs:
            return _T.make_swizzled_layout(args[0])
        if len(args) != 3:
            raise TypeError(f"{what}(buffer) or {what}(rows, columns, element_bits), got {len(args)} arguments")
        rows, cols, bits = (int(a) for a in args)
        vector = 128 // bits
        if rows % 8 and rows != 4:
            raise ValueError(f"{what}: rows must be a multiple of 8 (or 4), got {rows}")
        if cols % (vector * chunks):
            raise ValueError(
                f"{what}: columns must be a multiple of {vector * chunks} ({line_bytes}-byte lines "
                f"of {bits}-bit elements), got {cols}"
            )
        shift = (8 // chunks).bit_length() - 1  # the row bits that select the XOR

        def fn(i, j):
            s = i % 8
            chunk = j // vector
            c = (chunk % chunks) ^ (s >> shift)
            return [chunk // chunks, i // 8, j % vector + (c + s * chunks) * vector]

        return _T.Layout((rows, cols), fn)

    make.__name__ = what
    return make


make_wgmma_swizzled_layout = make_swizzled_layout
make_full_bank_swizzled_layout = _bank_swizzle(128, "make_full_bank_swizzled_layout")
make_half_bank_swizzled_layout = _bank_swizzle(64, "make_half_bank_swizzled_layout")
make_quarter_bank_swizzled_layout = _bank_swizzle(32, "make_quarter_bank_swizzled_layout")
make_linear_layout = _unsupported("make_linear_layout")

__all__ = ["Fragment", "Layout", "make_full_bank_swizzled_layout", "make_half_bank_swizzled_layout",
           "make_linear_layout", "make_quarter_bank_swizzled_layout", "make_swizzled_layout",
           "make_wgmma_swizzled_layout"]
