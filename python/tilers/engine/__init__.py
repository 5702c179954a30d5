"""TileLang's ``tilelang.engine`` names that kernels import: ``callback`` (post-processing
of the generated CUDA before it is compiled)."""

from . import callback

__all__ = ["callback"]
