"""TileLang's ``tilelang.cuda`` names that user kernels import: ``tilers.cuda.intrinsics``."""

from . import intrinsics

__all__ = ["intrinsics"]
