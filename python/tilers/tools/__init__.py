"""TileLang's ``tilelang.tools`` names: ``plot_layout`` (a picture of a T.Layout or a
T.Fragment)."""

from .plot_layout import plot_layout

__all__ = ["plot_layout"]
