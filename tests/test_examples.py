"""The examples run as written (on the interpreter where there is no GPU)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(script, *args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_quickstart_checks_against_a_reference():
    out = run("quickstart.py")
    assert out.returncode == 0, out.stderr
    assert "check: OK" in out.stdout


def test_elementwise_add_prints_its_cuda():
    out = run("elementwise_add.py")
    assert out.returncode == 0, out.stderr
    assert "__global__ void __launch_bounds__(128) add_kernel" in out.stdout


@pytest.mark.gpu
def test_autotune_elementwise_example():
    out = run("autotune_elementwise.py")
    assert out.returncode == 0, out.stderr


def test_decode_gemm_runs_every_schedule():
    out = run("decode_gemm.py")
    assert out.returncode == 0, out.stderr
    for schedule in ("tiles", "splitk", "atomic", "streamk", "gemv"):
        assert f"M= 33 {schedule:7s}: max error" in out.stdout


def test_flash_decoding_runs_contiguous_and_paged():
    out = run("flash_decoding.py")
    assert out.returncode == 0, out.stderr
    assert "contiguous: max error" in out.stdout and "paged (64 tokens): max error" in out.stdout
