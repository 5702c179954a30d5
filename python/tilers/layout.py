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
# TileLang's fixed-swizzle variants: tilers picks the swizzle from the tile's width (and
# its instruction's needs), so each is the swizzled layout
make_wgmma_swizzled_layout = make_swizzled_layout
make_full_bank_swizzled_layout = make_swizzled_layout
make_half_bank_swizzled_layout = make_swizzled_layout
make_quarter_bank_swizzled_layout = make_swizzled_layout
make_linear_layout = _unsupported("make_linear_layout")

__all__ = ["Fragment", "Layout", "make_full_bank_swizzled_layout", "make_half_bank_swizzled_layout",
           "make_linear_layout", "make_quarter_bank_swizzled_layout", "make_swizzled_layout",
           "make_wgmma_swizzled_layout"]
