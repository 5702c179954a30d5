"""T.print, T.device_assert and lineinfo on the GPU, each in its own process (a device
assert traps, which poisons the CUDA context of the process that ran it)."""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu
TESTS = os.path.dirname(os.path.abspath(__file__))


def run(body: str):
    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, {tests!r})
        import torch, tilers
        import test_debugging as d
        """
    ).format(tests=TESTS) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )


def test_print_from_the_gpu():
    out = run(
        """
        k = tilers.compile(d.printing())
        a = torch.arange(128, device="cuda", dtype=torch.float32).reshape(8, 16).half()
        b = torch.zeros_like(a)
        k(a, b)
        torch.cuda.synchronize()
        assert (b == a).all()
        """
    )
    assert out.returncode == 0, out.stderr
    assert "odd" in out.stdout and "A_s" in out.stdout and "half" in out.stdout


def test_device_assert_passes_and_traps():
    ok = run(
        """
        k = tilers.compile(d.asserting(N=32))
        k(torch.zeros(32, device="cuda"), 1.0)
        torch.cuda.synchronize()
        print("passed")
        """
    )
    assert ok.returncode == 0 and "passed" in ok.stdout, ok.stderr
    bad = run(
        """
        k = tilers.compile(d.asserting(N=32))
        k(torch.full((32,), 5.0, device="cuda"), 1.0)
        torch.cuda.synchronize()
        """
    )
    assert bad.returncode != 0
    assert "device assert failed: A too big" in bad.stdout + bad.stderr
    assert "test_debugging.py:" in bad.stdout + bad.stderr


def test_lineinfo_kernel_runs():
    out = run(
        """
        import kernels
        k = tilers.compile(kernels.add(100, 100), out_idx=[2], lineinfo=True)
        a = torch.randn(100, 100, device="cuda", dtype=torch.float16)
        assert (k(a, a) == a + a).all()
        assert "#line" in k.source
        """
    )
    assert out.returncode == 0, out.stderr


def test_compute_sanitizer_names_the_users_line():
    """With lineinfo=True, compute-sanitizer's report of a bad shared-memory read points at
    the kernel's Python line (test_debugging.py, the SHARED_OUT_OF_RANGE line)."""
    import shutil

    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(sanitizer):
        pytest.skip("compute-sanitizer is not installed")
    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, {tests!r})
        import torch, tilers
        import test_debugging as d
        k = tilers.compile(d.shared_out_of_range(), lineinfo=True)
        a = torch.ones(64, device="cuda")
        b = torch.zeros(64, device="cuda")
        k(a, b, 1 << 20)
        torch.cuda.synchronize()
        """
    ).format(tests=TESTS)
    out = subprocess.run(
        [sanitizer, "--tool", "memcheck", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = out.stdout + out.stderr
    sys.path.insert(0, TESTS)
    import test_debugging as d

    line = d.line_of("SHARED_OUT_OF_RANGE")
    assert "Invalid __shared__ read" in report, report[-3000:]
    assert f"test_debugging.py:{line}" in report, report[-3000:]
