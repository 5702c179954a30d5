"""TileLang's ``tilelang.env`` names its examples read: where the caches are."""

from __future__ import annotations

import os


class _Environment:
    """``tilers.env.TILELANG_CACHE_DIR``: tilers' cache folder (``$TILERS_CACHE_DIR`` or
    ``~/.cache/tilers``); ``TILERS_CACHE_DIR`` is the same."""

    @property
    def TILERS_CACHE_DIR(self) -> str:
        from . import cache

        return cache.cache_dir()

    TILELANG_CACHE_DIR = TILERS_CACHE_DIR

    @property
    def TILELANG_TMP_DIR(self) -> str:
        path = os.path.join(self.TILERS_CACHE_DIR, "tmp")
        os.makedirs(path, exist_ok=True)
        return path


env = _Environment()
