"""Integer helpers by TileLang's names: ``tilers.cdiv``, ``tilers.next_power_of_2``."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers: ``tilers.cdiv(1000, 128) == 8``."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two that is at least ``n`` (1 for n <= 1)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


__all__ = ["cdiv", "next_power_of_2"]
