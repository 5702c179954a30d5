"""TileLang's ``tilelang.contrib`` names that kernels use: ``nvcc`` (the GPU's compute
version)."""

from . import nvcc

__all__ = ["nvcc"]
