"""TileLang's ``tilelang.transform`` names its examples use: ``PassConfigKey``."""

from .pass_config import PassConfigKey

__all__ = ["PassConfigKey"]
