"""Skips tests marked `gpu` where no CUDA GPU (or no CUDA build of torch) is usable."""

import functools
import os
import tempfile

import pytest

# compiled cubins and tuning records of the test run go to a throwaway cache
os.environ.setdefault("TILERS_CACHE_DIR", tempfile.mkdtemp(prefix="tilers-test-cache-"))


@functools.cache
def gpu_skip_reason() -> str | None:
    """Why GPU tests cannot run here, or None when they can. Probed once, in-process."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return "cuda-bindings is not installed"
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError:  # raised when libcuda.so cannot be loaded
        return "no CUDA driver (libcuda) on this machine"
    if err != driver.CUresult.CUDA_SUCCESS:
        return f"cuInit failed: {err}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return "no CUDA device"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def compile_count(monkeypatch):
    """The programs the Rust core compiles during a test (a recompile would show here); the
    in-process memo of compiled programs starts empty."""
    import importlib

    from tilers import _tilers

    calls = []
    real = _tilers.compile

    def counting(program, options):
        calls.append(program)
        return real(program, options)

    monkeypatch.setattr(_tilers, "compile", counting)
    monkeypatch.setattr(importlib.import_module("tilers.jit"), "_compiled_programs", {})
    return calls

