"""The console commands the package installs (pyproject's [project.scripts]): `tilers-cc`,
the compiler driver of crates/tilers-cc, run through the extension module, so it is on the
PATH wherever tilers is installed (docs/export.md)."""

from __future__ import annotations

import importlib.util
import os
import sys


def nvrtc_site_packages() -> str | None:
    """The site-packages folder holding the nvidia-cuda-nvrtc wheel, or None."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12"):
            if os.path.isfile(os.path.join(location, sub)):
                return os.path.dirname(location)
    return None


def tilers_cc(argv: list[str] | None = None) -> int:
    """`tilers-cc ARGS...`: what the cargo-built binary does (tilers_cc::cli). NVRTC is looked
    up as that binary does, and in the site-packages of this Python's nvidia-cuda-nvrtc."""
    from tilers import _tilers

    site = nvrtc_site_packages()
    if site and "TILERS_SITE_PACKAGES" not in os.environ:
        os.environ["TILERS_SITE_PACKAGES"] = site
    return _tilers.cc_main(sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(tilers_cc())
